package world

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/inproc"
	"github.com/strata-gnn/strata/comm/rendezvous"
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// proc describes one simulated process of a test job.
type proc struct {
	devices int
	host    string // host id ("" : all the same)
	config  string
	peer    time.Duration // heartbeat timeout
}

// joinAll joins one goroutine per process; each gets its world or error.
func joinAll(t *testing.T, procs []proc, timeout time.Duration) ([]*World, []error) {
	t.Helper()
	port, err := rendezvous.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ws, errs := make([]*World, len(procs)), make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		if p.devices == 0 {
			continue // never arrives
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := rendezvous.Env{Rank: i, WorldSize: len(procs), LocalRank: -1, LocalWorldSize: -1, MasterAddr: "127.0.0.1", MasterPort: port}
			host := p.host
			if host == "" {
				host = "testhost"
			}
			o := Options{Devices: p.devices, Timeout: timeout, HostID: host, Host: "127.0.0.1", Security: &noSecurity, PeerTimeout: p.peer}
			if p.config != "" {
				o.Config = []byte(p.config)
			}
			ws[i], errs[i] = Join(context.Background(), env, o)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, w := range ws {
			if w != nil {
				w.Leave(nil)
			}
		}
	})
	return ws, errs
}

var noSecurity auth.Security // loopback: nothing required

func TestJoinLayout(t *testing.T) {
	ws, errs := joinAll(t, []proc{{devices: 2, host: "a"}, {devices: 1, host: "b"}, {devices: 3, host: "a"}}, 20*time.Second)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	for i, w := range ws {
		if w.Size() != 6 || w.Process() != i || !w.Multi() || w.SameHost() {
			t.Fatalf("process %d: size %d, process %d, multi %v, same host %v", i, w.Size(), w.Process(), w.Multi(), w.SameHost())
		}
	}
	first := []int{0, 2, 3}
	for i, w := range ws {
		if w.First() != first[i] || w.Local() != []int{2, 1, 3}[i] {
			t.Fatalf("process %d: first %d local %d", i, w.First(), w.Local())
		}
	}
	w := ws[1]
	if got := w.Ranks(); len(got) != 1 || got[0] != 2 || !w.IsLocal(2) || w.IsLocal(3) {
		t.Fatalf("process 1 ranks %v", got)
	}
	for r, want := range []int{0, 0, 1, 2, 2, 2} {
		if got := w.Owner(r).Index; got != want {
			t.Errorf("owner of rank %d: process %d, want %d", r, got, want)
		}
	}
	if got := w.Owner(6).Index; got != -1 {
		t.Errorf("owner of rank 6: %d, want none", got)
	}
	info := w.Info()
	if info.Machines != 2 || info.Processes != 3 || info.Ranks != 6 || info.Comm != comm.KindTCP || len(info.PerProcess) != 3 {
		t.Fatalf("info %+v", info)
	}
	if s := ws[2].Self().String(); !strings.Contains(s, "process 2") || !strings.Contains(s, "ranks 3-5") {
		t.Fatalf("process 2 says %q", s)
	}
}

func TestJoinRefusesAnotherConfigByName(t *testing.T) {
	ref := `{"train":{"lr":0.01,"epochs":3},"devices":4}`
	ws, errs := joinAll(t, []proc{{devices: 2, config: ref}, {devices: 2, config: `{"train":{"lr":0.02,"epochs":3},"devices":4}`}}, 20*time.Second)
	for i, err := range errs {
		// Each process finds the difference itself, or learns it from
		// the one that found it first.
		var me *MismatchError
		var ae *AbortError
		switch {
		case errors.As(err, &me):
			if me.Process.Index != 1 || me.Path != "train.lr" || me.Theirs != "0.02" || me.Ref != "0.01" {
				t.Fatalf("process %d: %v, want a mismatch of train.lr naming process 1", i, err)
			}
		case errors.As(err, &ae):
			if !strings.Contains(ae.Msg, "process 1 (host testhost") || !strings.Contains(ae.Msg, "train.lr is 0.02 there, 0.01 on process 0") {
				t.Fatalf("process %d: %v, want process %d's mismatch of train.lr", i, err, 1-i)
			}
		default:
			t.Fatalf("process %d: %v (world %v), want a mismatch of train.lr naming process 1", i, err, ws[i])
		}
	}
	// The same configuration passes; a second agreement is checked too.
	ws, errs = joinAll(t, []proc{{devices: 1, config: ref}, {devices: 1, config: ref}}, 20*time.Second)
	var wg sync.WaitGroup
	for i := range ws {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ws[i].Agree(context.Background(), "dataset", []byte(fmt.Sprintf(`{"nodes":%d}`, 2708+i)))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		var me *MismatchError
		if !errors.As(err, &me) || me.What != "agree/dataset" || me.Path != "nodes" || !strings.Contains(err.Error(), "process 1") {
			t.Fatalf("process %d: %v", i, err)
		}
	}
}

