package infer

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// papersChunk is a host-built chunk of the size layer-wise inference
// makes on the papers shape: nd destinations of 15 to 30 in-edges each,
// sources numbered as buildChunk numbers them (the destinations, then
// the others by their first edge), and, with gcn, their degrees.
func papersChunk(nd int, seed uint64, gcn bool) *hostChunk {
	rng := rand.New(rand.NewPCG(seed, 5))
	hc := &hostChunk{indptr: make([]int64, nd+1)}
	next := int32(nd)
	for i := range nd {
		deg := 15 + rng.IntN(16)
		for range deg {
			var j int32
			switch rng.IntN(4) {
			case 0: // another destination of the chunk
				j = int32(rng.IntN(nd))
			case 1: // a source seen before
				j = int32(rng.IntN(int(next)))
			default: // a new source
				j = next
				next++
			}
			hc.indices = append(hc.indices, j)
		}
		hc.indptr[i+1] = int64(len(hc.indices))
	}
	hc.src = make([]int32, next)
	for j := range hc.src {
		hc.src[j] = int32(j)
	}
	if gcn {
		hc.deg = make([]int64, next)
		for j := range hc.deg {
			hc.deg[j] = 1 + int64(rng.IntN(40))
		}
	}
	return hc
}

// BenchmarkChunkBlock times the block phase of a chunk on the CPU back
// end (worker.upload: the host-built CSR made an nn.Block) for chunks of
// 200k destinations and about 4.5M in-edges, the papers shape's; each
// iteration first rewrites the chunk's arrays outside the timer, as a
// builder hands the worker arrays it just wrote (the same two, so that
// the allocations timed are the block's own):
// go test -run - -bench ChunkBlock -benchtime 40x -count 3 ./infer/
func BenchmarkChunkBlock(b *testing.B) {
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const nd = 200_000
	for _, m := range []struct {
		name string
		gcn  bool
	}{{"sage", false}, {"gcn", true}} {
		b.Run(m.name, func(b *testing.B) {
			hc := papersChunk(nd, 1, m.gcn)
			w := &worker{b: be}
			ip, ix := slices.Clone(hc.indptr), slices.Clone(hc.indices)
			edges := int64(0)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				copy(ip, hc.indptr) // as a builder writes them: fresh in the caches
				copy(ix, hc.indices)
				c := &hostChunk{src: hc.src, deg: hc.deg, indptr: ip, indices: ix}
				b.StartTimer()
				kc, err := w.upload(c, nd)
				if err != nil {
					b.Fatal(err)
				}
				kc.free()
				edges += int64(len(c.indices))
			}
			b.ReportMetric(float64(edges)/b.Elapsed().Seconds()/1e6, "Medges/s")
		})
	}
}
