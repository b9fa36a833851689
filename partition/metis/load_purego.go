//go:build (linux || darwin) && (amd64 || arm64)

package metis

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
)

// candidates lists the library files to try, in order.
func candidates() (paths []string, disabled bool) {
	if env := strings.TrimSpace(os.Getenv("STRATA_METIS")); env != "" {
		switch strings.ToLower(env) {
		case "off", "none", "0", "false":
			return nil, true
		}
		if st, err := os.Stat(env); err == nil && st.IsDir() {
			paths = append(paths, filepath.Join(env, "libmetis.so.5"), filepath.Join(env, "libmetis.so"), filepath.Join(env, "libmetis.dylib"))
		} else {
			paths = append(paths, env)
		}
	}
	if runtime.GOOS == "darwin" {
		return append(paths, "libmetis.dylib", "/opt/homebrew/lib/libmetis.dylib", "/usr/local/lib/libmetis.dylib"), false
	}
	paths = append(paths, "libmetis.so.5", "libmetis.so")
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	for _, dir := range []string{filepath.Join("/usr/lib", triplet), "/usr/lib", "/usr/lib64", "/usr/local/lib"} {
		paths = append(paths, filepath.Join(dir, "libmetis.so.5"), filepath.Join(dir, "libmetis.so"))
	}
	return paths, false
}

func open() (*library, error) {
	paths, disabled := candidates()
	if disabled {
		return nil, fmt.Errorf("%w: disabled by STRATA_METIS", ErrUnavailable)
	}
	var tried []string
	for _, p := range paths {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			tried = append(tried, p)
			continue
		}
		kway, err1 := purego.Dlsym(h, "METIS_PartGraphKway")
		rec, err2 := purego.Dlsym(h, "METIS_PartGraphRecursive")
		defs, err3 := purego.Dlsym(h, "METIS_SetDefaultOptions")
		if err1 != nil || err2 != nil || err3 != nil {
			purego.Dlclose(h)
			tried = append(tried, p+" (missing METIS_PartGraphKway, METIS_PartGraphRecursive or METIS_SetDefaultOptions)")
			continue
		}
		l := &library{path: p}
		purego.RegisterFunc(&l.partKway, kway)
		purego.RegisterFunc(&l.partRecursive, rec)
		purego.RegisterFunc(&l.setDefaults, defs)
		return l, nil
	}
	return nil, fmt.Errorf("%w (tried %s; install Debian's libmetis5 or set STRATA_METIS to the library file)",
		ErrUnavailable, strings.Join(tried, ", "))
}
