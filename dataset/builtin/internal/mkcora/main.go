// Command mkcora rebuilds the embedded Cora asset of package builtin from
// the shared datasets folder (verifying its sha256 sums on the way):
//
//	go generate ./dataset/builtin
//	go run ./dataset/builtin/internal/mkcora -src /path/to/datasets/cora -out cora.sbds.gz
//
// Without -src it uses $STRATA_DATASETS/cora or ../shared/datasets/cora
// relative to the repository root.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dataset/importer"
	"github.com/strata-gnn/strata/internal/testkit"
)

func main() {
	src := flag.String("src", "", "shared-layout cora directory (default: found like the tests find it)")
	out := flag.String("out", "cora.sbds.gz", "output file")
	flag.Parse()
	if err := run(*src, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkcora:", err)
		os.Exit(1)
	}
}

func run(src, out string) error {
	if src == "" {
		dir, ok := testkit.FindDatasetsDir()
		if !ok {
			return fmt.Errorf("shared datasets not found (set STRATA_DATASETS or pass -src)")
		}
		src = filepath.Join(dir, "cora")
	}
	d, err := importer.LoadShared(src, importer.Options{Name: "cora", Quiet: true})
	if err != nil {
		return err
	}
	b, err := builtin.Encode(d)
	if err != nil {
		return err
	}
	// Round-trip before replacing the asset.
	if _, err := builtin.Decode(b); err != nil {
		return fmt.Errorf("round trip: %w", err)
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	fmt.Printf("mkcora: wrote %s (%d bytes)\n", out, len(b))
	return nil
}
