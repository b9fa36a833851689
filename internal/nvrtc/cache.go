package nvrtc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvCache names the environment variable that overrides the cache folder.
const EnvCache = "STRATA_KERNEL_CACHE"

// DefaultCacheDir returns $STRATA_KERNEL_CACHE, or
// os.UserCacheDir()/strata/kernels.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("nvrtc: no kernel cache folder (set %s): %w", EnvCache, err)
	}
	return filepath.Join(base, "strata", "kernels"), nil
}

// Key identifies one compiled image.
type Key struct {
	Name    string   // module name, used in the file name, e.g. "backend"
	Source  string   // full CUDA C source
	Options []string // compiler options besides -arch
	Kind    Kind
	Arch    int    // 90 for sm_90 / compute_90
	NVRTC   string // NVRTC version, e.g. "13.0"
	Driver  int    // driver CUDA version, e.g. 13000
}

// File returns the cache file name for k.
func (k Key) File() string {
	h := sha256.New()
	h.Write([]byte(k.Source))
	for _, o := range k.Options {
		h.Write([]byte{0})
		h.Write([]byte(o))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:32]
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, k.Name)
	return fmt.Sprintf("%s-%s-%s%d-nvrtc%s-drv%d.%s", name, sum, archPrefix(k.Kind), k.Arch, k.NVRTC, k.Driver, k.Kind)
}

func archPrefix(k Kind) string {
	if k == PTX {
		return "compute"
	}
	return "sm"
}

// Cache is an on-disk store of compiled images. Each file holds the image
// followed by its SHA-256, so a truncated or damaged file is detected and
// rebuilt instead of being handed to the driver.
type Cache struct {
	Dir string
}

// Get returns the cached image for k, if present and intact.
func (c *Cache) Get(k Key) ([]byte, bool) {
	data, err := os.ReadFile(filepath.Join(c.Dir, k.File()))
	if err != nil || len(data) <= sha256.Size {
		return nil, false
	}
	img, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	got := sha256.Sum256(img)
	if !bytes.Equal(got[:], sum) {
		return nil, false
	}
	return img, true
}

// Put stores img atomically: it is written to a temporary file in the
// same folder, synced, then renamed over the final name.
func (c *Cache) Put(k Key, img []byte) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("nvrtc: kernel cache: %w", err)
	}
	tmp, err := os.CreateTemp(c.Dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("nvrtc: kernel cache: %w", err)
	}
	sum := sha256.Sum256(img)
	_, werr := tmp.Write(img)
	if werr == nil {
		_, werr = tmp.Write(sum[:])
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), filepath.Join(c.Dir, k.File()))
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("nvrtc: kernel cache: %w", werr)
	}
	return nil
}

// Build returns the image for k from the cache, or compiles it with
// compile and stores it. A cache that cannot be written is not an error
// (the image is still returned); hit reports whether the cache answered.
func (c *Cache) Build(k Key, compile func() ([]byte, error)) (img []byte, hit bool, err error) {
	if c != nil && c.Dir != "" {
		if img, ok := c.Get(k); ok {
			return img, true, nil
		}
	}
	img, err = compile()
	if err != nil {
		return nil, false, err
	}
	if c != nil && c.Dir != "" {
		_ = c.Put(k, img) // best effort: a read-only home must not stop training
	}
	return img, false, nil
}
