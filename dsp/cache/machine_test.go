package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dsp/internal/devbuf"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// TestHostMachineGroups: the grouping puts the own bin (with cold rows)
// first, then the peers in rank order, pos inverts it, the counts match
// the holder table, and the scatter puts rows back at their positions.
func TestHostMachineGroups(t *testing.T) {
	const n, cols = 300, 3
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 3, 4} {
		plan, err := NewPlan(evenBook(t, n, k), hotOrder(n, 3), cols, PlanConfig{BudgetBytes: 40 * 4 * cols, Policy: Partition})
		if err != nil {
			t.Fatal(err)
		}
		for rank := range k {
			holder, err := holderTable(plan, rank, n)
			if err != nil {
				t.Fatal(err)
			}
			m := &hostMachine{b: be, holder: holder, k: k, rank: rank, rows: n}
			nodes := randomNodes(n, 120+rank, uint64(7*k+rank))
			ib, err := devbuf.Upload(be, nodes)
			if err != nil {
				t.Fatal(err)
			}
			g, _ := be.Alloc(backend.Int32, len(nodes))
			p, _ := be.Alloc(backend.Int32, len(nodes))
			if err := m.Route(ib, len(nodes), g, p); err != nil {
				t.Fatal(err)
			}
			cnt, err := m.Counts()
			if err != nil {
				t.Fatal(err)
			}
			gv, pv := cpu.I32(g.(*cpu.Buffer)), cpu.I32(p.(*cpu.Buffer))
			// Expected bins from the holder table.
			want := make([]int64, k+2)
			binOf := func(v int32) int {
				h := int(holder[v])
				if h < 0 {
					return rank
				}
				return h
			}
			for _, v := range nodes {
				want[binOf(v)]++
				if holder[v] < 0 {
					want[k]++
				}
			}
			if fmt.Sprint(cnt) != fmt.Sprint(want) {
				t.Fatalf("k=%d rank %d: counts %v, want %v", k, rank, cnt, want)
			}
			order := []int{rank}
			for q := range k {
				if q != rank {
					order = append(order, q)
				}
			}
			j := 0
			seen := make([]bool, len(nodes))
			for _, q := range order {
				for range cnt[q] {
					if binOf(gv[j]) != q || nodes[pv[j]] != gv[j] || seen[pv[j]] {
						t.Fatalf("k=%d rank %d: slot %d holds node %d at position %d, bin %d", k, rank, j, gv[j], pv[j], q)
					}
					seen[pv[j]] = true
					j++
				}
			}
			stage := make([]float32, len(nodes)*cols)
			for j := range gv {
				for c := range cols {
					stage[j*cols+c] = float32(gv[j]*10) + float32(c)
				}
			}
			sb, _ := devbuf.Upload(be, stage)
			x, _ := be.Alloc(backend.Float32, len(nodes)*cols)
			if err := m.Scatter(x, sb, p, len(nodes), cols, 0, 0); err != nil {
				t.Fatal(err)
			}
			xv := cpu.F32(x.(*cpu.Buffer))
			for i, v := range nodes {
				for c := range cols {
					if xv[i*cols+c] != float32(v*10)+float32(c) {
						t.Fatalf("k=%d rank %d: row %d col %d = %v", k, rank, i, c, xv[i*cols+c])
					}
				}
			}
		}
	}
}

