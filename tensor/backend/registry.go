package backend

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Opener opens device number index of a back-end kind.
type Opener func(index int) (Backend, error)

var (
	regMu   sync.Mutex
	openers = map[string]Opener{}
)

// Register makes a back-end kind ("cpu", "cuda") available to Open.
// Registering a kind twice panics: it is a programming error.
func Register(kind string, open Opener) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := openers[kind]; dup {
		panic("backend: Register called twice for " + kind)
	}
	openers[kind] = open
}

// Kinds lists the registered back-end kinds.
func Kinds() []string {
	regMu.Lock()
	defer regMu.Unlock()
	var ks []string
	for k := range openers {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// ParseDevice splits "cuda:1" into ("cuda", 1); "cpu" gives ("cpu", 0).
func ParseDevice(spec string) (kind string, index int, err error) {
	kind, idx, found := strings.Cut(strings.TrimSpace(spec), ":")
	if kind == "" {
		return "", 0, fmt.Errorf("backend: empty device spec")
	}
	if found {
		index, err = strconv.Atoi(idx)
		if err != nil || index < 0 {
			return "", 0, fmt.Errorf("backend: bad device index in %q", spec)
		}
	}
	return kind, index, nil
}

// Open opens a device by spec, e.g. "cpu" or "cuda:0".
func Open(spec string) (Backend, error) {
	kind, index, err := ParseDevice(spec)
	if err != nil {
		return nil, err
	}
	regMu.Lock()
	open, ok := openers[kind]
	regMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("backend: unknown device kind %q (registered: %s)", kind, strings.Join(Kinds(), ", "))
	}
	return open(index)
}