func TestJoinNamesAMissingProcess(t *testing.T) {
	_, errs := joinAll(t, []proc{{devices: 1}, {devices: 0}}, 1500*time.Millisecond)
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "processes [1] did not arrive") {
		t.Fatalf("got %v, want process 1 named", errs[0])
	}
}

func TestJoinRefusesBadDevices(t *testing.T) {
	if _, err := Join(context.Background(), rendezvous.Env{WorldSize: 1}, Options{Devices: 0}); err == nil || !strings.Contains(err.Error(), "0 devices") {
		t.Fatalf("got %v", err)
	}
}

// groups opens a host group on every process concurrently.
func groups(t *testing.T, ws []*World, name string) [][]comm.Comm {
	t.Helper()
	out := make([][]comm.Comm, len(ws))
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = w.HostGroup(context.Background(), name, comm.Options{Timeout: 20 * time.Second})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, cs := range out {
			for _, c := range cs {
				c.Close()
			}
		}
	})
	return out
}

// values are rank r's all-reduce inputs, chosen so that float sums in
// different orders round differently.
func values(r, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Pow(10, float64((i+r)%7-3))) * float32(1+0.1*float64(r)) / 3
	}
	return v
}

// allReduce runs a mean all-reduce of values on every rank of cs.
func allReduce(t *testing.T, cs []comm.Comm, n int) [][]float32 {
	t.Helper()
	out := make([][]float32, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		out[i] = values(c.Rank(), n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.AllReduce(context.Background(), cpu.WrapF32(out[i]), comm.Mean)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", cs[i].Rank(), err)
		}
	}
	return out
}

