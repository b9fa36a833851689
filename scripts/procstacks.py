#!/usr/bin/env python3
"""procstacks.py PID: where each thread of a stuck process waits, without a debugger.

For every thread: its system call (futex: a lock or condition variable; ioctl:
the GPU driver; sched_yield or nanosleep: a spin on the GPU), its kernel wait
channel, and the code addresses found on its stack (a scan of the words above
the stack pointer that fall in an executable mapping), as library+offset, with
the nearest exported symbol where `nm -D` has one. Threads with the same
picture are printed once with a count. Needs the right to read /proc/PID/mem
(root, or ptrace rights over PID). A stack scan also shows stale addresses:
read it as "this library was on the way", not as an exact backtrace.
"""
import bisect
import collections
import os
import struct
import subprocess
import sys

SYSCALLS = {0: "read", 1: "write", 7: "poll", 16: "ioctl", 23: "select", 24: "sched_yield",
            35: "nanosleep", 202: "futex", 230: "clock_nanosleep", 232: "epoll_wait",
            270: "pselect6", 271: "ppoll", 281: "epoll_pwait"}
SCAN_BYTES = 64 * 1024
MAX_FRAMES = 24


def mappings(pid):
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 6 or "x" not in parts[1]:
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            out.append((start, end, int(parts[2], 16), parts[5]))
    out.sort()
    return out


_symbols = {}


def symbols(path):
    """Sorted (offset, name) of a library's exported functions, from nm -D."""
    if path not in _symbols:
        table = []
        try:
            text = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                                  text=True, timeout=30).stdout
            for line in text.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] in "tTwW":
                    table.append((int(parts[0], 16), parts[2]))
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
        table.sort()
        _symbols[path] = table
    return _symbols[path]


def name(maps, starts, addr):
    i = bisect.bisect_right(starts, addr) - 1
    if i < 0 or addr >= maps[i][1]:
        return None
    start, _, off, path = maps[i]
    rel = addr - start + off
    label = f"{os.path.basename(path)}+{rel:#x}"
    table = symbols(path)
    j = bisect.bisect_right(table, (rel, "\uffff")) - 1
    if j >= 0:
        label += f" ({table[j][1]}+{rel - table[j][0]:#x})"
    return label


def read_stack(mem, sp):
    data = b""
    for chunk in range(0, SCAN_BYTES, 4096):
        try:
            mem.seek(sp + chunk)
            data += mem.read(4096)
        except OSError:
            break
    return data


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: procstacks.py PID")
    pid = sys.argv[1]
    maps = mappings(pid)
    starts = [m[0] for m in maps]
    pictures = collections.OrderedDict()
    with open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
            base = f"/proc/{pid}/task/{tid}"
            try:
                fields = open(f"{base}/syscall").read().split()
                wchan = open(f"{base}/wchan").read().strip() or "-"
                comm = open(f"{base}/comm").read().strip()
            except OSError:
                continue
            if fields[0] == "running":
                key = ("running", wchan, ())
            else:
                nr, sp, pc = int(fields[0]), int(fields[-2], 16), int(fields[-1], 16)
                frames = [name(maps, starts, pc) or f"{pc:#x}"]
                data = read_stack(mem, sp)
                for i in range(0, len(data) - 7, 8):
                    label = name(maps, starts, struct.unpack_from("<Q", data, i)[0])
                    if label and label != frames[-1]:
                        frames.append(label)
                        if len(frames) >= MAX_FRAMES:
                            break
                key = (SYSCALLS.get(nr, str(nr)), wchan, tuple(frames))
            pictures.setdefault(key, []).append(f"{tid}:{comm}")
    for (call, wchan, frames), tids in pictures.items():
        print(f"{len(tids)} thread(s) in {call}, wait channel {wchan}: {' '.join(tids[:8])}")
        for frame in frames:
            print(f"    {frame}")


if __name__ == "__main__":
    main()
