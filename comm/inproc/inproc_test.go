package inproc_test

import (
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/inproc"
)

func newGroup(t testing.TB, n int, o comm.Options) []comm.Comm {
	cs, err := inproc.New(n, o)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestConformance(t *testing.T) { commtest.Conformance(t, newGroup) }

func TestFaults(t *testing.T) { commtest.Faults(t, newGroup) }

func TestConformanceAlloc(t *testing.T) { commtest.ConformanceAlloc(t, newGroup) }

func BenchmarkAllReduce(b *testing.B) {
	commtest.BenchmarkAllReduce(b, newGroup, 2, 64<<10, 1<<20, 16<<20)
}
