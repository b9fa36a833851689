package cudalib

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeFS makes empty files at the given paths under root.
func fakeFS(t *testing.T, root string, files ...string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// recorder is a fake dlopen: it logs every name and succeeds only for
// names in ok (bare sonames or full paths).
type recorder struct {
	ok    map[string]bool
	calls []string
}

func (r *recorder) open(name string) (uintptr, error) {
	r.calls = append(r.calls, name)
	if r.ok[name] {
		return uintptr(len(r.calls)), nil
	}
	return 0, errors.New("cannot open " + name)
}

func TestEnvDirsComeFirst(t *testing.T) {
	root := t.TempDir()
	fakeFS(t, root, "env/libcuda.so.1", "fixed/libcuda.so.1")
	r := &recorder{ok: map[string]bool{
		"libcuda.so.1":                            true, // the loader would find it too
		filepath.Join(root, "env/libcuda.so.1"):   true,
		filepath.Join(root, "fixed/libcuda.so.1"): true,
	}}
	s := &Searcher{EnvDirs: []string{filepath.Join(root, "env")}, UseLoader: true,
		Dirs: []string{filepath.Join(root, "fixed")}, Open: r.open}
	f, err := s.Find(Driver)
	if err != nil {
		t.Fatal(err)
	}
	if f.Via != EnvPath || f.Path != filepath.Join(root, "env/libcuda.so.1") {
		t.Fatalf("found %+v, want the STRATA_CUDA_PATH copy", f)
	}
	if len(r.calls) != 1 {
		t.Fatalf("dlopen calls %v, want only the env path", r.calls)
	}
}

func TestLoaderBeforeFixedDirs(t *testing.T) {
	root := t.TempDir()
	fakeFS(t, root, "fixed/libnvrtc.so.12")
	r := &recorder{ok: map[string]bool{"libnvrtc.so.12": true, filepath.Join(root, "fixed/libnvrtc.so.12"): true}}
	s := &Searcher{UseLoader: true, Dirs: []string{filepath.Join(root, "fixed")}, Open: r.open,
		Locate: func(so string) string { return "/somewhere/" + so }}
	f, err := s.Find(NVRTC)
	if err != nil {
		t.Fatal(err)
	}
	if f.Via != "loader" || f.Soname != "libnvrtc.so.12" || f.Path != "/somewhere/libnvrtc.so.12" {
		t.Fatalf("found %+v, want libnvrtc.so.12 via the loader", f)
	}
	// Newest soname tried first.
	if want := []string{"libnvrtc.so.13", "libnvrtc.so.12"}; !reflect.DeepEqual(r.calls[:2], want) {
		t.Fatalf("dlopen order %v, want prefix %v", r.calls, want)
	}
}

func TestFixedDirsOrderAndSiblingPreload(t *testing.T) {
	root := t.TempDir()
	fakeFS(t, root,
		"usr/local/cuda-12.4/targets/x86_64-linux/lib/libnvrtc.so.12",
		"usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc.so.13",
		"usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc-builtins.so.13.0",
		"usr/local/cuda-13.0/targets/x86_64-linux/lib/libnvrtc-builtins.so.12.9", // wrong major: never loaded
		"usr/local/nvidia/lib64/libcuda.so.1",
		"usr/lib/x86_64-linux-gnu/libcuda.so.1",
		"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13",
	)
	dirs := FixedDirs(root, func(string) string { return "" })
	if len(dirs) < 5 {
		t.Skipf("fixed dirs %v: this test assumes linux/amd64 folder names", dirs)
	}
	want := []string{
		filepath.Join(root, "usr/local/cuda-13.0/targets/x86_64-linux/lib"),
		filepath.Join(root, "usr/local/cuda-12.4/targets/x86_64-linux/lib"),
		filepath.Join(root, "usr/local/nvidia/lib64"),
		filepath.Join(root, "usr/lib/x86_64-linux-gnu"),
		filepath.Join(root, "opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib"),
	}
	if !reflect.DeepEqual(dirs, want) {
		t.Fatalf("FixedDirs =\n%v\nwant\n%v", dirs, want)
	}

	okAll := map[string]bool{}
	for _, d := range dirs {
		es, _ := os.ReadDir(d)
		for _, e := range es {
			okAll[filepath.Join(d, e.Name())] = true
		}
	}
	r := &recorder{ok: okAll}
	s := &Searcher{Dirs: dirs, Open: r.open}
	f, err := s.Find(NVRTC)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != filepath.Join(dirs[0], "libnvrtc.so.13") {
		t.Fatalf("nvrtc from %s, want the newest toolkit", f.Path)
	}
	wantCalls := []string{filepath.Join(dirs[0], "libnvrtc-builtins.so.13.0"), filepath.Join(dirs[0], "libnvrtc.so.13")}
	if !reflect.DeepEqual(r.calls, wantCalls) {
		t.Fatalf("dlopen calls %v, want builtins preloaded first: %v", r.calls, wantCalls)
	}

	r.calls = nil
	f, err = s.Find(CUBLAS)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != filepath.Join(dirs[4], "libcublas.so.13") || r.calls[0] != filepath.Join(dirs[4], "libcublasLt.so.13") {
		t.Fatalf("cublas %s after %v, want libcublasLt preloaded from the wheel folder", f.Path, r.calls)
	}

	r.calls = nil
	f, err = s.Find(Driver)
	if err != nil || f.Path != filepath.Join(dirs[2], "libcuda.so.1") {
		t.Fatalf("driver %+v, %v: want /usr/local/nvidia/lib64 before /usr/lib", f, err)
	}
}

func TestNotFoundErrorNamesEverything(t *testing.T) {
	empty := t.TempDir()
	broken := t.TempDir()
	fakeFS(t, broken, "libcuda.so.1")
	r := &recorder{ok: map[string]bool{}}
	s := &Searcher{EnvDirs: []string{empty}, UseLoader: true, Dirs: []string{broken}, Open: r.open}
	_, err := s.Find(Driver)
	var nf *NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("error %v (%T), want *NotFoundError", err, err)
	}
	msg := err.Error()
	for _, want := range []string{"libcuda", "libcuda.so.1", empty, "<loader>", broken, "cannot open", EnvPath} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if !reflect.DeepEqual(nf.Dirs, []string{empty + " (" + EnvPath + ")", "<loader>", broken}) {
		t.Errorf("Dirs = %v", nf.Dirs)
	}
}

