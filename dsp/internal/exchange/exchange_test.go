package exchange

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/dsp/metrics"
)

func TestToIntsBounds(t *testing.T) {
	if _, err := ToInts([]int64{1, -1}); err == nil {
		t.Fatal("negative count accepted")
	}
	if _, err := ToInts([]int64{1 << 31}); err == nil {
		t.Fatal("count above 2^31-1 accepted")
	}
	if _, err := ToInts([]int64{1<<31 - 1, 1<<31 - 1, 1<<31 - 1}); err == nil {
		t.Fatal("total above MaxElems accepted")
	}
	if got, err := ToInts([]int64{0, 5}); err != nil || !slices.Equal(got, []int{0, 5}) {
		t.Fatalf("ToInts: %v %v", got, err)
	}
	if _, err := alloc[int32]([]int{MaxElems, 1}); err == nil {
		t.Fatal("alloc above MaxElems accepted")
	}
}

// TestExchangeAndBytes: rank r sends r+p values to rank p; bytes to
// itself count as local, to others as peer.
func TestExchangeAndBytes(t *testing.T) {
	const k = 3
	cs, err := inproc.New(k, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms := make([]metrics.Counters, k)
	var wg sync.WaitGroup
	errs := make([]error, k)
	for r := range k {
		wg.Go(func() {
			x := Exchanger{C: cs[r], M: &ms[r], Purpose: metrics.Feature}
			send := make([]int, k)
			var data []int64
			for p := range k {
				send[p] = r + p
				for i := range r + p {
					data = append(data, int64(100*r+i))
				}
			}
			recvCounts, err := x.Counts(context.Background(), send)
			if err != nil {
				errs[r] = err
				return
			}
			got, err := x.I64(context.Background(), data, send, recvCounts)
			if err != nil {
				errs[r] = err
				return
			}
			off := 0
			for p := range k {
				if recvCounts[p] != p+r {
					t.Errorf("rank %d: %d from %d, want %d", r, recvCounts[p], p, p+r)
				}
				for i := range recvCounts[p] {
					if got[off+i] != int64(100*p+i) {
						t.Errorf("rank %d: value %d from %d is %d", r, i, p, got[off+i])
					}
				}
				off += recvCounts[p]
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// Rank 1: counts 8 bytes to each rank, then 1, 2, 3 values of 8 bytes.
	if l, p := ms[1].Bytes(metrics.Feature, metrics.Local), ms[1].Bytes(metrics.Feature, metrics.Peer); l != 8+16 || p != 16+8+24 {
		t.Fatalf("rank 1: local %d, peer %d bytes", l, p)
	}
}
