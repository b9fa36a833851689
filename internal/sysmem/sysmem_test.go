package sysmem

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const meminfo = "MemTotal:       24683656 kB\nMemFree:        23208604 kB\nMemAvailable:   20000000 kB\n"

func TestAvailable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		files  map[string]string
		want   int64
		source string
		ok     bool
	}{
		{"meminfo only", map[string]string{"proc/meminfo": meminfo}, 20000000 << 10, "MemAvailable", true},
		{"nothing readable", map[string]string{}, 0, "", false},
		{"meminfo without MemAvailable", map[string]string{"proc/meminfo": "MemTotal: 5 kB\n"}, 0, "", false},
		{"cgroup v2 limit below MemAvailable", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/job\n",
			"sys/fs/cgroup/job/memory.max": "4294967296\n", "sys/fs/cgroup/job/memory.current": "1073741824\n",
		}, 3 << 30, "cgroup memory.max", true},
		{"cgroup v2 max is no limit", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/job\n",
			"sys/fs/cgroup/job/memory.max": "max\n", "sys/fs/cgroup/job/memory.current": "1073741824\n",
		}, 20000000 << 10, "MemAvailable", true},
		{"cgroup v2 at the namespace root", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/outside/the/namespace\n",
			"sys/fs/cgroup/memory.max": "2147483648\n", "sys/fs/cgroup/memory.current": "0\n",
		}, 2 << 30, "cgroup memory.max", true},
		{"cgroup v1", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "4:memory:/job\n1:cpu:/\n",
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "1073741824\n", "sys/fs/cgroup/memory/job/memory.usage_in_bytes": "2147483648\n",
		}, 0, "cgroup memory.limit_in_bytes", true},
		{"cgroup v1 unlimited", map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "4:memory:/job\n",
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "9223372036854771712\n",
		}, 20000000 << 10, "MemAvailable", true},
		{"cgroup limit without meminfo", map[string]string{
			"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "1048576\n", "sys/fs/cgroup/memory.current": "garbage\n",
		}, 1 << 20, "cgroup memory.max", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, c := range tc.files {
				write(t, root, rel, c)
			}
			b, ok := availableAt(root)
			if ok != tc.ok || b.Bytes != tc.want || b.Source != tc.source {
				t.Fatalf("got %+v, %v; want %d from %q, %v", b, ok, tc.want, tc.source, tc.ok)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	for in, want := range map[int64]string{0: "0 B", 1023: "1023 B", 4096: "4 KiB", 26 << 20: "26 MiB", 3 << 29: "1.5 GiB", 5 << 40: "5.0 TiB"} {
		if got := Format(in); got != want {
			t.Errorf("Format(%d) = %q, want %q", in, got, want)
		}
	}
}

// TestAvailableHere: on Linux the real files give a positive budget.
func TestAvailableHere(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc/meminfo")
	}
	b, ok := Available()
	if !ok || b.Bytes <= 0 {
		t.Fatalf("Available() = %+v, %v", b, ok)
	}
}
