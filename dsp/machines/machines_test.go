package machines_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dataset/builtin"
	"github.com/strata-gnn/strata/dsp/engine"
	"github.com/strata-gnn/strata/dsp/machines"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/serve"
)

// writeCora writes Cora's directories for 2 machines x 1 device.
func writeCora(t *testing.T) (string, *machines.Partitioned) {
	t.Helper()
	ds, err := builtin.Load("cora")
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.Partition(context.Background(), ds, 2, engine.Multilevel, 3)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "parts")
	if _, err := machines.Write(out, p, machines.WriteOptions{Machines: 2, DevicesPerMachine: 1, NoSync: true}); err != nil { // no hot rows
		t.Fatal(err)
	}
	return out, p
}

// TestDirectoriesHoldTheirRows: each machine's directory holds exactly
// its rows of the renumbered table, and both name one partition.
func TestDirectoriesHoldTheirRows(t *testing.T) {
	out, p := writeCora(t)
	var fp string
	for m := range 2 {
		d, err := machines.Open(machines.MachineDir(out, m))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		mf := d.Manifest
		c := int64(mf.Cols)
		want := p.Dataset.Features[mf.Lo*c : mf.Hi*c]
		if len(d.X) != len(want) || mf.Hi-mf.Lo >= mf.Nodes {
			t.Fatalf("machine %d: %d values, want %d (rows [%d, %d) of %d)", m, len(d.X), len(want), mf.Lo, mf.Hi, mf.Nodes)
		}
		for i := range want {
			if d.X[i] != want[i] {
				t.Fatalf("machine %d value %d: %v, want %v", m, i, d.X[i], want[i])
			}
		}
		if fp == "" {
			fp = mf.Fingerprint
		} else if fp != mf.Fingerprint {
			t.Fatalf("fingerprints %s and %s", fp, mf.Fingerprint)
		}
	}
	// An edited manifest is refused.
	mp := filepath.Join(machines.MachineDir(out, 1), machines.ManifestFile)
	b, _ := os.ReadFile(mp)
	os.WriteFile(mp, []byte(strings.Replace(string(b), `"seed": 3`, `"seed": 4`, 1)), 0o644)
	if _, err := machines.Open(machines.MachineDir(out, 1)); err == nil || !strings.Contains(err.Error(), "does not match its content") {
		t.Fatalf("edited manifest: %v", err)
	}
}

