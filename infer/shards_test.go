package infer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// shardTables copies the dense features' rows into one buffer per device:
// device d gets the nodes holder says it holds, at the rows it says.
func shardTables(t *testing.T, bs []backend.Backend, x *Input, rows []int, holder func(int32) (int, int32)) []backend.Buffer {
	t.Helper()
	host := make([][]float32, len(bs))
	for d := range bs {
		host[d] = make([]float32, rows[d]*x.Cols)
	}
	for v := range x.Rows {
		d, k := holder(int32(v))
		copy(host[d][int(k)*x.Cols:(int(k)+1)*x.Cols], x.Dense[v*x.Cols:(v+1)*x.Cols])
	}
	out := make([]backend.Buffer, len(bs))
	for d, b := range bs {
		buf, err := b.Alloc(backend.Float32, len(host[d]))
		if err != nil {
			t.Fatal(err)
		}
		if len(host[d]) > 0 {
			if err := b.Upload(buf, host[d]); err != nil {
				t.Fatal(err)
			}
		}
		out[d] = buf
		t.Cleanup(func() { b.Free(buf) })
	}
	return out
}

// TestInputShards: layer 1 reading the features from shards on the
// devices (Options.InputShards: by range, uneven and one empty, or
// spread by a holder as a partitioned feature cache spreads them, in
// another order) gives the host path's output bit for bit, for 1, 2 and
// 4 CPU devices, SAGE, GCN and GAT, every node, a few, or layer 1 only,
// with the hidden layers resident or on the host; the log and the
// layer's stats say where layer 1 read; the caller's buffers are not
// freed.
func TestInputShards(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	n := ds.NumNodes()
	x := inputs(t, ds, false)
	offsets := map[int][]int64{1: {0, n}, 2: {0, 400, n}, 4: {0, 1500, 1500, 2000, n}}
	for _, kind := range []string{nn.KindSAGE, nn.KindGCN, nn.KindGAT} {
		cfg, params := deepModel(t, b, kind, ds)
		for _, devices := range []int{1, 2, 4} {
			for _, layout := range []string{"range", "holder"} {
				for i, req := range []Request{{}, {Nodes: []int32{2707, 3, 3, 1000, 42}}, {Layer: 1, Nodes: []int32{9, 1}}} {
					if testing.Short() && (kind != nn.KindSAGE && (devices != 4 || i > 0)) {
						continue
					}
					t.Run(fmt.Sprintf("%s/devices=%d/%s/nodes=%d/layer=%d", kind, devices, layout, len(req.Nodes), req.Layer), func(t *testing.T) {
						bs := make([]backend.Backend, devices)
						for i := range bs {
							bs[i] = newCPU(t)
						}
						off := offsets[devices]
						rows := make([]int, devices)
						var holder func(int32) (int, int32)
						if layout == "range" {
							for d := range rows {
								rows[d] = int(off[d+1] - off[d])
							}
						} else {
							// Node v on device v%p, rows in descending node order.
							p := int32(devices)
							for v := range int32(n) {
								rows[v%p]++
							}
							holder = func(v int32) (int, int32) {
								d := v % p
								return int(d), int32(rows[d]) - 1 - v/p
							}
						}
						loc := holder
						if loc == nil {
							loc = func(v int32) (int, int32) {
								for d := range devices {
									if int64(v) < off[d+1] {
										return d, v - int32(off[d])
									}
								}
								return -1, 0
							}
						}
						tables := shardTables(t, bs, x, rows, loc)
						want := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: off, Budget: MinBudget, Placement: PlaceHost})
						for _, res := range []Residency{ResidentOn, ResidentOff} {
							var log bytes.Buffer
							sh := &Shards{Tables: tables, Rows: rows, Holder: holder}
							got := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: off, Budget: MinBudget, Resident: res, InputShards: sh, Log: &log, Workers: 3})
							sameBits(t, got, want)
							if st := got.Layers[0]; st.Input != "shards" {
								t.Errorf("resident %v: layer 1 read its input from %q, want the shards", res, st.Input)
							}
							if !strings.Contains(log.String(), "input from the feature shards on the devices") {
								t.Errorf("the log does not say layer 1 read the shards:\n%s", log.String())
							}
						}
						// The caller's tables are intact: still the features' rows.
						for d, buf := range tables {
							h := make([]float32, buf.Len())
							if err := bs[d].Download(h, buf); err != nil {
								t.Fatal(err)
							}
							for v := range x.Rows {
								if dv, k := loc(int32(v)); dv == d && h[int(k)*x.Cols+v%x.Cols] != x.Dense[v*x.Cols+v%x.Cols] {
									t.Fatalf("device %d's row %d (node %d) changed", d, k, v)
								}
							}
						}
					})
				}
			}
		}
	}
}

