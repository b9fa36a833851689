//go:build linux

package shm_test

import (
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/shm"
)

// Small slots so the conformance lengths stream through many chunks and
// reuse every slot.
func group(inline bool) commtest.NewGroup {
	return func(t testing.TB, n int, o comm.Options) []comm.Comm {
		cs, err := shm.NewLocal(n, shm.Options{Options: o, SlotBytes: 4096, Inline: inline})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
}

func TestConformance(t *testing.T)       { commtest.Conformance(t, group(false)) }
func TestConformanceInline(t *testing.T) { commtest.Conformance(t, group(true)) }
func TestFaults(t *testing.T)            { commtest.Faults(t, group(false)) }