func TestSplitPathAndVersions(t *testing.T) {
	if got := SplitPath(" /a: :/b::"); !reflect.DeepEqual(got, []string{"/a", "/b"}) {
		t.Fatalf("SplitPath = %v", got)
	}
	if sonameMajor("libnvrtc.so.11.2") != "11" || sonameMajor("libcuda.so") != "" {
		t.Fatal("sonameMajor")
	}
	if !versionLess("/usr/local/cuda-12.10", "/usr/local/cuda-13.0") || versionLess("/usr/local/cuda-12.10", "/usr/local/cuda-12.9") {
		t.Fatal("versionLess")
	}
}

func TestDefaultWithEmptyEnvDirFails(t *testing.T) {
	// With only an empty folder and nothing else the search must fail with a
	// clear error; on a machine that has CUDA the real folders would win,
	// so build the searcher by hand.
	dir := t.TempDir()
	t.Setenv(EnvPath, dir)
	s := Default()
	if !reflect.DeepEqual(s.EnvDirs, []string{dir}) {
		t.Fatalf("EnvDirs = %v", s.EnvDirs)
	}
	s.UseLoader, s.Dirs = false, nil
	if _, err := s.Find(Driver); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("err = %v, want not-found naming %s", err, dir)
	}
}

// TestSibling: a sibling is opened from its library's folder with the
// library's major version, else by soname through the loader.
func TestSibling(t *testing.T) {
	root := t.TempDir()
	fakeFS(t, root, "lib/libcublas.so.13", "lib/libcublasLt.so.13", "lib/libcublasLt.so.12")
	dir := filepath.Join(root, "lib")
	r := &recorder{ok: map[string]bool{filepath.Join(dir, "libcublasLt.so.13"): true, "libcublasLt.so.12": true}}
	s := &Searcher{Open: r.open, Locate: func(so string) string { return "/loaded/" + so }}
	f := &Found{Lib: "libcublas", Soname: "libcublas.so.13", Path: filepath.Join(dir, "libcublas.so.13")}
	sib, err := s.Sibling(f, CUBLAS.Siblings[0])
	if err != nil {
		t.Fatal(err)
	}
	if sib.Path != filepath.Join(dir, "libcublasLt.so.13") || sib.Via != "folder" || sib.Lib != "libcublasLt" || sib.Soname != "libcublasLt.so.13" {
		t.Fatalf("sibling %+v, want the folder's libcublasLt.so.13", sib)
	}
	// Found by the loader (no path): the soname through the loader.
	r.calls = nil
	sib, err = s.Sibling(&Found{Lib: "libcublas", Soname: "libcublas.so.12", Via: "loader"}, CUBLAS.Siblings[0])
	if err != nil {
		t.Fatal(err)
	}
	if sib.Via != "loader" || sib.Path != "/loaded/libcublasLt.so.12" || !reflect.DeepEqual(r.calls, []string{"libcublasLt.so.12"}) {
		t.Fatalf("sibling %+v after %v, want libcublasLt.so.12 via the loader", sib, r.calls)
	}
	// Neither: a *NotFoundError naming the folder and the loader.
	_, err = s.Sibling(&Found{Lib: "libcublas", Soname: "libcublas.so.11", Path: filepath.Join(dir, "libcublas.so.11")}, CUBLAS.Siblings[0])
	var nf *NotFoundError
	if !errors.As(err, &nf) || !reflect.DeepEqual(nf.Dirs, []string{dir, "<loader>"}) || !strings.Contains(err.Error(), "libcublasLt.so.11") {
		t.Fatalf("err %v, want not-found naming %s and the loader", err, dir)
	}
}