// TestHostGroupsSumInRankOrder checks that groups across processes
// (tcp across hosts, shm on one) rank their members globally and give
// the in-process group's sums bit for bit.
func TestHostGroupsSumInRankOrder(t *testing.T) {
	const n = 1000
	ref, err := inproc.New(4, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := allReduce(t, ref, n)
	for _, c := range ref {
		c.Close()
	}
	for _, tc := range []struct {
		name  string
		hosts []string
		kind  string
	}{{"tcp", []string{"m1", "m2"}, "tcp"}, {"shm", []string{"", ""}, "shm"}} {
		t.Run(tc.name, func(t *testing.T) {
			ws, errs := joinAll(t, []proc{{devices: 2, host: tc.hosts[0]}, {devices: 2, host: tc.hosts[1]}}, 20*time.Second)
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			gs := groups(t, ws, "grads")
			var all []comm.Comm
			for p, cs := range gs {
				for i, c := range cs {
					if c.Rank() != 2*p+i || c.Size() != 4 || c.Kind() != tc.kind || !c.Caps().RankOrderSum {
						t.Fatalf("process %d local %d: rank %d of %d, %s", p, i, c.Rank(), c.Size(), c.Kind())
					}
					all = append(all, c)
				}
			}
			got := allReduce(t, all, n)
			for r := range got {
				for i := range got[r] {
					if math.Float32bits(got[r][i]) != math.Float32bits(want[r][i]) {
						t.Fatalf("rank %d element %d: %v, in-process %v", r, i, got[r][i], want[r][i])
					}
				}
			}
			// A name is opened once.
			if _, err := ws[0].HostGroup(context.Background(), "grads", comm.Options{}); err == nil || !strings.Contains(err.Error(), "twice") {
				t.Fatalf("second open: %v", err)
			}
		})
	}
}

func TestDeviceGroupStagesCPUBuffers(t *testing.T) {
	ws, errs := joinAll(t, []proc{{devices: 1, host: "m1"}, {devices: 2, host: "m2"}}, 20*time.Second)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dcs := make([][]comm.Comm, 2)
	var wg sync.WaitGroup
	for p, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			devs := make([]backend.Backend, w.Local())
			for i := range devs {
				devs[i] = b
			}
			var kind string
			dcs[p], kind, errs[p] = w.DeviceGroup(context.Background(), "dev", devs, DeviceOptions{Options: comm.Options{Timeout: 20 * time.Second}})
			if errs[p] == nil && kind != comm.KindTCP {
				errs[p] = fmt.Errorf("kind %s", kind)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	bufs := make([]backend.Buffer, 0, 3)
	var cs []comm.Comm
	for _, g := range dcs {
		for _, c := range g {
			x, err := b.Alloc(backend.Float32, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Upload(x, []float32{float32(c.Rank()), 1, 2}); err != nil {
				t.Fatal(err)
			}
			bufs, cs = append(bufs, x), append(cs, c)
		}
	}
	rerrs := make([]error, len(cs))
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rerrs[i] = c.AllReduce(context.Background(), bufs[i], comm.Sum)
		}()
	}
	wg.Wait()
	for _, err := range rerrs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, x := range bufs {
		got := make([]float32, 3)
		if err := b.Download(got, x); err != nil {
			t.Fatal(err)
		}
		if got[0] != 3 || got[1] != 3 || got[2] != 6 {
			t.Fatalf("rank %d: %v, want [3 3 6]", i, got)
		}
	}
	for _, c := range cs {
		c.Close()
	}
}

// TestLeaveEndsTheOthersWaits: a process that fails before opening a
// group tells the others, whose opening ends with its message.
func TestLeaveEndsTheOthersWaits(t *testing.T) {
	ws, errs := joinAll(t, []proc{{devices: 2, host: "m1"}, {devices: 1, host: "m2"}}, time.Minute)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := ws[0].HostGroup(context.Background(), "g", comm.Options{})
		done <- err
	}()
	ws[1].Leave(errors.New("dataset data/x: no such directory"))
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a hang guard, far beyond the poll interval
		t.Fatal("process 0 still waits a minute after process 1 left")
	}
	var ae *AbortError
	if !errors.As(err, &ae) || ae.Process.Index != 1 || !strings.Contains(err.Error(), "no such directory") || !strings.Contains(err.Error(), "rank 2") {
		t.Fatalf("got %v, want process 1's failure", err)
	}
}

// TestExplainNamesTheProcess: a peer that closes its communicator fails
// the others' collective; Explain names its process, host and ranks.
func TestExplainNamesTheProcess(t *testing.T) {
	ws, errs := joinAll(t, []proc{{devices: 1, host: "m1"}, {devices: 2, host: "m2"}}, 20*time.Second)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	gs := groups(t, ws, "g")
	for _, c := range gs[1] {
		c.Close() // process 1 dies
	}
	err := gs[0][0].AllReduce(context.Background(), cpu.WrapF32(make([]float32, 4)), comm.Sum)
	if err == nil {
		t.Fatal("all-reduce succeeded without process 1")
	}
	got := ws[0].Explain(fmt.Errorf("dsp: training: %w", err))
	var pe *PeerError
	if !errors.As(got, &pe) || len(pe.Processes) != 1 || pe.Processes[0].Index != 1 || !strings.Contains(got.Error(), "host m2") {
		t.Fatalf("Explain(%v) = %v, want process 1 on m2 named", err, got)
	}
	// Errors naming no other process, and lone processes, pass through.
	plain := errors.New("disk full")
	if ws[0].Explain(plain) != plain || Single(4).Explain(err) != err {
		t.Fatal("Explain changed an error it cannot attribute")
	}
	own := &comm.OpError{Kind: "tcp", Rank: 0, Op: comm.OpBarrier, Missing: []int{0}, Err: comm.ErrTimeout}
	if ws[0].Explain(own) != error(own) {
		t.Fatal("Explain blamed another process for this one's ranks")
	}
}

