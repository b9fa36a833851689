"""Worker mode: a `strata serve` child process on a unix socket, which
never outlives the loader that uses it, and writes the batches into
shared-memory rings in its directory (in /dev/shm).

The child gets a random shared secret, listens on a socket in a private
directory (mode 0700), and runs with --exit-with-parent: it drains and
exits when its standard input (a pipe this process holds) closes, which
the kernel does however this process dies, SIGKILL included, or when its
parent changes. close() (also called by the loaders' close() and
__del__, and at interpreter exit) closes that pipe, then terminates and
finally kills the child if it does not go.
"""

import atexit
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import weakref

from ._rpc import Connection
from .errors import StrataError

_live = weakref.WeakSet()
_lock = threading.Lock()


@atexit.register
def _close_all():
    for s in list(_live):
        s.close()


def find_strata(strata_bin=None):
    """The strata binary: the argument, else $STRATA_BIN, else `strata` on PATH."""
    b = strata_bin or os.environ.get("STRATA_BIN") or shutil.which("strata")
    if not b:
        raise FileNotFoundError("strata_pyg: no strata binary: pass strata_bin=..., set STRATA_BIN, "
                                "or put strata on PATH (go build -o strata ./cmd/strata)")
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        raise FileNotFoundError(f"strata_pyg: {b} is not an executable file (strata_bin or STRATA_BIN)")
    return b


SHM_ROOT = "/dev/shm"


def _scratch_root():
    # Memory-backed when possible: the arrays handed to the server are
    # read once and deleted, and the shared-memory rings live there.
    d = SHM_ROOT
    if os.path.isdir(d) and os.access(d, os.W_OK):
        return d
    return None


def _on_shm(d):
    root = _scratch_root()
    return root is not None and os.path.dirname(os.path.abspath(d)) == os.path.abspath(root)


class LocalServer:
    """A child `strata serve` over ``dataset`` (a Strata dataset directory,
    a built-in name, or a folder of .npy arrays written by the caller in
    ``workdir``); with ``relay`` (server addresses) a child `strata relay`
    instead, which writes those servers' batches into its rings (``env``:
    more of the child's environment, such as the upstream secret)."""

    def __init__(self, dataset, strata_bin=None, device="cpu", num_nodes=None, start_timeout=120.0,
                 workdir=None, args=(), relay=None, env=None):
        self.dir = workdir or tempfile.mkdtemp(prefix="strata-pyg-", dir=_scratch_root())
        os.chmod(self.dir, 0o700)
        self.socket = os.path.join(self.dir, "serve.sock")
        self.address = "unix:" + self.socket
        self.secret = secrets.token_hex(16)
        self._log = tempfile.TemporaryFile()
        if relay is not None:
            cmd = [find_strata(strata_bin), "--quiet", "relay", "--upstream", ",".join(relay), "--listen", self.address,
                   "--exit-with-parent", *args]
        else:
            cmd = [find_strata(strata_bin), "--quiet", "serve", "--dataset", str(dataset), "--listen", self.address,
                   "--exit-with-parent", "--device", device, *args]
        # The shared-memory rings of worker mode go into the same private
        # directory when it is in /dev/shm (SampleShm; else gRPC only).
        self.ring_dir = self.dir if _on_shm(self.dir) else None
        if self.ring_dir:
            cmd += ["--ring-dir", self.ring_dir]
        elif relay is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise StrataError(",".join(relay), "UNAVAILABLE", f"a relay needs a shared-memory directory ({SHM_ROOT})")
        if num_nodes:
            cmd += ["--num-nodes", str(int(num_nodes))]
        env = dict(os.environ, STRATA_SERVE_SECRET=self.secret, **(env or {}))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)  # a terminal's Ctrl-C goes to the trainer, not here
        what = f"strata relay to {', '.join(relay)}" if relay is not None else "strata serve"
        self.name = f"{self.address} ({what}, pid {self.proc.pid})"
        self.refs = 0
        with _lock:
            _live.add(self)
        self.conn = None
        try:
            self.conn = Connection(self.address, secret=self.secret)
            self.conn.address = self.name
            self.info = self._wait_ready(start_timeout)
        except BaseException:
            self.close()
            raise

    def output(self, limit=4000):
        """The last ``limit`` characters the child printed."""
        try:
            self._log.seek(0)
            b = self._log.read()
        except (OSError, ValueError):
            return ""
        return b.decode(errors="replace")[-limit:].strip()

    def exited(self):
        """None while running, else a StrataError saying how it ended."""
        rc = self.proc.poll()
        if rc is None:
            return None
        return StrataError(self.name, "EXITED", f"the server exited with status {rc}; its last output:\n{self.output()}")

    def _wait_ready(self, timeout):
        end = time.monotonic() + timeout
        last = None
        while True:
            err = self.exited()
            if err is not None:
                raise err
            if os.path.exists(self.socket):
                try:
                    return self.conn.info(timeout=2.0)
                except StrataError as e:
                    if e.code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                        raise
                    last = e
            if time.monotonic() > end:
                raise StrataError(self.name, "TIMEOUT", f"the server was not ready within {timeout:.0f} s "
                                  f"(start_timeout); last error: {last}; its output:\n{self.output()}")
            time.sleep(0.05)

    def alive(self):
        return self.proc.poll() is None

    def close(self, timeout=5.0):
        """Stops the child (stdin closed: it drains and exits; then SIGTERM,
        then SIGKILL) and removes its directory. Idempotent."""
        if getattr(self, "conn", None) is not None:
            self.conn.close()  # first: the server's drain waits for its connections
            self.conn = None
        p = getattr(self, "proc", None)
        if p is not None and p.poll() is None:
            try:
                p.stdin.close()
            except OSError:
                pass
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(timeout)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        elif p is not None and p.stdin:
            try:
                p.stdin.close()
            except OSError:
                pass
        if getattr(self, "dir", None):
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        log = getattr(self, "_log", None)
        if log is not None:
            try:
                log.close()
            except OSError:
                pass
        with _lock:
            _live.discard(self)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer (e.g. at interpreter exit)
            pass