// startServices starts the feature services of two simulated machines.
func startServices(t *testing.T, out string, o machines.ServiceOptions) []*machines.Service {
	t.Helper()
	ctx := context.Background()
	ws, err := world.JoinLocal(ctx, []int{1, 1}, world.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	svcs := make([]*machines.Service, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for m := range 2 {
		d, err := machines.Open(machines.MachineDir(out, m))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		oo := o
		oo.World, oo.Dir, oo.X, oo.In, oo.Hot = ws[m], d, d.X, d.Dataset.InGraph(), d.Hot
		wg.Go(func() { svcs[m], errs[m] = machines.Start(ctx, oo) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for m, s := range svcs {
			if s != nil {
				s.Close()
			}
			ws[m].Leave(nil)
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return svcs
}

// TestGatherAsksOwners: a batch with repeats and rows of both machines
// comes back equal to the table; the missing rows are asked once each,
// in requests of at most MaxRows rows; the cache answers repeats.
func TestGatherAsksOwners(t *testing.T) {
	out, p := writeCora(t)
	svcs := startServices(t, out, machines.ServiceOptions{MaxRows: 7, CacheBytes: 1 << 20})
	x, c := p.Dataset.Features, p.Dataset.FeatDim
	n := int32(p.Dataset.NumNodes())
	var ids []int32
	for i := range int32(60) {
		ids = append(ids, (i*97)%n, (i*97)%n) // every row twice
	}
	got := make([]float32, len(ids)*c)
	if err := svcs[0].Gather(ids, got, nil); err != nil {
		t.Fatal(err)
	}
	for i, v := range ids {
		for j := range c {
			if got[i*c+j] != x[int(v)*c+j] {
				t.Fatalf("row %d (node %d) col %d: %v, want %v", i, v, j, got[i*c+j], x[int(v)*c+j])
			}
		}
	}
	lo := p.Book.Offsets()[1]
	remote := 0
	for i := 0; i < len(ids); i += 2 {
		if int64(ids[i]) >= lo {
			remote++
		}
	}
	f := svcs[0].Fetches()
	if f.Rows != int64(remote) || f.Requests != int64((remote+6)/7) || remote == 0 {
		t.Fatalf("%d rows in %d requests, want %d distinct remote rows in %d", f.Rows, f.Requests, remote, (remote+6)/7)
	}
	if err := svcs[0].Gather(ids, got, nil); err != nil {
		t.Fatal(err)
	}
	if f2 := svcs[0].Fetches(); f2.Requests != f.Requests || svcs[0].CacheHits() != int64(2*remote) {
		t.Fatalf("second gather: %d requests (was %d), %d cache hits, want %d", f2.Requests, f.Requests, svcs[0].CacheHits(), 2*remote)
	}
	if q := f.Quantile(0.99); !(q > 0) || math.IsInf(q, 0) {
		t.Fatalf("p99 %v", q)
	}
}

// TestServiceBadInputs: off loopback without certificates, a peer with
// another CA, an oversize request: one clear error each, within a
// deadline.
func TestServiceBadInputs(t *testing.T) {
	out, _ := writeCora(t)
	// Off loopback with no certificate: refused naming what to set.
	ws, err := world.JoinLocal(context.Background(), []int{1}, world.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ws[0].Leave(nil)
	d, err := machines.Open(machines.MachineDir(out, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, err = machines.Start(context.Background(), machines.ServiceOptions{World: ws[0], Dir: d, X: d.X, In: d.Dataset.InGraph(), Listen: "192.0.2.1:0"})
	if err == nil || !strings.Contains(err.Error(), "mutual TLS is required") || !strings.Contains(err.Error(), auth.EnvTLSCert) {
		t.Fatalf("no certificate off loopback: %v", err)
	}

	// A server of one CA, a client of another: refused at the handshake.
	ca1, cert1, key1, err := auth.NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	ca2, cert2, key2, err := auth.NewTestPKI("strata")
	if err != nil {
		t.Fatal(err)
	}
	tls1, err := auth.MutualTLS(cert1, key1, ca1, "")
	if err != nil {
		t.Fatal(err)
	}
	tls2, err := auth.MutualTLS(cert2, key2, ca2, "")
	if err != nil {
		t.Fatal(err)
	}
	m := d.Manifest
	srv, err := serve.New(serve.Options{Dataset: d.Dataset, In: d.Dataset.InGraph(), Shard: &serve.Shard{Lo: m.Lo, X: d.X, Dim: m.Cols}, TLS: tls1, MaxSendBytes: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := serve.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	foreign, err := serve.Dial(ln.Addr().String(), serve.ClientOptions{TLS: tls2, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	t0 := time.Now()
	_, err = foreign.Features(context.Background(), []graph.NodeID{0}, true, false)
	if err == nil || !strings.Contains(err.Error(), "certificate") || time.Since(t0) > 9*time.Second {
		t.Fatalf("a peer of another CA: %v after %v", err, time.Since(t0))
	}
	// The right CA, but a request over the reply limit (64 KiB: 11
	// rows of 1433 floats) and a row of another machine.
	ok, err := serve.Dial(ln.Addr().String(), serve.ClientOptions{TLS: tls1, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	ids := make([]graph.NodeID, 20)
	if _, err = ok.Features(context.Background(), ids, true, false); err == nil || !strings.Contains(err.Error(), "20 IDs, at most 11") {
		t.Fatalf("oversize request: %v", err)
	}
	if _, err = ok.Features(context.Background(), []graph.NodeID{graph.NodeID(m.Hi)}, true, false); err == nil || !strings.Contains(err.Error(), "not in this server's shard") {
		t.Fatalf("another machine's row: %v", err)
	}
	rep, err := ok.Features(context.Background(), []graph.NodeID{graph.NodeID(m.Lo)}, true, false)
	if err != nil || len(rep.X.Data) != 4*m.Cols {
		t.Fatalf("own row: %v", err)
	}
}

// FuzzParseManifest: any bytes give a manifest or an error, never a
// panic.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"format":"strata-machine/1","machine":0,"machines":1,"devices_per_machine":1,"fingerprint":"00000000000000000000000000000000","nodes":3,"cols":2,"book":[0,3],"lo":0,"hi":3}`))
	f.Add([]byte(`{"format":"strata-machine/1","machines":1000000,"devices_per_machine":1000000,"book":[]}`))
	f.Add([]byte(`{"book":[0,-1,5]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := machines.ParseManifest("machine.json", b)
		if err == nil && (m.Lo < 0 || m.Hi > m.Nodes || m.Lo > m.Hi) {
			t.Fatalf("accepted rows [%d, %d) of %d", m.Lo, m.Hi, m.Nodes)
		}
	})
}
