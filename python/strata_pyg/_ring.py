"""The client side of the shared-memory ring (worker mode): the child
`strata serve` writes each batch's tensors into a slot of a file in
/dev/shm (layout: serve/shmring/doc.go, ShmControl in the proto file),
and this module maps the slot and wraps the tensors without a copy.

Lifetime of a batch's tensors: they are views of their slot until the
loader releases it, which it does when the next-but-one batch is asked
for (the loop variable of ``for batch in loader`` still holds the
previous batch while the next one is fetched) or at the end of the
epoch. A batch (or any tensor or view of it) still referenced then is
first moved out of the ring: its slot's pages are swapped for a private
copy at the same address (mremap), so every reference stays valid and
keeps its values while the server reuses the slot. Where that is not
possible the ring copies every batch as it hands it out.
"""

import ctypes
import mmap
import os
import struct
import sys
import threading
import weakref
import zlib

import numpy as np
import torch

RING_MAGIC = b"STRATARG"
SLOT_MAGIC = b"STRATASL"
VERSION = 1
RING_HEADER_BYTES = 4096
SLOT_HEADER_BYTES = 1024
ENTRY_BYTES = 72
NAME_BYTES = 16
MAX_TENSORS = 8
MAX_RANK = 4
MAX_SLOTS = 1024
SLOT_ALIGN = 4096
DATA_ALIGN = 64
MAX_SLOT_BYTES = 1 << 40
_TABLE = 40

# 4: bfloat16 (a relay's ring carries features as the server sent them),
# read as int16 and viewed as torch.bfloat16 (numpy has no bfloat16).
DTYPES = {1: np.dtype("<i4"), 2: np.dtype("<i8"), 3: np.dtype("<f4"), 4: np.dtype("<i2")}
BFLOAT16 = 4


class RingError(ValueError):
    """A ring or slot header that does not hold together: what and where."""


def parse_ring_header(b):
    """(slots, slot_bytes, nonce) of a ring header (at least 36 bytes)."""
    if len(b) < 36:
        raise RingError(f"ring header: {len(b)} bytes, want at least 36")
    if b[:8] != RING_MAGIC:
        raise RingError(f"ring header: magic {bytes(b[:8])!r}, want {RING_MAGIC!r}")
    version, slots, slot_bytes, nonce, crc = struct.unpack_from("<IIQQI", b, 8)
    if crc != zlib.crc32(bytes(b[:32])):
        raise RingError(f"ring header: checksum {crc:08x}, computed {zlib.crc32(bytes(b[:32])):08x}")
    if version != VERSION:
        raise RingError(f"ring header: version {version}, this strata_pyg reads {VERSION}")
    if not 1 <= slots <= MAX_SLOTS:
        raise RingError(f"ring header: {slots} slots, want 1..{MAX_SLOTS}")
    if not SLOT_ALIGN <= slot_bytes <= MAX_SLOT_BYTES or slot_bytes % SLOT_ALIGN:
        raise RingError(f"ring header: slot size {slot_bytes}, want a multiple of {SLOT_ALIGN} up to {MAX_SLOT_BYTES}")
    return slots, slot_bytes, nonce


