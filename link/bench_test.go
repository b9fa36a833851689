package link

import (
	"sync"
	"testing"

	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/sample"
	"github.com/strata-gnn/strata/train"
)

// benchHost is the setting of issue 18's GPU figures at the VM's size:
// products at scale 0.02 (49K nodes, 2.2M stored edges), the default
// 85/5/10 split, batches of 4096 positives with one uniform negative
// each, fanouts 15,10,5 (a 3-layer SAGE).
type benchHost struct {
	split *Split
	neg   *Negatives
	smp   sample.Sampler
	edges Edges
	cfg   Config
}

var (
	benchOnce sync.Once
	benchData *benchHost
	benchErr  error
)

func hostBench(b *testing.B) *benchHost {
	b.Helper()
	benchOnce.Do(func() {
		gc, err := gen.Preset("products")
		if err == nil {
			gc, err = gc.Scaled(0.02)
		}
		if err != nil {
			benchErr = err
			return
		}
		ds, err := gen.Generate(gc, nil)
		if err != nil {
			benchErr = err
			return
		}
		h := &benchHost{cfg: Defaults(train.SAGE)}
		h.cfg.BatchSize, h.cfg.Fanouts = 4096, []int{15, 10, 5}
		if h.split, err = NewSplit(ds.Graph, h.cfg.Split, 1); err != nil {
			benchErr = err
			return
		}
		if h.neg, err = NewNegatives(h.split, &h.cfg); err != nil {
			benchErr = err
			return
		}
		if h.smp, err = sample.NewNeighborSampler(h.split.In, sample.Config{Fanouts: h.cfg.Fanouts}); err != nil {
			benchErr = err
			return
		}
		h.edges = EpochEdges(h.split, 1, 0)
		benchData = h
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchData
}

// pos is batch i's positives (batches wrap around the epoch).
func (h *benchHost) pos(i int) Edges {
	n := h.edges.Len() / h.cfg.BatchSize
	lo := (i % n) * h.cfg.BatchSize
	return Edges{Src: h.edges.Src[lo : lo+h.cfg.BatchSize], Dst: h.edges.Dst[lo : lo+h.cfg.BatchSize]}
}

func cloneMiniBatch(mb *sample.MiniBatch) *sample.MiniBatch {
	out := &sample.MiniBatch{Seeds: mb.Seeds, Blocks: make([]sample.Block, len(mb.Blocks))}
	for i, b := range mb.Blocks {
		b.Indptr = append([]int64(nil), b.Indptr...)
		b.Indices = append([]int32(nil), b.Indices...)
		if b.EdgeIDs != nil {
			b.EdgeIDs = append([]int64(nil), b.EdgeIDs...)
		}
		out.Blocks[i] = b
	}
	return out
}

// BenchmarkHostBatch is the host work of one link-prediction step in
// sampled mode, part by part: drawing the negatives, making the Batch
// (seeds, their dedup, rows, labels), sampling the seeds' neighborhoods
// (node classification's work too) and excluding the targets from them;
// "link" is the work link prediction adds to sampling (negatives, batch,
// exclusion) and "step" all of it. "batch-search", "exclude-map" and
// "step-first" use the first NewBatch and ExcludeTargets
// (exclude_test.go), for comparison in the same run.
//
//	go test ./link -run '^$' -bench HostBatch -benchtime 20x
func BenchmarkHostBatch(b *testing.B) {
	h := hostBench(b)
	key := func(i int) sample.Key { return sample.Key{Seed: h.cfg.Seed, Batch: i} }
	b.Run("negatives", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := h.neg.Draw(h.pos(i), 0, i); err != nil {
				b.Fatal(err)
			}
		}
	})
	neg, err := h.neg.Draw(h.pos(0), 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("batch", func(b *testing.B) {
		for b.Loop() {
			NewBatch(h.pos(0), neg)
		}
	})
	b.Run("batch-search", func(b *testing.B) {
		for b.Loop() {
			newBatchSearch(h.pos(0), neg)
		}
	})
	batch := NewBatch(h.pos(0), neg)
	b.Run("sample", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.smp.Sample(batch.Seeds, key(0)); err != nil {
				b.Fatal(err)
			}
		}
	})
	mb, err := h.smp.Sample(batch.Seeds, key(0))
	if err != nil {
		b.Fatal(err)
	}
	edges := 0
	for _, blk := range mb.Blocks {
		edges += blk.NumEdges()
	}
	b.Logf("%d seeds, %d block edges", len(batch.Seeds), edges)
	b.Run("exclude", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			c := cloneMiniBatch(mb)
			b.StartTimer()
			ExcludeTargets(c, h.pos(0))
		}
	})
	b.Run("exclude-map", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			c := cloneMiniBatch(mb)
			b.StartTimer()
			excludeTargetsMap(c, h.pos(0))
		}
	})
	b.Run("link", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			c := cloneMiniBatch(mb)
			b.StartTimer()
			neg, err := h.neg.Draw(h.pos(i), 0, i)
			if err != nil {
				b.Fatal(err)
			}
			NewBatch(h.pos(i), neg)
			ExcludeTargets(c, h.pos(0))
		}
	})
	b.Run("step-first", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			pos := h.pos(i)
			neg, err := h.neg.Draw(pos, 0, i)
			if err != nil {
				b.Fatal(err)
			}
			bt := newBatchSearch(pos, neg)
			mb, err := h.smp.Sample(bt.Seeds, key(i))
			if err != nil {
				b.Fatal(err)
			}
			excludeTargetsMap(mb, pos)
		}
	})
	b.Run("step", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			pos := h.pos(i)
			neg, err := h.neg.Draw(pos, 0, i)
			if err != nil {
				b.Fatal(err)
			}
			bt := NewBatch(pos, neg)
			mb, err := h.smp.Sample(bt.Seeds, key(i))
			if err != nil {
				b.Fatal(err)
			}
			ExcludeTargets(mb, pos)
		}
	})
}
