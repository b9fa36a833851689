"""Fixtures of the strata_pyg tests: the strata binary (STRATA_BIN, else
built from this checkout with go), the pygref helper (reference batches
computed in Go without the server; STRATA_PYGREF, else built with go), and
a small generated dataset. On a host without go (the GPU host) set both.

Run with Debian's interpreter: /usr/bin/python3 -m pytest -q python/tests
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))


def _go_build(tmp, pkg, name):
    go = shutil.which("go")
    if go is None:
        pytest.skip(f"no go on PATH to build {pkg}")
    out = os.path.join(tmp, name)
    env = dict(os.environ, CGO_ENABLED="0")
    subprocess.run([go, "build", "-o", out, pkg], cwd=ROOT, check=True, env=env)
    return out


@pytest.fixture(scope="session")
def bindir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def strata_bin(bindir):
    b = os.environ.get("STRATA_BIN") or _go_build(bindir, "./cmd/strata", "strata")
    os.environ["STRATA_BIN"] = b  # the loaders find it there
    return b


@pytest.fixture(scope="session")
def pygref_bin(bindir):
    return os.environ.get("STRATA_PYGREF") or _go_build(bindir, "./serve/internal/pygref", "pygref")


@pytest.fixture(scope="session")
def tiny(strata_bin, tmp_path_factory):
    """The generated "tiny" dataset: 2,000 nodes, 16 features, 5 classes."""
    d = str(tmp_path_factory.mktemp("data") / "tiny")
    subprocess.run([strata_bin, "--quiet", "gen", d, "--preset", "tiny"], check=True, stdout=subprocess.DEVNULL)
    return d


@pytest.fixture(scope="session")
def tiny_parts(strata_bin, tiny, tmp_path_factory):
    """tiny partitioned in 2 (`strata partition`): partition.bin and the
    renumbered dataset/."""
    d = str(tmp_path_factory.mktemp("parts") / "tiny-p2")
    subprocess.run([strata_bin, "--quiet", "partition", tiny, d, "-k", "2"], check=True, stdout=subprocess.DEVNULL)
    return d


def reference(pygref_bin, dataset, **kw):
    """The batches pygref computes: a list of dicts."""
    args = [pygref_bin, "--dataset", dataset]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            args.append(flag)
        elif v is not False and v is not None:
            args += [flag, ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


class Server:
    """A `strata serve` started by a test on a loopback port."""

    def __init__(self, strata_bin, tmpdir, *args, env=None):
        self.ready = os.path.join(tmpdir, f"ready-{time.monotonic_ns()}")
        self.log = open(os.path.join(tmpdir, f"serve-{time.monotonic_ns()}.log"), "w+")
        self.proc = subprocess.Popen([strata_bin, "--quiet", "serve", "--listen", "127.0.0.1:0", "--ready-file",
                                      self.ready, "--device", "cpu", "--drain-timeout", "3s", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, **(env or {})))
        end = time.monotonic() + 60
        while not os.path.exists(self.ready):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.log.seek(0)
                raise RuntimeError(f"strata serve did not start: {self.log.read()}")
            time.sleep(0.02)
        with open(self.ready) as f:
            self.address = f.read().strip()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def server(strata_bin, tmp_path):
    started = []

    def start(*args, env=None):
        s = Server(strata_bin, str(tmp_path), *args, env=env)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


def gone(pid, timeout=20.0):
    """Waits for process pid to disappear (or be a zombie); True if it did."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.02)
    return False
