package builtin

import (
	_ "embed"
	"fmt"
	"slices"

	"github.com/strata-gnn/strata/dataset"
)

//go:generate go run ./internal/mkcora -out cora.sbds.gz

//go:embed cora.sbds.gz
var coraAsset []byte

var assets = map[string][]byte{
	"cora": coraAsset,
}

// Names lists the built-in datasets, sorted.
func Names() []string {
	names := make([]string, 0, len(assets))
	for n := range assets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Load decodes the named built-in dataset into a fresh, writable Dataset
// (each call returns its own copy).
func Load(name string) (*dataset.Dataset, error) {
	b, ok := assets[name]
	if !ok {
		return nil, fmt.Errorf("builtin: no built-in dataset %q (have %v)", name, Names())
	}
	d, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("builtin: %s: %w", name, err)
	}
	return d, nil
}
