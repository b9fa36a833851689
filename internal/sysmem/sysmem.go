// Package sysmem tells how much memory this process may still allocate, so
// that a configuration can be refused, with its estimate, before it is
// sized: the smaller of the kernel's MemAvailable and the room left under
// the process's cgroup memory limit (v2 memory.max, v1
// memory.limit_in_bytes).
package sysmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Budget is the memory a process may still allocate.
type Budget struct {
	// Bytes is what may still be allocated.
	Bytes int64
	// Source says where Bytes comes from, for messages: "MemAvailable",
	// "cgroup memory.max" or "cgroup memory.limit_in_bytes".
	Source string
}

func (b Budget) String() string { return fmt.Sprintf("%s available (%s)", Format(b.Bytes), b.Source) }

// Available returns this machine's budget; ok is false where neither
// /proc/meminfo nor a cgroup limit can be read (other systems), and callers
// then skip memory checks.
func Available() (b Budget, ok bool) { return availableAt("/") }

// availableAt reads the files under root ("/" outside tests).
func availableAt(root string) (b Budget, ok bool) {
	if v, found := memAvailable(filepath.Join(root, "proc", "meminfo")); found {
		b, ok = Budget{Bytes: v, Source: "MemAvailable"}, true
	}
	if v, src, found := cgroupRoom(root); found && (!ok || v < b.Bytes) {
		b, ok = Budget{Bytes: v, Source: src}, true
	}
	return b, ok
}

// memAvailable reads MemAvailable from a meminfo file.
func memAvailable(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 || kb > 1<<52 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// unlimited: cgroup limits at or above this mean no limit (v1 writes
// 2^63 rounded down to a page).
const unlimited = 1 << 60

// cgroupRoom returns the cgroup's limit minus its usage for this process's
// memory cgroup (v2, then v1), trying the path /proc/self/cgroup names
// and then the cgroup root, as seen from inside a container.
func cgroupRoom(root string) (int64, string, bool) {
	v2, v1 := "", ""
	if data, err := os.ReadFile(filepath.Join(root, "proc", "self", "cgroup")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "":
				v2 = f[2]
			case containsWord(f[1], "memory"):
				v1 = f[2]
			}
		}
	}
	cg := filepath.Join(root, "sys", "fs", "cgroup")
	try := func(dirs []string, limitFile, usageFile, source string) (int64, string, bool) {
		for _, d := range dirs {
			limit, ok := readInt(filepath.Join(d, limitFile))
			if !ok {
				continue
			}
			if limit >= unlimited {
				return 0, "", false
			}
			usage, _ := readInt(filepath.Join(d, usageFile))
			return max(limit-usage, 0), source, true
		}
		return 0, "", false
	}
	if v, src, ok := try([]string{filepath.Join(cg, v2), cg}, "memory.max", "memory.current", "cgroup memory.max"); ok {
		return v, src, true
	}
	mem := filepath.Join(cg, "memory")
	return try([]string{filepath.Join(mem, v1), mem}, "memory.limit_in_bytes", "memory.usage_in_bytes", "cgroup memory.limit_in_bytes")
}

func containsWord(list, w string) bool {
	for _, s := range strings.Split(list, ",") {
		if s == w {
			return true
		}
	}
	return false
}

// readInt reads a file holding one integer; "max" (cgroup v2) is
// unlimited.
func readInt(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return unlimited, true
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// Format writes a byte count for messages: "812 MiB", "26.3 GiB".
func Format(b int64) string {
	switch {
	case b >= 1<<40:
		return fmt.Sprintf("%.1f TiB", float64(b)/(1<<40))
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