# Servers over in-memory PyG graphs, shared by the loaders of one graph
# (a script's train and test loaders): key -> LocalServer.
_shared = {}


def _graph_key(edge_index, num_nodes, device, strata_bin):
    return (id(edge_index), edge_index.data_ptr(), tuple(edge_index.shape), int(num_nodes), device, strata_bin)


def acquire_graph_server(edge_index, num_nodes, device="cpu", strata_bin=None, start_timeout=120.0):
    """The child server over a PyG edge_index ([2, E], row 0 the sources),
    started the first time: the edges are written once as edge_index.npy
    (int32) into the server's private directory, which the server imports
    (`strata serve --dataset DIR --num-nodes N`), and deleted once it has
    loaded them. Release it with release_server."""
    import numpy as np
    key = _graph_key(edge_index, num_nodes, device, strata_bin)
    with _lock:
        s = _shared.get(key)
        if s is not None and s.alive():
            s.refs += 1
            return s
    d = tempfile.mkdtemp(prefix="strata-pyg-", dir=_scratch_root())
    os.chmod(d, 0o700)
    path = os.path.join(d, "edge_index.npy")
    ei = edge_index.detach()
    if ei.device.type != "cpu":
        ei = ei.cpu()
    a = ei.numpy()
    if int(num_nodes) < 2**31 - 1:
        a = a.astype(np.int32)
    try:
        np.save(path, a)
    except OSError:
        shutil.rmtree(d, ignore_errors=True)  # /dev/shm full: disk instead
        d = tempfile.mkdtemp(prefix="strata-pyg-")
        path = os.path.join(d, "edge_index.npy")
        np.save(path, a)
    del a
    try:
        s = LocalServer(d, strata_bin=strata_bin, device=device, num_nodes=num_nodes,
                        start_timeout=start_timeout, workdir=d)
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    os.remove(path)
    s.refs = 1
    s.key = key
    with _lock:
        _shared[key] = s
    return s


def release_server(s):
    """Drops one reference to a shared server; the last one closes it."""
    with _lock:
        s.refs -= 1
        last = s.refs <= 0
        if last and _shared.get(getattr(s, "key", None)) is s:
            del _shared[s.key]
    if last:
        s.close()