def parse_slot_header(b, slot_bytes, seq, what="slot"):
    """The tensors of a slot header (``b``: its first SLOT_HEADER_BYTES,
    copied out of the mapping): a list of (name, dtype, shape, offset,
    nbytes), checked as the Go reader checks them (shmring.ParseSlotHeader):
    magic, version, checksum, the sequence the message names, and each
    tensor's name, dtype, rank, shape, size and place within the bytes in
    use, without overlaps."""
    if len(b) < SLOT_HEADER_BYTES:
        raise RingError(f"{what}: {len(b)} bytes, want at least {SLOT_HEADER_BYTES}")
    if b[:8] != SLOT_MAGIC:
        raise RingError(f"{what}: magic {bytes(b[:8])!r}, want {SLOT_MAGIC!r} (not written?)")
    version, count, sequence, used, _reserved, crc = struct.unpack_from("<IIQQII", b, 8)
    if version != VERSION:
        raise RingError(f"{what}: version {version}, this strata_pyg reads {VERSION}")
    if count > MAX_TENSORS:
        raise RingError(f"{what}: {count} tensors, at most {MAX_TENSORS}")
    table = bytes(b[_TABLE:_TABLE + count * ENTRY_BYTES])
    want = zlib.crc32(table, zlib.crc32(bytes(b[:36])))
    if crc != want:
        raise RingError(f"{what}: checksum {crc:08x}, computed {want:08x}")
    if sequence != seq:
        raise RingError(f"{what}: holds batch {sequence}, the message says {seq} (stale or overwritten slot)")
    if not SLOT_HEADER_BYTES <= used <= slot_bytes:
        raise RingError(f"{what}: {used} bytes used, want {SLOT_HEADER_BYTES}..{slot_bytes}")
    out, names, end = [], set(), SLOT_HEADER_BYTES
    for i in range(count):
        e = table[i * ENTRY_BYTES:(i + 1) * ENTRY_BYTES]
        raw = e[:NAME_BYTES]
        name = raw.rstrip(b"\0")
        if b"\0" in name or not name or any(c <= 32 or c > 126 for c in name):
            raise RingError(f"{what}: tensor {i}: bad name {raw!r}")
        name = name.decode()
        if name in names:
            raise RingError(f"{what}: tensor {i}: name {name!r} repeats")
        names.add(name)
        code, rank = struct.unpack_from("<II", e, 16)
        dims = struct.unpack_from("<4q", e, 24)
        offset, nbytes = struct.unpack_from("<QQ", e, 56)
        dt = DTYPES.get(code)
        if dt is None:
            raise RingError(f"{what}: tensor {name}: unknown dtype {code}")
        if rank > MAX_RANK:
            raise RingError(f"{what}: tensor {name}: rank {rank}, at most {MAX_RANK}")
        if any(d != 0 for d in dims[rank:]):
            raise RingError(f"{what}: tensor {name}: unused dimensions {dims[rank:]} are not 0")
        shape = dims[:rank]
        n = 1
        for d in shape:
            if d < 0:
                raise RingError(f"{what}: tensor {name}: shape {shape}")
            n *= d
        if n * dt.itemsize != nbytes or nbytes > MAX_SLOT_BYTES:
            raise RingError(f"{what}: tensor {name}: {nbytes} bytes, shape {shape} of {dt} needs {n * dt.itemsize}")
        if offset % DATA_ALIGN or offset < end or offset > used or nbytes > used - offset:
            raise RingError(f"{what}: tensor {name}: bytes [{offset}, +{nbytes}) misaligned, overlapping the "
                            f"previous tensor (ending at {end}) or past the {used} in use")
        end = offset + nbytes
        out.append((name, dt, shape, offset, nbytes))
    return out


# -- moving a slot's pages out of the ring -----------------------------------

_PROT_RW = 0x3
_MAP_PRIVATE_ANON = 0x02 | 0x20
_MREMAP_MAYMOVE_FIXED = 0x1 | 0x2
_libc = None


def _load_libc():
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.mremap.restype = ctypes.c_void_p
        libc.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc = libc
    return _libc


def _address(mm):
    a = np.frombuffer(mm, dtype=np.uint8)
    try:
        return a.ctypes.data
    finally:
        del a


def _swap_private(mm, size, used):
    """Replaces the pages of the mapping mm (size bytes) by a private copy
    of its first ``used`` bytes, at the same address: everything that
    points into mm keeps its values, and the file's pages are free again."""
    libc = _load_libc()
    addr = _address(mm)
    anon = libc.mmap(None, size, _PROT_RW, _MAP_PRIVATE_ANON, -1, 0)
    if anon is None or anon == ctypes.c_void_p(-1).value:
        raise OSError(ctypes.get_errno(), "mmap of a private copy failed")
    ctypes.memmove(anon, addr, used)
    got = libc.mremap(anon, size, size, _MREMAP_MAYMOVE_FIXED, addr)
    if got != addr:
        err = ctypes.get_errno()
        libc.munmap(anon, size)
        raise OSError(err, "mremap over the ring slot failed")


_can_swap = None


def can_swap():
    """Whether _swap_private works here (Linux, glibc or musl, no seccomp
    filter against mremap); checked once on a scratch mapping."""
    global _can_swap
    if _can_swap is None:
        ok = False
        if sys.platform.startswith("linux"):
            try:
                mm = mmap.mmap(-1, 2 * mmap.PAGESIZE)
                mm[:4] = b"ring"
                a = np.frombuffer(mm, dtype=np.uint8)
                _swap_private(mm, 2 * mmap.PAGESIZE, 4)
                ok = bytes(a[:4]) == b"ring"
                del a
                mm.close()
            except (OSError, AttributeError, ValueError, BufferError):
                ok = False
        _can_swap = ok
    return _can_swap


# -- the ring ------------------------------------------------------------------


class _Slot:
    __slots__ = ("mm", "ref", "seq", "used", "pinned")

    def __init__(self, mm):
        self.mm = mm
        self.ref = None  # weakref to the array every tensor of the batch views
        self.seq = -1
        self.used = 0
        self.pinned = False