// TestInputShardsBad: shards that do not match the devices, the ranges
// or the features are refused before anything runs, naming the shard; a
// holder naming a device or row that does not exist fails the run with
// the node named.
func TestInputShardsBad(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	cfg, params := deepModel(t, b, nn.KindSAGE, ds)
	x := inputs(t, ds, false)
	n := int(ds.NumNodes())
	bs := []backend.Backend{newCPU(t), newCPU(t)}
	models, free, err := NewModels(bs, cfg, params)
	if err != nil {
		t.Fatal(err)
	}
	defer free()
	half := n / 2
	full := func(rows []int) []backend.Buffer {
		return shardTables(t, bs, x, rows, func(v int32) (int, int32) {
			if int(v) < half {
				return 0, v
			}
			return 1, v - int32(half)
		})
	}
	good := full([]int{half, n - half})
	sparse := inputs(t, ds, true)
	for _, tc := range []struct {
		name string
		x    *Input
		sh   *Shards
		want string
	}{
		{"count", x, &Shards{Tables: good[:1], Rows: []int{n}}, "1 feature shards with 1 row counts for 2 back ends"},
		{"range", x, &Shards{Tables: good, Rows: []int{half + 1, n - half - 1}}, "feature shard 0 has 1355 rows, device 0's range [0, 1354) 1354"},
		{"size", x, &Shards{Tables: good, Rows: []int{half - 1, n - half + 1}, Holder: func(v int32) (int, int32) { return 0, 0 }}, "feature shard 0 is 1940282 float32 values, want 1353 x 1433 float32"},
		{"negative", x, &Shards{Tables: good, Rows: []int{-1, n - half}, Holder: func(v int32) (int, int32) { return 0, 0 }}, "feature shard 0 has -1 rows"},
		{"sparse", sparse, &Shards{Tables: good, Rows: []int{half, n - half}}, "feature shards given for sparse features"},
		{"device", x, &Shards{Tables: good, Rows: []int{half, n - half}, Holder: func(v int32) (int, int32) { return 2, 0 }}, "held by device 2 of 2"},
		{"row", x, &Shards{Tables: good, Rows: []int{half, n - half}, Holder: func(v int32) (int, int32) { return 1, int32(n) }}, "row 2708 of device 1's 1354"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), in, tc.x, Request{}, Options{Backends: bs, Models: models, InputShards: tc.sh})
			var ie *Error
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want an *infer.Error saying %q", err, tc.want)
			}
		})
	}
}

// memCPU is a CPU back end that reports free memory (backend.Memory),
// as a GPU does.
type memCPU struct {
	backend.Backend
	free uint64
}

func (m *memCPU) MemInfo() (free, total uint64, err error) { return m.free, 2 * m.free, nil }
func (m *memCPU) Stats() backend.AllocStats                { return backend.AllocStats{} }

// SpMMConcat is the wrapped back end's (see counting's).
func (m *memCPU) SpMMConcat(out backend.Buffer, a backend.Sparse, x, w backend.Buffer, width int) error {
	return m.Backend.(backend.ConcatAggregator).SpMMConcat(out, a, x, w, width)
}
func (m *memCPU) ResetPeak()          {}
func (m *memCPU) ReleaseCache() error { return nil }

// TestAutoShards: on devices that report their memory, when the whole
// feature table does not fit (over half of a device's free memory) but
// each device's range does, layer 1 uploads each device's range and
// reads its sources through the exchange (input "shards"): the host
// path's output bit for bit, uneven ranges, a device without nodes.
// With room for the whole table it is uploaded whole ("device"); with
// room for neither the rows are gathered on the host.
func TestAutoShards(t *testing.T) {
	ds, in := cora(t)
	b := newCPU(t)
	cfg, params := deepModel(t, b, nn.KindSAGE, ds)
	x := inputs(t, ds, false)
	n := ds.NumNodes()
	table := uint64(4 * len(x.Dense)) // 15.5 MB
	for _, tc := range []struct {
		name  string
		free  uint64
		off   []int64
		input string
	}{
		{"ranges fit", table * 3 / 4, []int64{0, 900, 2000, n}, "shards"},
		{"device without nodes", table * 3 / 4, []int64{0, 1300, 1300, n}, "shards"},
		{"table fits", 3 * table, nil, "device"},
		{"nothing fits", table / 8, nil, "host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := []backend.Backend{&memCPU{newCPU(t), tc.free}, &memCPU{newCPU(t), tc.free}, &memCPU{newCPU(t), tc.free}}
			ex, err := inproc.New(len(bs), comm.Options{Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range ex {
					c.Close()
				}
			}()
			want := runOn(t, bs, cfg, params, in, x, Request{}, Options{Offsets: tc.off, Budget: MinBudget, Placement: PlaceHost})
			got := runOn(t, bs, cfg, params, in, x, Request{}, Options{Offsets: tc.off, Budget: MinBudget, Exchange: ex})
			sameBits(t, got, want)
			if st := got.Layers[0]; st.Input != tc.input {
				t.Errorf("layer 1 read its input from %q, want %q", st.Input, tc.input)
			}
		})
	}
}

