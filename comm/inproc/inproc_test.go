package inproc_test

import (
	"testing"

	"github.com/strata-gnn/strata/comm/commtest"
	"github.com/strata-gnn/strata/comm/inproc"
)

// The host suites run on CPU back-end buffers (the nil back end).

func TestConformance(t *testing.T) { commtest.Conformance(t, nil, inproc.New) }

func TestFaults(t *testing.T) { commtest.Faults(t, nil, inproc.New, nil) }

func TestConformanceAlloc(t *testing.T) { commtest.ConformanceAlloc(t, nil, inproc.New) }

func BenchmarkAllReduce(b *testing.B) {
	commtest.BenchmarkAllReduce(b, inproc.New, 2, 64<<10, 1<<20, 16<<20)
}