func TestSingle(t *testing.T) {
	w := Single(3)
	if w.Size() != 3 || w.Local() != 3 || w.First() != 0 || w.Multi() || !w.IsLocal(2) || w.IsLocal(3) {
		t.Fatalf("single: %+v", w.Self())
	}
	cs, err := w.HostGroup(context.Background(), "x", comm.Options{})
	if err != nil || len(cs) != 3 || cs[2].Rank() != 2 || cs[0].Kind() != "inproc" {
		t.Fatalf("host group: %v %v", cs, err)
	}
	for _, c := range cs {
		c.Close()
	}
	if w.Info().Comm != "inproc" || w.Agree(context.Background(), "x", nil) != nil || w.Barrier(context.Background(), "x") != nil {
		t.Fatal("single process: no agreement or barrier to make")
	}
}

func TestJSONDiff(t *testing.T) {
	for _, tc := range []struct{ a, b, path, va, vb string }{
		{`{"a":1,"b":{"c":[1,2]}}`, `{"a":1,"b":{"c":[1,3]}}`, "b.c[1]", "2", "3"},
		{`{"a":1}`, `{"a":1,"z":true}`, "z", "unset", "true"},
		{`{"a":[1]}`, `{"a":[1,2]}`, "a", "[1]", "[1,2]"},
		{`{"a":"x"}`, `{"a":{"y":1}}`, "a", `"x"`, `{"y":1}`},
		{`1`, `2`, "(the whole configuration)", "1", "2"},
		{`{"a":1}`, `not json`, "", `{"a":1}`, "not json"},
		{`{"a":1}`, `{ "a" : 1 }`, "", `{"a":1}`, `{ "a" : 1 }`},
	} {
		p, a, b := jsonDiff([]byte(tc.a), []byte(tc.b))
		if p != tc.path || a != tc.va || b != tc.vb {
			t.Errorf("diff(%s, %s) = %q %q %q, want %q %q %q", tc.a, tc.b, p, a, b, tc.path, tc.va, tc.vb)
		}
	}
}

