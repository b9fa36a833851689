// Package shmring is the shared-memory ring of `strata serve`'s worker
// mode: a file (in /dev/shm, in a directory private to the trainer) of
// fixed-size slots into which the server writes each batch's tensors, so
// that the trainer (python/strata_pyg) maps them without a copy. The
// gRPC stream (serve, SampleShm) carries only which slot holds which
// batch, and the trainer's releases.
//
// # Layout
//
// All numbers little-endian. The file starts with a RingHeaderBytes
// header:
//
//	0  magic      "STRATARG"
//	8  version    uint32 (Version)
//	12 num_slots  uint32, 1..MaxSlots
//	16 slot_bytes uint64, a multiple of SlotAlign, >= MinSlotBytes
//	24 nonce      uint64 (random; the stream's messages repeat it)
//	32 crc        uint32, CRC-32 (IEEE) of bytes [0, 32)
//
// then num_slots slots of slot_bytes each (slot k at RingHeaderBytes +
// k*slot_bytes). A slot starts with a SlotHeaderBytes header:
//
//	0  magic    "STRATASL"
//	8  version  uint32 (Version)
//	12 count    uint32 tensors, 0..MaxTensors
//	16 sequence uint64: the stream's batch number
//	24 used     uint64: bytes of the slot in use, header included
//	32 reserved uint32 (0)
//	36 crc      uint32, CRC-32 (IEEE) of bytes [0, 36) then of the table
//	40 table    count entries of EntryBytes:
//	   0  name   16 bytes, ASCII, NUL-padded
//	   16 dtype  uint32 (DTypeInt32, DTypeInt64, DTypeFloat32, DTypeBFloat16: servepb's)
//	   20 rank   uint32, 0..MaxRank
//	   24 shape  4 x int64 (unused dimensions 0)
//	   56 offset uint64 from the slot's start, a multiple of DataAlign, >= SlotHeaderBytes
//	   64 bytes  uint64 = product(shape) * itemsize
//
// Tensors do not overlap and end within used. The checksum covers the
// header and the table, not the data: the reader checks every length and
// offset against the slot instead (a CRC of hundreds of megabytes per
// batch would cost more than the copy the ring avoids).
//
// # Lifetime
//
// Create makes the file (O_EXCL, mode 0600), reserves its memory with
// fallocate (so a full /dev/shm is an error here, not a SIGBUS when a
// slot is first written) and maps it; Close unmaps and removes it. The
// reader may remove the file once it has mapped it: the memory lives
// until both sides unmap.
package shmring