// TestLoadDeviceInput: a buffer of the wrong type and out-of-range IDs
// fail with ErrInput on one device.
func TestLoadDeviceInput(t *testing.T) {
	const n, cols = 20, 2
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := NewPlan(evenBook(t, n, 1), hotOrder(n, 1), cols, PlanConfig{BudgetBytes: 5 * 4 * cols})
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLoader(LoaderConfig{Plan: plan, Rank: 0, Rows: n, Cols: cols, Backend: be, Store: &HostStore{B: be, Table: table(n, cols), Rows: n, Cols: cols}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, _ := devbuf.Upload(be, []float32{1, 2})
	if _, err := l.LoadDevice(context.Background(), f); !errors.Is(err, ErrInput) {
		t.Fatalf("float IDs: %v", err)
	}
	if _, err := l.LoadDevice(context.Background(), nil); !errors.Is(err, ErrInput) {
		t.Fatalf("nil IDs: %v", err)
	}
	for _, bad := range [][]int32{{-1}, {3, n}} {
		if _, err := l.Load(context.Background(), bad); !errors.Is(err, ErrInput) {
			t.Fatalf("Load(%v): %v", bad, err)
		}
	}
}

// countingMachine is a device machine for the registry test: the host
// mirror, counting the routes that reach it.
type countingMachine struct {
	hostMachine
	routes int
}

func (m *countingMachine) Route(ids backend.Buffer, n int, grouped, pos backend.Buffer) error {
	m.routes++
	return m.hostMachine.Route(ids, n, grouped, pos)
}

// TestDeviceMachineRegistry: a loader runs the registered device
// machine on the back ends it takes (the rows still equal the table's),
// the host mirror on the others (nil, nil), and fails with the device
// machine's error; a second registration panics.
func TestDeviceMachineRegistry(t *testing.T) {
	if deviceMachine != nil {
		t.Fatal("a device machine is registered in the cache tests")
	}
	const n, cols = 200, 3
	x := table(n, cols)
	plan, err := NewPlan(evenBook(t, n, 1), hotOrder(n, 3), cols, PlanConfig{BudgetBytes: 40 * 4 * cols})
	if err != nil {
		t.Fatal(err)
	}
	be, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var made *countingMachine
	mode := "take"
	RegisterDevice(func(b backend.Backend, holder []int8, k, rank, rows int) (Machine, error) {
		switch mode {
		case "take":
			made = &countingMachine{hostMachine: hostMachine{b: b, holder: holder, k: k, rank: rank, rows: rows}}
			return made, nil
		case "fail":
			return nil, errors.New("no kernels today")
		}
		return nil, nil
	})
	defer func() { deviceMachine = nil }()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a second RegisterDevice did not panic")
			}
		}()
		RegisterDevice(func(backend.Backend, []int8, int, int, int) (Machine, error) { return nil, nil })
	}()
	cfg := LoaderConfig{Plan: plan, Rows: n, Cols: cols, Backend: be, Store: &HostStore{B: be, Table: x, Rows: n, Cols: cols, Hot: len(plan.Rows(0))}}
	nodes := randomNodes(n, 70, 5)
	for _, m := range []string{"take", "pass"} {
		mode, made = m, nil
		l, err := NewLoader(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out, err := l.Load(context.Background(), nodes)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, out.Len())
		if err := be.Download(got, out); err != nil {
			t.Fatal(err)
		}
		be.Free(out)
		for i, v := range nodes {
			for c := range cols {
				if got[i*cols+c] != x[int(v)*cols+c] {
					t.Fatalf("%s: row %d (node %d) col %d: %v, want %v", m, i, v, c, got[i*cols+c], x[int(v)*cols+c])
				}
			}
		}
		_, host := l.mach.(*hostMachine)
		switch {
		case m == "take" && (made == nil || l.mach != Machine(made) || made.routes == 0):
			t.Errorf("the registered machine did not route the load: %+v", made)
		case m == "pass" && (made != nil || !host):
			t.Errorf("a back end the device machine passes on runs %T", l.mach)
		}
		l.Close()
	}
	mode = "fail"
	if _, err := NewLoader(cfg); err == nil || err.Error() != "no kernels today" {
		t.Errorf("NewLoader with a failing device machine: %v", err)
	}
}

// TestParseNames: the policy and hotness names (empty: the defaults),
// and unknown ones refused as ErrInput naming the value.
func TestParseNames(t *testing.T) {
	for s, want := range map[string]Policy{"": Partition, "partition": Partition, "replicate": Replicate, "auto": Auto} {
		if p, err := ParsePolicy(s); err != nil || p != want {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q", s, p, err, want)
		}
	}
	for s, want := range map[string]Hotness{"": DefaultHotness, "in-degree": ByInDegree, "pagerank": ByPageRank,
		"reverse-pagerank": ByReversePageRank, "presample": ByPreSampling} {
		if h, err := ParseHotness(s); err != nil || h != want {
			t.Errorf("ParseHotness(%q) = %q, %v; want %q", s, h, err, want)
		}
	}
	if _, err := ParsePolicy("lru"); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), `"lru"`) {
		t.Errorf("ParsePolicy(lru): %v", err)
	}
	if _, err := ParseHotness("degree"); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), `"degree"`) {
		t.Errorf("ParseHotness(degree): %v", err)
	}
}