func FuzzParseAnnounce(f *testing.F) {
	f.Add([]byte(`{"devices":2,"host":"h","host_id":"id","real_id":"r","addr":"127.0.0.1","pid":7}`))
	f.Add([]byte(`{"devices":0,"host_id":"x"}`))
	f.Add([]byte(`{"devices":99999999999,"host_id":"x"}`))
	f.Add([]byte(`{"devices":1,"host_id":"x","extra":1}`))
	f.Add([]byte(`{"devices":1,"host_id":"x"} {}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := parseAnnounce(3, b)
		if err != nil {
			if !strings.Contains(err.Error(), "process 3") {
				t.Fatalf("error %q does not name the process", err)
			}
			return
		}
		if a.Devices < 1 || a.Devices > MaxRanks || a.PID < 0 || a.HostID == "" || len(a.Host) > maxField || len(a.Addr) > maxField {
			t.Fatalf("accepted %+v", a)
		}
	})
}

func TestRankState(t *testing.T) {
	ws, errs := joinAll(t, []proc{{devices: 2, host: "m1"}, {devices: 1, host: "m2"}}, 20*time.Second)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	w := ws[1]
	if st, err := w.ReadState(dir); st != nil || err != nil {
		t.Fatalf("no file: %v %v", st, err)
	}
	if err := w.CheckState(dir, 3, 42); err != nil {
		t.Fatalf("no file must pass: %v", err)
	}
	if err := w.WriteState(dir, 3, 0xabc); err != nil {
		t.Fatal(err)
	}
	st, err := w.ReadState(dir)
	if err != nil || st.Process != 1 || st.Processes != 2 || len(st.Ranks) != 1 || st.Ranks[0] != 2 || st.EpochsDone != 3 || st.ParamsFNV != "abc" {
		t.Fatalf("read back %+v %v", st, err)
	}
	for _, tc := range []struct {
		epochs int
		hash   uint64
		want   string
	}{{3, 0xabc, ""}, {4, 1, ""}, {3, 0xabd, "other parameters"}} {
		err := w.CheckState(dir, tc.epochs, tc.hash)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("epoch %d hash %x: %v, want %q", tc.epochs, tc.hash, err, tc.want)
		}
	}
	// Process 0 reading process 1's file (a renamed copy) is refused.
	b, _ := os.ReadFile(w.StatePath(dir))
	if err := os.WriteFile(ws[0].StatePath(dir), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ws[0].CheckState(dir, 3, 0xabc); err == nil || !strings.Contains(err.Error(), "written by process 1 of 2") {
		t.Fatalf("foreign state: %v", err)
	}
	if d := ws[0].LayoutDiff([]int{2, 1}); d != "" {
		t.Fatalf("same layout: %q", d)
	}
	if d := ws[0].LayoutDiff([]int{3}); !strings.Contains(d, "written by 1 process with 3 devices, this run is 2 processes with [2 1] devices") {
		t.Fatalf("layout diff %q", d)
	}
}

func TestParseStateRefuses(t *testing.T) {
	ok := `{"format":"strata-rank-state/1","process":1,"processes":2,"host":"h","ranks":[2,3],"epochs_done":1,"params_fnv":"ff"}`
	if _, err := ParseState("p.json", []byte(ok)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{`strata-rank-state/1`, `strata-rank-state/9`, "format"},
		{`"process":1`, `"process":2`, "process 2 of 2"},
		{`[2,3]`, `[2,4]`, "not consecutive"},
		{`[2,3]`, `[]`, "0 ranks"},
		{`"epochs_done":1`, `"epochs_done":-1`, "-1 epochs"},
		{`"ff"`, `"xyz"`, "hex"},
		{`"host":"h"`, `"host":"h","x":1`, "malformed"},
	} {
		_, err := ParseState("p.json", []byte(strings.Replace(ok, tc.from, tc.to, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "p.json") {
			t.Errorf("%s -> %s: %v, want %q and the path", tc.from, tc.to, err, tc.want)
		}
	}
	if _, err := ParseState("p.json", make([]byte, maxStateBytes+1)); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("oversize: %v", err)
	}
}

func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"format":"strata-rank-state/1","process":1,"processes":2,"host":"h","ranks":[2,3],"epochs_done":1,"params_fnv":"ff"}`))
	f.Add([]byte(`{"format":"strata-rank-state/1","process":0,"processes":1,"ranks":[65535],"params_fnv":"0"}`))
	f.Add([]byte(`{"ranks":[1,2,3,`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseState("f", b)
		if err != nil {
			return
		}
		if st.Process < 0 || st.Process >= st.Processes || len(st.Ranks) == 0 || st.EpochsDone < 0 {
			t.Fatalf("accepted %+v", st)
		}
	})
}

// TestSilentProcessNamed: a process that stops beating (dead, stopped,
// or gone from the store) fails the others' setup waits, named.
func TestSilentProcessNamed(t *testing.T) {
	ws, errs := joinAll(t, []proc{{devices: 1, host: "m1", peer: time.Second}, {devices: 2, host: "m2", peer: time.Second}}, time.Minute)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ws[1].Leave(nil) // stops beating, says nothing
	done := make(chan error, 1)
	go func() {
		_, err := ws[0].HostGroup(context.Background(), "g", comm.Options{})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("process 0 still waits a minute after process 1 went silent")
	}
	var pe *PeerError
	if !errors.As(err, &pe) || len(pe.Processes) != 1 || pe.Processes[0].Index != 1 || !strings.Contains(err.Error(), "no heartbeat") {
		t.Fatalf("got %v, want process 1 named", err)
	}
}
