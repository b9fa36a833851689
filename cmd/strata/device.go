package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/strata-gnn/strata/tensor/backend"
	// Back ends register themselves with package backend when linked in.
	_ "github.com/strata-gnn/strata/tensor/backend/cpu"
)

// openDevice opens the compute back end named by spec. "auto" (or "")
// picks the first registered kind other than cpu that opens, else cpu; a
// kind named explicitly must open or it is an error.
func openDevice(spec string) (backend.Backend, error) { return openDeviceNote(spec, nil) }

// openDeviceNote is openDevice that, when "auto" falls back to the CPU,
// writes one line to note (if not nil) saying why each other kind did not
// open, e.g. "device auto: cuda: cannot open cuda:0: cudalib: libcuda not
// found (...); using cpu".
func openDeviceNote(spec string, note io.Writer) (backend.Backend, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "auto" {
		var why []string
		for _, kind := range backend.Kinds() {
			if kind == "cpu" {
				continue
			}
			b, err := backend.Open(kind)
			if err == nil {
				return b, nil
			}
			why = append(why, strings.Join(strings.Fields(err.Error()), " "))
		}
		if note != nil && len(why) > 0 {
			fmt.Fprintf(note, "device auto: %s; using cpu\n", strings.Join(why, "; "))
		}
		spec = "cpu"
	}
	kind, _, err := backend.ParseDevice(spec)
	if err != nil {
		return nil, usageError{fmt.Errorf("--device: %w", err)}
	}
	registered := false
	for _, k := range backend.Kinds() {
		registered = registered || k == kind
	}
	if !registered {
		return nil, usageError{fmt.Errorf("--device %s: no %q back end in this build (available: %s)", spec, kind, strings.Join(backend.Kinds(), ", "))}
	}
	b, err := backend.Open(spec)
	if err != nil {
		return nil, fmt.Errorf("--device %s: %w", spec, err)
	}
	return b, nil
}
