package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// spmmsVariants are BenchmarkSpMMSampled's kernels: for a sampled block's
// short rows (at most the fanout's edges), fewer edges in flight (U) than
// the back end's eight, so that a row of 5 or 10 edges loads them at once
// instead of in the one-by-one tail.
func spmmsVariants() []*spmmxVariant {
	var vs []*spmmxVariant
	for _, bf := range []bool{false, true} {
		nv256 := 2 // 64 float4 vectors a row; bf16: 32 of 8 values
		if bf {
			nv256 = 1
		}
		for _, u := range []int{2, 4, 5, 8} {
			vs = append(vs,
				&spmmxVariant{width: 100, bf16: bf, vec: !bf, g: 32, nv: 1, u: u},
				&spmmxVariant{width: 100, bf16: bf, vec: !bf, g: 16, nv: 2, u: u, pf: true},
				&spmmxVariant{width: 256, bf16: bf, vec: true, g: 32, nv: nv256, u: u},
			)
		}
		vs = append(vs, &spmmxVariant{width: 100, bf16: bf, vec: !bf, g: 8, nv: 4, u: 4, pf: true})
	}
	for _, v := range vs {
		v.init()
	}
	return vs
}

// BenchmarkSpMMSampled times the one-head SpMM on blocks shaped like a
// sampled mini-batch's layers (products, batch 1024, fanouts 15,10,5:
// rows of at most the fanout's edges, mean weights, columns spread over
// the sources): the back end's kernel and spmmsVariants, fp32 and bf16,
// each checked bit for bit against the back end. $STRATA_SPMMS_ROWS
// scales the rows (default 100000 for fanout 5). Run with -benchtime 1x
// -test.v on a GPU host.
func BenchmarkSpMMSampled(b *testing.B) {
	d := gpu(b)
	vs := spmmsVariants()
	mod, err := d.LoadModule("spmms", spmmxSource(vs))
	if err != nil {
		b.Fatal(err)
	}
	rows5 := 100000
	if v, err := strconv.Atoi(os.Getenv("STRATA_SPMMS_ROWS")); err == nil && v > 0 {
		rows5 = v
	}
	r := rand.New(rand.NewPCG(3, 1))
	// The layers from the input up: rows, fanout, width.
	layers := []struct{ rows, fanout, width int }{
		{rows5, 5, 100}, {rows5 / 7, 10, 256}, {rows5 / 100, 15, 256},
	}
	for _, ly := range layers {
		srcs := ly.rows * (ly.fanout/2 + 1)
		indptr := make([]int64, ly.rows+1)
		var indices []int32
		var wv []float32
		for i := range ly.rows {
			n := ly.fanout
			if r.IntN(8) == 0 {
				n = 1 + r.IntN(ly.fanout)
			}
			for range n {
				indices = append(indices, int32(r.IntN(srcs)))
				wv = append(wv, float32(1/float64(n)))
			}
			indptr[i+1] = int64(len(indices))
		}
		a, err := d.NewSparse(ly.rows, srcs, indptr, indices)
		if err != nil {
			b.Fatal(err)
		}
		s := a.(*Sparse)
		s.uniform = false // as blocks sampled on the device are
		w := upload(b, d, backend.Float32, wv)
		xv := make([]float32, srcs*ly.width)
		for i := range xv {
			xv[i] = float32(r.NormFloat64())
		}
		x32 := upload(b, d, backend.Float32, xv)
		for _, bf := range []bool{false, true} {
			dt := backend.Float32
			x := backend.Buffer(x32)
			if bf {
				dt = backend.BFloat16
				xb, err := d.Alloc(dt, len(xv))
				must(b, err)
				must(b, d.Convert(xb, x32))
				x = xb
			}
			ref, err := d.Alloc(dt, ly.rows*ly.width)
			must(b, err)
			out, err := d.Alloc(dt, ly.rows*ly.width)
			must(b, err)
			gb := float64(len(indices)) * float64(ly.width) * float64(dt.Size()) / 1e9
			timeIt := func(fn func() error) float64 { return bestTime(b, d, 20, 2, fn) }
			name := fmt.Sprintf("rows %6d fanout %2d width %3d %s", ly.rows, ly.fanout, ly.width, dt)
			sec := timeIt(func() error { return d.SpMM(ref, a, false, x, w, 1, ly.width) })
			b.Logf("%s  %-32s %7.1f us  %5.2f TB/s", name, "back end", 1e6*sec, gb/sec/1e3)
			if ly.width == 100 { // the first layer's [x_dst | mean] (SpMMConcat)
				cat, err := d.Alloc(dt, 2*ly.rows*ly.width)
				must(b, err)
				sec := timeIt(func() error { return d.SpMMConcat(cat, a, x, w, ly.width) })
				b.Logf("%s  %-32s %7.1f us", name, "SpMMConcat", 1e6*sec)
				d.Free(cat)
			}
			want := make([]float32, ly.rows*ly.width)
			if bf {
				must(b, d.Download(want, mustConvert(b, d, ref)))
			} else {
				want = download[float32](b, d, ref)
			}
			for _, v := range vs {
				if v.width != ly.width || v.bf16 != bf {
					continue
				}
				f, err := mod.Func(v.name)
				if err != nil {
					b.Fatal(err)
				}
				wd := int64(ly.width / v.lanes())
				rowsPerBlock := int64(8 * (32 / v.g))
				blocks := (int64(ly.rows) + rowsPerBlock - 1) / rowsPerBlock
				xp, op := x.(*Buffer).ptr, out.(*Buffer).ptr
				sec := timeIt(func() error {
					return d.Do(func(l *Locked) error {
						return l.LaunchShape(f, cu.D1(int(blocks)), cu.D1(threads), 0, uint64(op), uint64(s.ptr.ptr), uint64(s.col.ptr),
							uint64(w.ptr), uint64(xp), cu.I64(int64(ly.rows)), cu.I64(wd))
					})
				})
				got := make([]float32, len(want))
				if bf {
					must(b, d.Download(got, mustConvert(b, d, out)))
				} else {
					got = download[float32](b, d, out)
				}
				same := "same bits"
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						same = fmt.Sprintf("DIFFERS at %d: %v vs %v", i, got[i], want[i])
						break
					}
				}
				b.Logf("%s  %-32s %7.1f us  %5.2f TB/s  %s", name, v.name, 1e6*sec, gb/sec/1e3, same)
			}
			// The backward pass's transposed product (dx = A^T dy: the
			// sources' rows, about fanout/2+1 times as many, shorter):
			// the short-row kernels against the others.
			dy := out
			if bf {
				dyb, err := d.Alloc(dt, ly.rows*ly.width)
				must(b, err)
				must(b, d.Convert(dyb, mustConvert32(b, d, xv[:ly.rows*ly.width])))
				dy = dyb
			}
			dx, err := d.Alloc(dt, srcs*ly.width)
			must(b, err)
			tgb := float64(len(indices)) * float64(ly.width) * float64(dt.Size()) / 1e9
			for _, short := range []bool{true, false} {
				shortKernels = short
				sec := timeIt(func() error { return d.SpMM(dx, a, true, dy, w, 1, ly.width) })
				b.Logf("%s  transposed (%6d rows) short-row kernels %-5v %7.1f us  %5.2f TB/s", name, srcs, short, 1e6*sec, tgb/sec/1e3)
			}
			shortKernels = true
			d.Free(dx)
			if bf {
				d.Free(dy)
			}
			d.Free(ref)
			d.Free(out)
			if bf {
				d.Free(x)
			}
		}
		d.Free(x32)
		d.Free(w)
		d.FreeSparse(a)
	}
}

// bestTime runs fn reps times, each between two device synchronizations,
// and returns the fastest run's seconds after the first warm ones.
func bestTime(tb testing.TB, d *Device, reps, warm int, fn func() error) float64 {
	best := math.Inf(1)
	for rep := 0; rep < reps; rep++ {
		must(tb, d.Synchronize())
		t := time.Now()
		must(tb, fn())
		must(tb, d.Synchronize())
		if rep >= warm {
			best = min(best, time.Since(t).Seconds())
		}
	}
	return best
}

// mustConvert32 uploads v as a float32 buffer freed at the benchmark's end.
func mustConvert32(b *testing.B, d *Device, v []float32) backend.Buffer {
	buf := upload(b, d, backend.Float32, v)
	b.Cleanup(func() { d.Free(buf) })
	return buf
}

// mustConvert returns a float32 copy of the bfloat16 buffer src.
func mustConvert(b *testing.B, d *Device, src backend.Buffer) backend.Buffer {
	out, err := d.Alloc(backend.Float32, src.Len())
	must(b, err)
	must(b, d.Convert(out, src))
	b.Cleanup(func() { d.Free(out) })
	return out
}
