package nvrtc

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCacheRoundTripAndKeying(t *testing.T) {
	c := &Cache{Dir: filepath.Join(t.TempDir(), "k")}
	k := Key{Name: "backend", Source: "extern \"C\" __global__ void f(){}", Kind: CUBIN, Arch: 90, NVRTC: "13.0", Driver: 13000}
	compiles := 0
	compile := func() ([]byte, error) { compiles++; return []byte("image-bytes"), nil }

	img, hit, err := c.Build(k, compile)
	if err != nil || hit || string(img) != "image-bytes" || compiles != 1 {
		t.Fatalf("first Build: %q hit=%v err=%v compiles=%d", img, hit, err, compiles)
	}
	img, hit, err = c.Build(k, compile)
	if err != nil || !hit || string(img) != "image-bytes" || compiles != 1 {
		t.Fatalf("second Build: %q hit=%v err=%v compiles=%d", img, hit, err, compiles)
	}
	// Every part of the key changes the file.
	variants := []Key{k, k, k, k, k, k}
	variants[0].Source += " "
	variants[1].Arch = 80
	variants[2].NVRTC = "12.9"
	variants[3].Driver = 12080
	variants[4].Kind = PTX
	variants[5].Options = []string{"-lineinfo"}
	seen := map[string]bool{k.File(): true}
	for i, v := range variants {
		if seen[v.File()] {
			t.Fatalf("variant %d has the same file %s", i, v.File())
		}
		seen[v.File()] = true
	}
	// No temporary files are left behind.
	es, _ := os.ReadDir(c.Dir)
	if len(es) != 1 || strings.HasPrefix(es[0].Name(), ".tmp") {
		t.Fatalf("cache folder holds %v", es)
	}
}

func TestCacheRejectsDamagedFile(t *testing.T) {
	c := &Cache{Dir: t.TempDir()}
	k := Key{Name: "m", Source: "s", Kind: PTX, Arch: 90}
	if err := c.Put(k, []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(c.Dir, k.File())
	data, _ := os.ReadFile(p)
	data[3] ^= 0xff
	os.WriteFile(p, data, 0o644)
	if _, ok := c.Get(k); ok {
		t.Fatal("damaged entry accepted")
	}
	os.WriteFile(p, data[:5], 0o644) // truncated
	if _, ok := c.Get(k); ok {
		t.Fatal("truncated entry accepted")
	}
	img, hit, err := c.Build(k, func() ([]byte, error) { return []byte("fresh"), nil })
	if err != nil || hit || string(img) != "fresh" {
		t.Fatalf("rebuild: %q %v %v", img, hit, err)
	}
	if got, ok := c.Get(k); !ok || string(got) != "fresh" {
		t.Fatalf("after rebuild Get = %q, %v", got, ok)
	}
}

func TestCacheCompileErrorAndUnwritableDir(t *testing.T) {
	boom := errors.New("boom")
	c := &Cache{Dir: t.TempDir()}
	if _, _, err := c.Build(Key{Name: "x"}, func() ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	// A cache folder that cannot be created still returns the image.
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	c = &Cache{Dir: filepath.Join(f, "sub")}
	img, _, err := c.Build(Key{Name: "x"}, func() ([]byte, error) { return []byte("ok"), nil })
	if err != nil || string(img) != "ok" {
		t.Fatalf("unwritable cache: %q %v", img, err)
	}
}

func TestDefaultCacheDirEnv(t *testing.T) {
	t.Setenv(EnvCache, "/some/where")
	if d, err := DefaultCacheDir(); err != nil || d != "/some/where" {
		t.Fatalf("DefaultCacheDir = %q, %v", d, err)
	}
}

// TestCompileWhenAvailable compiles a small kernel when libnvrtc can be
// found (no GPU is needed to compile); it is skipped otherwise.
func TestCompileWhenAvailable(t *testing.T) {
	if err := Load(); err != nil {
		t.Skipf("no libnvrtc: %v", err)
	}
	src := `extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
		int i = blockIdx.x * blockDim.x + threadIdx.x;
		if (i < n) y[i] += a * x[i];
	}`
	major, minor := Version()
	t.Logf("nvrtc %d.%d from %s, archs %v", major, minor, LibPath(), SupportedArchs())
	kind, arch, err := Target(90)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Compile(src, "axpy.cu", kind, arch)
	if err != nil {
		t.Fatal(err)
	}
	if kind == CUBIN && !bytes.HasPrefix(img, []byte("\x7fELF")) {
		t.Fatalf("cubin does not start with an ELF header: % x", img[:8])
	}
	ptx, err := Compile(src, "axpy.cu", PTX, arch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ptx, []byte(".entry axpy")) || ptx[len(ptx)-1] != 0 {
		t.Fatalf("PTX lacks the entry or the NUL terminator")
	}
	_, err = Compile("this is not C", "bad.cu", kind, arch)
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Log, "bad.cu") {
		t.Fatalf("bad source: err = %v, want *Error with a log naming bad.cu", err)
	}
}
