//go:build (linux || darwin) && (amd64 || arm64)

package openblas

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
)

// candidates lists library paths to try, in order.
func candidates() (paths []string, disabled bool) {
	if env := strings.TrimSpace(os.Getenv("STRATA_OPENBLAS")); env != "" {
		switch strings.ToLower(env) {
		case "off", "none", "0", "false":
			return nil, true
		}
		if st, err := os.Stat(env); err == nil && st.IsDir() {
			paths = append(paths, filepath.Join(env, "libopenblas.so.0"), filepath.Join(env, "libopenblas.so"))
		} else {
			paths = append(paths, env)
		}
	}
	if runtime.GOOS == "darwin" {
		paths = append(paths, "libopenblas.dylib", "/opt/homebrew/opt/openblas/lib/libopenblas.dylib", "/usr/local/opt/openblas/lib/libopenblas.dylib")
		return paths, false
	}
	paths = append(paths, "libopenblas.so.0", "libopenblas.so")
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	for _, sub := range []string{"openblas-pthread", "openblas-openmp", "openblas-serial", ""} {
		paths = append(paths, filepath.Join("/usr/lib", triplet, sub, "libopenblas.so.0"))
	}
	for _, dir := range []string{"/usr/lib", "/usr/lib64", "/usr/local/lib", "/opt/OpenBLAS/lib"} {
		paths = append(paths, filepath.Join(dir, "libopenblas.so.0"), filepath.Join(dir, "libopenblas.so"))
	}
	return paths, false
}

func open() (*library, error) {
	paths, disabled := candidates()
	if disabled {
		return nil, errors.New("openblas: disabled by STRATA_OPENBLAS")
	}
	// Guide OpenBLAS's kernel choice (it reads OPENBLAS_CORETYPE once, when
	// loaded) unless the user chose; then restore the environment so child
	// processes inherit the user's.
	if _, set := os.LookupEnv("OPENBLAS_CORETYPE"); !set {
		if hint := coreTypeHint(); hint != "" && os.Setenv("OPENBLAS_CORETYPE", hint) == nil {
			defer os.Unsetenv("OPENBLAS_CORETYPE")
		}
	}
	var errs []string
	for _, p := range paths {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			errs = append(errs, p)
			continue
		}
		sym, err := purego.Dlsym(h, "cblas_sgemm")
		if err != nil {
			purego.Dlclose(h)
			errs = append(errs, p+" (no cblas_sgemm)")
			continue
		}
		l := &library{path: p}
		purego.RegisterFunc(&l.sgemm, sym)
		if t, err := purego.Dlsym(h, "openblas_get_num_threads"); err == nil {
			purego.RegisterFunc(&l.getThreads, t)
		}
		if t, err := purego.Dlsym(h, "openblas_get_corename"); err == nil {
			purego.RegisterFunc(&l.coreName, t)
		}
		if t, err := purego.Dlsym(h, "openblas_set_num_threads"); err == nil {
			purego.RegisterFunc(&l.setThreads, t)
		}
		return l, nil
	}
	return nil, fmt.Errorf("openblas: no library loaded (tried %s)", strings.Join(errs, ", "))
}
