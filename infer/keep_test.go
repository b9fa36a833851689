package infer

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// counting is a back end that counts what goes up to it: blocks
// (NewSparse), index uploads and float uploads by length; with live set,
// the buffers allocated and not freed.
type counting struct {
	backend.Backend
	mu     sync.Mutex
	sparse int
	ints   int
	floats map[int]int // values per upload -> uploads
	freed  map[backend.Buffer]int
	live   map[backend.Buffer]bool
}

func (c *counting) Alloc(dt backend.DType, n int) (backend.Buffer, error) {
	b, err := c.Backend.Alloc(dt, n)
	c.mu.Lock()
	if err == nil && c.live != nil {
		c.live[b] = true
	}
	c.mu.Unlock()
	return b, err
}

func (c *counting) Free(b backend.Buffer) {
	c.mu.Lock()
	if c.freed != nil {
		c.freed[b]++
	}
	if c.live != nil {
		delete(c.live, b)
	}
	c.mu.Unlock()
	c.Backend.Free(b)
}

func (c *counting) NewSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	c.mu.Lock()
	c.sparse++
	c.mu.Unlock()
	return c.Backend.NewSparse(rows, cols, indptr, indices)
}

func (c *counting) Upload(dst backend.Buffer, src any) error {
	c.mu.Lock()
	switch v := src.(type) {
	case []int32, []int64:
		c.ints++
	case []float32:
		c.floats[len(v)]++
	}
	c.mu.Unlock()
	return c.Backend.Upload(dst, src)
}

func (c *counting) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sparse, c.ints, c.floats = 0, 0, map[int]int{}
}

// TestKeepUploadsOnce: with a Keep, the second evaluation of the same
// request (new parameters, as after an epoch) uploads no block, no
// source IDs and not the features: only what depends on the parameters
// (the hidden layer's rows, and on the host path each chunk's gathered
// rows). Its logits equal a Run without a Keep bit for bit. A Keep too
// small for everything keeps a part and builds the rest again; another
// request drops what was kept.
func TestKeepUploadsOnce(t *testing.T) {
	ds, in := cora(t)
	x := inputs(t, ds, false)
	n, f := int(ds.NumNodes()), ds.FeatDim
	var nodes []int32 // the splits, as training's evaluation asks
	for _, s := range [][]int32{ds.Train, ds.Val, ds.Test} {
		nodes = append(nodes, s...)
	}
	for k, kind := range []string{nn.KindSAGE, nn.KindGCN} {
		for pl, place := range []Placement{PlaceDevice, PlaceHost} {
			// The race detector's runs (-short) take SAGE on the device
			// and GCN on the host: each model and each placement once.
			if testing.Short() && k != pl {
				continue
			}
			t.Run(fmt.Sprintf("%s/place=%d", kind, place), func(t *testing.T) {
				ref := newCPU(t)
				m1 := model(t, ref, kind, ds)
				cfg := m1.Config()
				cfg.Seed = 8
				m2, err := nn.New(ref, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer nn.FreeParams(ref, m2.Params())
				p1, err := nn.SaveParams(ref, m1.Params())
				if err != nil {
					t.Fatal(err)
				}
				p2, err := nn.SaveParams(ref, m2.Params())
				if err != nil {
					t.Fatal(err)
				}
				// want: the logits of p2 without a Keep.
				plain := []backend.Backend{newCPU(t), newCPU(t)}
				pm, freePlain, err := NewModels(plain, cfg, p2)
				if err != nil {
					t.Fatal(err)
				}
				defer freePlain()
				opts := Options{Backends: plain, Models: pm, Budget: MinBudget, Placement: place}
				want, err := Run(context.Background(), in, x, Request{Nodes: nodes}, opts)
				if err != nil {
					t.Fatal(err)
				}

				cs := []*counting{{Backend: newCPU(t), floats: map[int]int{}}, {Backend: newCPU(t), floats: map[int]int{}}}
				bs := []backend.Backend{cs[0], cs[1]}
				models, freeModels, err := NewModels(bs, cfg, p1)
				if err != nil {
					t.Fatal(err)
				}
				defer freeModels()
				keep := &Keep{Budget: 64 << 20}
				defer keep.Free()
				opts = Options{Backends: bs, Models: models, Budget: MinBudget, Placement: place, Keep: keep}
				run := func(p []nn.NamedTensor) (*Result, int, int, int) {
					t.Helper()
					for i, m := range models {
						if err := nn.LoadParams(bs[i], m.Params(), p); err != nil {
							t.Fatal(err)
						}
					}
					for _, c := range cs {
						c.reset()
					}
					res, err := Run(context.Background(), in, x, Request{Nodes: nodes}, opts)
					if err != nil {
						t.Fatal(err)
					}
					sparse, ints, feats := 0, 0, 0
					for _, c := range cs {
						sparse, ints, feats = sparse+c.sparse, ints+c.ints, feats+c.floats[n*f]
					}
					return res, sparse, ints, feats
				}
				first, sparse1, ints1, feats1 := run(p1)
				chunks := 0
				for _, l := range first.Layers {
					chunks += l.Chunks
				}
				if chunks < 4 || sparse1 < chunks {
					t.Fatalf("first run: %d chunks, %d blocks uploaded: the test does not split the layers", chunks, sparse1)
				}
				wantFeats := 0
				if place == PlaceDevice {
					wantFeats = 2 // once per device (a small table: no all-gather)
					if ints1 < chunks {
						t.Errorf("first run: %d index uploads for %d chunks", ints1, chunks)
					}
				}
				if feats1 != wantFeats {
					t.Errorf("first run: the features went up %d times, want %d", feats1, wantFeats)
				}
				second, sparse2, ints2, feats2 := run(p2)
				if sparse2 != 0 || ints2 != 0 || feats2 != 0 {
					t.Errorf("second run uploaded %d blocks, %d index arrays, the features %d times; want none", sparse2, ints2, feats2)
				}
				for i := range want.Data {
					if math.Float32bits(second.Data[i]) != math.Float32bits(want.Data[i]) {
						t.Fatalf("second run: logit %d is %v, %v without a Keep", i, second.Data[i], want.Data[i])
					}
				}

				// A Keep that holds some chunks (not the features): the
				// second run builds only the others.
				keep.Free()
				keep.Budget = 64 << 10
				_, sparse1, _, _ = run(p1)
				_, sparse2, _, feats2 = run(p2)
				if sparse2 == 0 || sparse2 >= sparse1 {
					t.Errorf("small Keep: %d blocks uploaded again of %d, want some", sparse2, sparse1)
				}
				if feats2 != wantFeats {
					t.Errorf("small Keep: the features went up %d times, want %d (too large to keep)", feats2, wantFeats)
				}
				// Another request: what was kept is dropped and built anew.
				keep.Budget = 64 << 10
				nodes = nodes[: len(nodes)-1 : len(nodes)-1]
				_, sparse3, _, _ := run(p2)
				if sparse3 != sparse1 {
					t.Errorf("another request: %d blocks uploaded, want all %d", sparse3, sparse1)
				}
				nodes = append(nodes, ds.Test[len(ds.Test)-1])
			})
		}
	}
}

// SpMMConcat is the wrapped back end's, so that SAGE layers on the
// wrapper take the same path as on the back end itself, bit for bit.
func (c *counting) SpMMConcat(out backend.Buffer, a backend.Sparse, x, w backend.Buffer, width int) error {
	return c.Backend.(backend.ConcatAggregator).SpMMConcat(out, a, x, w, width)
}
