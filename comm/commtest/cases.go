package commtest

import (
	"context"
	"fmt"
	"math"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/internal/rng"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Case is one checked collective. Every rank runs the same Case; inputs
// are derived from (Seed, rank, element index), so each rank can compute
// the expected output alone.
type Case struct {
	Op    comm.Op
	DType backend.DType
	Red   comm.ReduceOp // AllReduce, ReduceScatter
	// Len is the per-rank length: the buffer of AllReduce and Broadcast,
	// the block of AllGather, AllToAll and ReduceScatter, and the upper
	// bound of the variable counts of AllGatherV and AllToAllV.
	Len  int
	Seed uint64
	// Alloc takes the buffers from Comm.Alloc instead of the back end.
	Alloc bool
}

func (c Case) String() string {
	s := fmt.Sprintf("%v/%v", c.Op, c.DType)
	if c.Op == comm.OpAllReduce || c.Op == comm.OpReduceScatter {
		s += "/" + c.Red.String()
	}
	return fmt.Sprintf("%s/len=%d/seed=%d", s, c.Len, c.Seed)
}

// vcount is the variable count of AllGatherV (s = sender, d = -1) and
// AllToAllV (s -> d). Some counts are zero.
func vcount(seed uint64, max, s, d int) int {
	h := rng.Hash(rng.Derive(seed, 0x5eed, uint64(s)), uint64(d+1))
	if h%5 == 0 {
		return 0
	}
	return int(rng.Below(h>>3, uint64(max)+1))
}

// RunCase runs c on this rank with buffers of be (nil: the CPU back end,
// for host communicators) and checks the result. All ranks must call it
// with the same Case. The returned error describes the first wrong
// element, or is the collective's own error.
func RunCase(ctx context.Context, cm comm.Comm, be backend.Backend, c Case) (rerr error) {
	n, r := cm.Size(), cm.Rank()
	be, err := orCPU(be)
	if err != nil {
		return err
	}
	d := &bufs{be: be}
	if c.Alloc {
		d.cm = cm
	}
	defer func() {
		if e := d.free(); e != nil && rerr == nil {
			rerr = fmt.Errorf("rank %d: %v: Free: %w", r, c, e)
		}
	}()
	fail := func(err error) error { return fmt.Errorf("rank %d: %v: %w", r, c, err) }
	// in and out are the case's buffers; after the collective, out is
	// read back (and in, to check it was left alone).
	var in, out host
	var bin, bout backend.Buffer
	run := func(f func() error) error {
		var err error
		if bin, err = d.put(in); err != nil {
			return err
		}
		bout = bin
		if out.dt != 0 {
			if bout, err = d.put(out); err != nil {
				return err
			}
		}
		if err := f(); err != nil {
			return err
		}
		if out.dt == 0 {
			out = in
		} else {
			in.poison() // must come back unchanged from the device
			if err := d.get(in, bin); err != nil {
				return err
			}
		}
		out.poison()
		return d.get(out, bout)
	}
	var check func() error
	reduced := false // out must be bit-identical on every rank
	switch c.Op {
	case comm.OpAllReduce:
		in = newHost(c.DType, c.Len)
		fill(in, c.Seed, r, 0)
		err = run(func() error { return cm.AllReduce(ctx, bin, c.Red) })
		check = func() error { return checkReduced(cm, c, out, 0) }
		reduced = true
	case comm.OpReduceScatter:
		in = newHost(c.DType, n*c.Len)
		fill(in, c.Seed, r, 0)
		out = newHost(c.DType, c.Len)
		out.poison()
		err = run(func() error { return cm.ReduceScatter(ctx, bout, bin, c.Red) })
		check = func() error {
			if e := checkReduced(cm, c, out, r*c.Len); e != nil {
				return e
			}
			return checkUnchanged(c, in, r)
		}
	case comm.OpBroadcast:
		root := int(c.Seed % uint64(n))
		in = newHost(c.DType, c.Len)
		if r == root {
			fill(in, c.Seed, root, 0)
		} else {
			in.poison()
		}
		err = run(func() error { return cm.Broadcast(ctx, bin, root) })
		check = func() error { return checkCopy(c, "buf", out, 0, c.Len, root, 0) }
	case comm.OpAllGather, comm.OpAllGatherV:
		counts := make([]int, n)
		total := 0
		for s := range counts {
			counts[s] = c.Len
			if c.Op == comm.OpAllGatherV {
				counts[s] = vcount(c.Seed, c.Len, s, -1)
			}
			total += counts[s]
		}
		in = newHost(c.DType, counts[r])
		fill(in, c.Seed, r, 0)
		out = newHost(c.DType, total)
		out.poison()
		err = run(func() error {
			if c.Op == comm.OpAllGather {
				return cm.AllGather(ctx, bout, bin)
			}
			return cm.AllGatherV(ctx, bout, bin, counts)
		})
		check = func() error {
			off := 0
			for s, k := range counts {
				if e := checkCopy(c, "dst", out, off, k, s, 0); e != nil {
					return e
				}
				off += k
			}
			return checkUnchanged(c, in, r)
		}
	case comm.OpAllToAll, comm.OpAllToAllV:
		send, recv := make([]int, n), make([]int, n)
		st, rt := 0, 0
		for p := range send {
			send[p], recv[p] = c.Len, c.Len
			if c.Op == comm.OpAllToAllV {
				send[p], recv[p] = vcount(c.Seed, c.Len, r, p), vcount(c.Seed, c.Len, p, r)
			}
			st += send[p]
			rt += recv[p]
		}
		// Rank s's input is one logical vector; its block for rank t
		// starts at the sum of its earlier counts.
		offsetIn := func(s, t int) int {
			o := 0
			for k := 0; k < t; k++ {
				if c.Op == comm.OpAllToAllV {
					o += vcount(c.Seed, c.Len, s, k)
				} else {
					o += c.Len
				}
			}
			return o
		}
		in = newHost(c.DType, st)
		fill(in, c.Seed, r, 0)
		out = newHost(c.DType, rt)
		out.poison()
		err = run(func() error {
			if c.Op == comm.OpAllToAll {
				return cm.AllToAll(ctx, bout, bin)
			}
			return cm.AllToAllV(ctx, bout, recv, bin, send)
		})
		check = func() error {
			off := 0
			for s, k := range recv {
				if e := checkCopy(c, "dst", out, off, k, s, offsetIn(s, r)); e != nil {
					return e
				}
				off += k
			}
			return checkUnchanged(c, in, r)
		}
	case comm.OpBarrier:
		err = cm.Barrier(ctx)
		check = func() error { return nil }
	default:
		return fmt.Errorf("commtest: unknown op %v", c.Op)
	}
	if err != nil {
		return fail(err)
	}
	bad := check()
	if reduced {
		if e := sameEverywhere(ctx, cm, d, out); e != nil && bad == nil {
			bad = e
		}
	}
	if bad != nil {
		return fail(bad)
	}
	return nil
}

// checkCopy checks got[off:off+k] == rank s's input elements [from, from+k).
func checkCopy(c Case, name string, got host, off, k, s, from int) error {
	want := newHost(c.DType, k)
	fill(want, c.Seed, s, from)
	for i := 0; i < k; i++ {
		if !equalAt(got, want, off+i, i) {
			return fmt.Errorf("%s[%d] = %s, want %s (element %d from rank %d)", name, off+i, got.at(off+i), want.at(i), from+i, s)
		}
	}
	return nil
}

// checkUnchanged checks that the source buffer was not modified.
func checkUnchanged(c Case, src host, r int) error {
	want := newHost(c.DType, src.len())
	fill(want, c.Seed, r, 0)
	for i := 0; i < src.len(); i++ {
		if !equalAt(src, want, i, i) {
			return fmt.Errorf("src[%d] was modified: %s, was %s", i, src.at(i), want.at(i))
		}
	}
	return nil
}

// checkReduced checks got[i] against the reduction over all ranks of
// input element base+i.
func checkReduced(cm comm.Comm, c Case, got host, base int) error {
	n := cm.Size()
	exact := cm.Caps().RankOrderSum || c.Red == comm.Max || c.DType != backend.Float32
	for i := 0; i < got.len(); i++ {
		switch c.DType {
		case backend.Float32:
			var acc float32
			var sum, abs float64
			for s := 0; s < n; s++ {
				v, _ := value(c.DType, c.Seed, s, base+i)
				switch {
				case s == 0:
					acc = v
				case c.Red == comm.Max:
					acc = max(acc, v)
				default:
					acc += v
				}
				sum += float64(v)
				abs += math.Abs(float64(v))
			}
			if c.Red == comm.Mean {
				acc /= float32(n)
				sum /= float64(n)
				abs /= float64(n)
			}
			g := got.f32[i]
			if exact {
				if math.Float32bits(g) != math.Float32bits(acc) {
					return fmt.Errorf("element %d = %v, want %v exactly", base+i, g, acc)
				}
			} else if tol := float64(n+1)*abs*0x1p-23 + 1e-30; math.Abs(float64(g)-sum) > tol || g != g {
				return fmt.Errorf("element %d = %v, want %v within %g", base+i, g, sum, tol)
			}
		default:
			var acc int64
			for s := 0; s < n; s++ {
				_, v := value(c.DType, c.Seed, s, base+i)
				switch {
				case s == 0:
					acc = v
				case c.Red == comm.Max:
					acc = max(acc, v)
				default:
					acc += v
					if c.DType == backend.Int32 {
						acc = int64(int32(acc))
					}
				}
			}
			if c.Red == comm.Mean {
				acc /= int64(n)
			}
			var g int64
			if c.DType == backend.Int32 {
				g = int64(got.i32[i])
			} else {
				g = got.i64[i]
			}
			if g != acc {
				return fmt.Errorf("element %d = %d, want %d", base+i, g, acc)
			}
		}
	}
	return nil
}

// sameEverywhere all-gathers a hash of h through cm and checks that all
// ranks hold the same result.
func sameEverywhere(ctx context.Context, cm comm.Comm, d *bufs, h host) error {
	n := cm.Size()
	mine := host{dt: backend.Int64, i64: []int64{h.hash()}}
	all := newHost(backend.Int64, n)
	bm, err := d.put(mine)
	if err != nil {
		return err
	}
	ba, err := d.put(all)
	if err != nil {
		return err
	}
	if err := cm.AllGather(ctx, ba, bm); err != nil {
		return fmt.Errorf("exchanging result hashes: %w", err)
	}
	if err := d.get(all, ba); err != nil {
		return err
	}
	for s, x := range all.i64 {
		if x != all.i64[0] {
			return fmt.Errorf("rank %d's result differs from rank 0's (hash %x vs %x)", s, x, all.i64[0])
		}
	}
	return nil
}

// RunProgram runs every case of Cases for each length, with seeds derived
// from seed, on this rank with buffers of be (nil: the CPU back end);
// every rank of the group must call it with the same arguments.
func RunProgram(ctx context.Context, cm comm.Comm, be backend.Backend, lens []int, seed uint64) error {
	for i, l := range lens {
		for _, c := range Cases(l, seed+uint64(i)) {
			if err := RunCase(ctx, cm, be, c); err != nil {
				return err
			}
		}
	}
	return nil
}