class Ring:
    """A stream's ring, mapped from the file the first ShmSlot names.
    ``unlink``: remove the file once mapped (the loader's own child: the
    memory then lives only as long as the mappings)."""

    def __init__(self, ref, pin=False, unlink=False):
        self.path = ref.path
        self.nonce = ref.nonce
        self.fd = os.open(ref.path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        try:
            size = os.fstat(self.fd).st_size
            head = os.pread(self.fd, 64, 0)
            slots, slot_bytes, nonce = parse_ring_header(head)
            if (slots, slot_bytes, nonce) != (ref.num_slots, ref.slot_bytes, ref.nonce):
                raise RingError(f"ring {ref.path}: header says {slots} slots of {slot_bytes} bytes (nonce {nonce:x}), "
                                f"the stream {ref.num_slots} of {ref.slot_bytes} (nonce {ref.nonce:x})")
            if size != RING_HEADER_BYTES + slots * slot_bytes:
                raise RingError(f"ring {ref.path}: {size} bytes, its header says {RING_HEADER_BYTES + slots * slot_bytes}")
            if unlink:
                os.unlink(ref.path)
        except BaseException:
            os.close(self.fd)
            raise
        self.slots, self.slot_bytes = slots, slot_bytes
        self._maps = [None] * slots
        self.copy = not can_swap()  # then every batch is copied out at once
        self.pin = bool(pin) and torch.cuda.is_available()
        self.detached = 0  # batches moved out of the ring (kept by the caller)
        self.lock = threading.Lock()

    def check(self, ref):
        if ref.path != self.path or ref.nonce != self.nonce or ref.num_slots != self.slots or \
                ref.slot_bytes != self.slot_bytes or ref.slot >= self.slots:
            raise RingError(f"slot reference {ref.slot} of {ref.path} does not match the stream's ring {self.path}")

    def _slot(self, k):
        s = self._maps[k]
        if s is None:
            mm = mmap.mmap(self.fd, self.slot_bytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE,
                           offset=RING_HEADER_BYTES + k * self.slot_bytes)
            s = self._maps[k] = _Slot(mm)
            if self.pin:
                s.pinned = _pin(mm, self.slot_bytes)
                if not s.pinned:
                    self.pin = False
        return s

    def tensors(self, ref):
        """The batch in slot ref.slot: a dict of torch tensors viewing the
        slot (copies when the ring cannot move slots out), after checking
        its header."""
        self.check(ref)
        k = ref.slot
        s = self._slot(k)
        if s.ref is not None and s.ref() is not None:
            raise RingError(f"slot {k} holds batch {s.seq}, still in use, and the server wrote batch {ref.sequence} there")
        entries = parse_slot_header(s.mm[:SLOT_HEADER_BYTES], self.slot_bytes, ref.sequence, f"{self.path} slot {k}")
        base = np.frombuffer(s.mm, dtype=np.uint8)
        out = {}
        for name, dt, shape, off, nb in entries:
            a = base[off:off + nb].view(dt).reshape(shape)
            if self.copy:
                a = a.copy()
            t = torch.from_numpy(a)
            out[name] = t.view(torch.bfloat16) if dt == DTYPES[BFLOAT16] else t
        s.seq, s.used = ref.sequence, max((off + nb for _, _, _, off, nb in entries), default=SLOT_HEADER_BYTES)
        s.ref = None if self.copy else weakref.ref(base)
        del base
        return out

    def in_use(self, k):
        """Whether anything still points into slot k."""
        s = self._maps[k]
        return s is not None and s.ref is not None and s.ref() is not None

    def detach(self, k):
        """Moves slot k's batch out of the ring (its references keep their
        values) and maps the slot afresh for the server's next batch."""
        s = self._maps[k]
        if s is None or s.ref is None or s.ref() is None:
            return
        if s.pinned:
            torch.cuda.synchronize()  # no copy from the old pages in flight
            _unpin(s.mm)
        _swap_private(s.mm, self.slot_bytes, s.used)
        self._maps[k] = None  # the old mapping lives on with its references
        self.detached += 1

    def close(self):
        """Unmaps what no batch points into; the rest is unmapped when its
        last reference goes."""
        for k, s in enumerate(self._maps):
            if s is None:
                continue
            if s.pinned:
                if s.ref is not None and s.ref() is not None:
                    continue  # still viewed: unregistering under it would be wrong
                torch.cuda.synchronize()
                _unpin(s.mm)
            if s.ref is None or s.ref() is None:
                try:
                    s.mm.close()
                except BufferError:
                    pass  # a stray view: freed with it
            self._maps[k] = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _pin(mm, size):
    """Registers a slot with CUDA (pinned: asynchronous copies to the GPU);
    False if that fails."""
    try:
        err = torch.cuda.cudart().cudaHostRegister(_address(mm), size, 0)
        return int(getattr(err, "value", err)) == 0
    except Exception:  # noqa: BLE001 - no pinning is only slower
        return False


def _unpin(mm):
    try:
        torch.cuda.cudart().cudaHostUnregister(_address(mm))
    except Exception:  # noqa: BLE001
        pass