// TestSpreadFeatures: when every device uploads the whole feature table
// (room for it on devices that report their memory; 3 devices with
// uneven ranges, one empty, and without -short 2), each uploads only
// its range and the exchange all-gathers the rest: every device then
// holds the whole table bit for bit (kept by a Keep, read back here),
// layer 1 reads its input on the devices, and the logits equal one
// device's and the host path's bit for bit. Without an exchange each
// device uploads the table whole, as before; a failed all-gather fails
// the run with an *infer.Error and leaves no buffer of the run's behind.
func TestSpreadFeatures(t *testing.T) {
	saved := minSpread
	minSpread = 0 // Cora's table
	t.Cleanup(func() { minSpread = saved })
	ds, in := cora(t)
	b := newCPU(t)
	cfg, params := deepModel(t, b, nn.KindSAGE, ds)
	x := inputs(t, ds, false)
	n, f := ds.NumNodes(), x.Cols
	table := uint64(4 * len(x.Dense))
	const budget = 64 << 20 // a chunk a layer: the features are what this tests
	req := Request{}
	layouts := [][]int64{{0, 1300, 1300, n}, {0, 900, n}}
	if testing.Short() {
		// Layer 1 over every node takes most of a second under the race
		// detector: a node in each range reads rows of every range.
		req, layouts = Request{Nodes: []int32{2707, 5, 1299, 1300}}, layouts[:1]
	}
	one := runOn(t, []backend.Backend{newCPU(t)}, cfg, params, in, x, req, Options{Budget: budget, Placement: PlaceDevice})
	for _, off := range layouts {
		p := len(off) - 1
		cs := make([]*counting, p)
		bs := make([]backend.Backend, p)
		for d := range bs {
			cs[d] = &counting{Backend: newCPU(t), floats: map[int]int{}, live: map[backend.Buffer]bool{}}
			bs[d] = &memCPU{cs[d], 3 * table}
		}
		exchange := func(t *testing.T) []comm.Comm {
			ex, err := inproc.New(p, comm.Options{Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				for _, c := range ex {
					c.Close()
				}
			})
			return ex
		}
		host := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: off, Budget: budget, Placement: PlaceHost})
		sameBits(t, host, one)
		for _, tc := range []struct {
			name  string
			ex    func(*testing.T) []comm.Comm
			whole bool // each device uploads the whole table
			log   string
		}{
			{"spread", exchange, false, "inference layer 1: the features uploaded by ranges"},
			{"no exchange", func(*testing.T) []comm.Comm { return make([]comm.Comm, p) }, true, "inference layer 1: the features go whole to each device (exchange communicator 0"},
		} {
			t.Run(fmt.Sprintf("devices=%d/%s", p, tc.name), func(t *testing.T) {
				for _, c := range cs {
					c.reset()
				}
				var log bytes.Buffer
				keep := &Keep{Budget: 64 << 20}
				defer keep.Free()
				got := runOn(t, bs, cfg, params, in, x, req, Options{Offsets: off, Budget: budget, Exchange: tc.ex(t), Log: &log, Keep: keep})
				sameBits(t, got, one)
				if st := got.Layers[0]; st.Input != "device" {
					t.Errorf("layer 1 read its input from %q, want the devices", st.Input)
				}
				if !strings.Contains(log.String(), tc.log) {
					t.Errorf("the log does not say %q:\n%s", tc.log, log.String())
				}
				for d, c := range cs {
					rows := int(off[d+1] - off[d])
					whole, part := c.floats[int(n)*f], 0
					if rows > 0 {
						part = c.floats[rows*f]
					}
					if tc.whole && (whole != 1 || part != 0) || !tc.whole && (whole != 0 || part != min(rows, 1)) {
						t.Errorf("device %d: the whole table went up %d times, its %d rows %d times", d, whole, rows, part)
					}
					buf, _ := keep.features(d, nil, 0)
					if buf == nil {
						t.Fatalf("device %d: the features were not kept", d)
					}
					// Compared as bytes: a loop over 3.9M values takes
					// seconds under the race detector.
					got, _ := cpu.Bytes(buf)
					want, _ := cpu.Bytes(cpu.WrapF32(x.Dense))
					if !bytes.Equal(got, want) {
						t.Fatalf("device %d does not hold the features bit for bit", d)
					}
				}
			})
		}
		t.Run(fmt.Sprintf("devices=%d/failed", p), func(t *testing.T) {
			models, free, err := NewModels(bs, cfg, params)
			if err != nil {
				t.Fatal(err)
			}
			defer free()
			live := make([]int, p)
			for d, c := range cs {
				live[d] = len(c.live)
			}
			ex := exchange(t)
			ex[p-1].Close() // the group fails at its first collective
			_, err = Run(context.Background(), in, x, req, Options{Backends: bs, Models: models, Offsets: off, Budget: budget, Exchange: ex})
			var ie *Error
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), "layer 1 input on") || !strings.Contains(err.Error(), "exchange of the features") {
				t.Fatalf("error %v, want an *infer.Error for layer 1's input naming the exchange", err)
			}
			for d, c := range cs {
				if len(c.live) != live[d] {
					t.Errorf("device %d: %d buffers left of the failed run", d, len(c.live)-live[d])
				}
			}
		})
	}
}
