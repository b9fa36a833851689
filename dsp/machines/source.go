package machines

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/world"
	"github.com/strata-gnn/strata/dsp/metrics"
	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/serve"
)

// ServiceOptions configure Start.
type ServiceOptions struct {
	World *world.World
	Dir   *Dir
	// X is the rows this machine serves, as training reads them
	// (normalized and rounded like the whole table would be), Dir's
	// (Hi-Lo) x Cols.
	X  []float32
	In *graph.CSR // the in-adjacency of Dir's dataset
	// MaxRows bounds the rows of one request (larger asks are split;
	// default: what fits serve's default reply limit).
	MaxRows int
	// Timeout is each request's deadline (default 30 s).
	Timeout time.Duration
	// CacheBytes is the budget of the cache of remote rows (0: none).
	CacheBytes int64
	// Listen is the address to serve on (default: this process's
	// advertised host, an ephemeral port).
	Listen string
}

// Service is this process's feature service: it serves the machine's
// shard and asks the other machines for theirs. Safe for concurrent use.
type Service struct {
	srv     *serve.Server
	ln      net.Listener
	served  chan error
	lo, hi  int64
	cols    int
	x       []float32
	owner   []int64 // machine m owns [owner[m], owner[m+1])
	me      int     // this machine
	clients []*serve.Client
	names   []string
	maxRows int
	timeout time.Duration
	cache   *rowCache
	stats   []*fetchStats // per machine (nil for this one)
}

// DefaultTimeout is ServiceOptions.Timeout's default.
const DefaultTimeout = 30 * time.Second

// Start serves this process's machine shard and connects to the other
// machines' services (their addresses through the job's store). Off
// loopback it needs the job's mutual TLS; on loopback every request
// carries a shared secret (the job's, else one process 0 makes).
func Start(ctx context.Context, o ServiceOptions) (*Service, error) {
	w, d := o.World, o.Dir
	m := d.Manifest
	if int64(len(o.X)) != (m.Hi-m.Lo)*int64(m.Cols) {
		return nil, fmt.Errorf("machines: %d values for a shard of %d rows x %d", len(o.X), m.Hi-m.Lo, m.Cols)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	row := 4*m.Cols + 4
	if o.MaxRows <= 0 {
		o.MaxRows = (serve.DefaultMaxSendBytes - 256) / row
	}
	o.MaxRows = max(1, min(o.MaxRows, (serve.DefaultMaxSendBytes-256)/row))
	sec := w.Security()
	addr := o.Listen
	if addr == "" {
		host := w.Self().Addr
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, "0")
	}
	if err := sec.Require("feature service", addr); err != nil {
		return nil, err
	}
	if err := serve.CheckListen(addr, sec.TLS != nil); err != nil {
		return nil, err
	}
	secret, err := jobSecret(ctx, w, sec)
	if err != nil {
		return nil, err
	}
	srv, err := serve.New(serve.Options{Dataset: d.Dataset, In: o.In, Shard: &serve.Shard{Lo: m.Lo, X: o.X, Dim: m.Cols}, TLS: sec.TLS, Secret: secret})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("machines: feature service: %w", err)
	}
	s := &Service{srv: srv, ln: ln, served: make(chan error, 1), lo: m.Lo, hi: m.Hi, cols: m.Cols, x: o.X, me: m.Machine,
		maxRows: o.MaxRows, timeout: o.Timeout, cache: newRowCache(o.CacheBytes, m.Cols)}
	go func() { s.served <- srv.Serve(ln) }()
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	addrs, err := w.Exchange(ctx, "dsp-feature-service", []byte(ln.Addr().String()))
	if err != nil {
		return nil, err
	}
	for q := range m.Machines {
		lo, _ := MachineRange(m.Book, m.DevicesPerMachine, q)
		s.owner = append(s.owner, lo)
	}
	s.owner = append(s.owner, m.Nodes)
	machines := w.Machines()
	if len(machines) != m.Machines {
		return nil, fmt.Errorf("machines: %s: written for %d machines, the job runs on %d", d.Path, m.Machines, len(machines))
	}
	mine := 0 // this process's place on its machine: spreads the askers over the servers
	for i, p := range machines[m.Machine] {
		if p.Index == w.Process() {
			mine = i
		}
	}
	s.clients, s.names, s.stats = make([]*serve.Client, m.Machines), make([]string, m.Machines), make([]*fetchStats, m.Machines)
	for q, ps := range machines {
		if q == m.Machine {
			continue
		}
		p := ps[mine%len(ps)]
		a := string(addrs[p.Index])
		if len(a) > 256 {
			return nil, fmt.Errorf("machines: %s published a feature service address of %d bytes", p, len(a))
		}
		if err := sec.Require("feature service", a); err != nil {
			return nil, fmt.Errorf("machines: machine %d's %s: %w", q, p, err)
		}
		var tc *tls.Config
		if sec.TLS != nil {
			tc = sec.TLS.Clone()
		}
		c, err := serve.Dial(a, serve.ClientOptions{TLS: tc, Secret: secret, Timeout: o.Timeout})
		if err != nil {
			return nil, err
		}
		s.clients[q] = c
		s.names[q] = fmt.Sprintf("machine %d's feature service (%s, %s)", q, p, a)
		s.stats[q] = &fetchStats{}
	}
	ok = true
	return s, nil
}

// jobSecret is the secret loopback requests carry: the job's
// (STRATA_COMM_SECRET), else random bytes made by process 0 and passed
// through the store.
func jobSecret(ctx context.Context, w *world.World, sec auth.Security) ([]byte, error) {
	if len(sec.Secret) > 0 {
		return sec.Secret, nil
	}
	var mine []byte
	if w.Process() == 0 {
		raw := make([]byte, 16)
		if _, err := rand.Read(raw); err != nil {
			return nil, err
		}
		mine = []byte(hex.EncodeToString(raw)) // gRPC metadata: printable

	}
	all, err := w.Exchange(ctx, "dsp-feature-secret", mine)
	if err != nil {
		return nil, err
	}
	if len(all[0]) != 32 {
		return nil, fmt.Errorf("machines: process 0 published a secret of %d bytes", len(all[0]))
	}
	return all[0], nil
}

// Addr is where this process serves its machine's rows.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Shard is this machine's rows [lo, hi) of the table as served (x: hi-lo
// rows, prepared as ServiceOptions.X; shared, not copied).
func (s *Service) Shard() (lo, hi int64, x []float32) { return s.lo, s.hi, s.x }

// Close stops serving and closes the connections.
func (s *Service) Close() error {
	s.srv.Stop()
	var errs []error
	for _, c := range s.clients {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// machineOf is the machine owning node v.
func (s *Service) machineOf(v int64) int {
	lo, hi := 0, len(s.owner)-2
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if s.owner[mid] <= v {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// Gather writes the rows of ids (global node IDs) into out (len(ids) x
// Cols): this machine's from its shard, the cached ones from the cache,
// the others asked of their machines, each distinct row once, in
// requests of at most MaxRows rows, every machine at once. Bytes on the
// network go to ctr (when not nil) as feature bytes.
func (s *Service) Gather(ids []int32, out []float32, ctr *metrics.Counters) error {
	c := s.cols
	if len(out) != len(ids)*c {
		return fmt.Errorf("machines: %d values for %d rows x %d", len(out), len(ids), c)
	}
	type want struct {
		ids []int32
		at  map[int32][]int
	}
	wants := make([]*want, len(s.clients))
	for i, v := range ids {
		if v < 0 || int64(v) >= s.owner[len(s.owner)-1] {
			return fmt.Errorf("machines: node %d (position %d) not in [0, %d)", v, i, s.owner[len(s.owner)-1])
		}
		if int64(v) >= s.lo && int64(v) < s.hi {
			copy(out[i*c:(i+1)*c], s.x[(int64(v)-s.lo)*int64(c):(int64(v)-s.lo+1)*int64(c)])
			continue
		}
		if s.cache.get(v, out[i*c:(i+1)*c]) {
			continue
		}
		m := s.machineOf(int64(v))
		if wants[m] == nil {
			wants[m] = &want{at: map[int32][]int{}}
		}
		wm := wants[m]
		if _, ok := wm.at[v]; !ok {
			wm.ids = append(wm.ids, v)
		}
		wm.at[v] = append(wm.at[v], i)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(wants))
	for m, wm := range wants {
		if wm == nil {
			continue
		}
		wg.Go(func() {
			rows, err := s.fetch(m, wm.ids)
			if err != nil {
				errs[m] = err
				return
			}
			for j, v := range wm.ids {
				r := rows[j*c : (j+1)*c]
				for _, i := range wm.at[v] {
					copy(out[i*c:(i+1)*c], r)
				}
				s.cache.put(v, r)
			}
			if ctr != nil {
				ctr.AddBytes(metrics.Feature, metrics.Network, int64(len(wm.ids))*int64(4+4*c))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fetch asks machine m for the rows of ids (distinct), in requests of at
// most maxRows rows.
func (s *Service) fetch(m int, ids []int32) ([]float32, error) {
	c := s.cols
	out := make([]float32, len(ids)*c)
	for at := 0; at < len(ids); at += s.maxRows {
		chunk := ids[at:min(at+s.maxRows, len(ids))]
		nodes := make([]graph.NodeID, len(chunk))
		for i, v := range chunk {
			nodes[i] = graph.NodeID(v)
		}
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		rep, err := s.clients[m].Features(ctx, nodes, true, false)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("machines: asking %s for %d rows (deadline %v): %w", s.names[m], len(chunk), s.timeout, err)
		}
		x := rep.GetX()
		if x == nil || len(x.Data) != 4*len(chunk)*c {
			return nil, fmt.Errorf("machines: %s answered %d bytes for %d rows x %d", s.names[m], len(x.GetData()), len(chunk), c)
		}
		dst := out[at*c:]
		for i := range len(chunk) * c {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*i:]))
		}
		s.stats[m].add(time.Since(t0), int64(len(chunk)), int64(len(chunk))*int64(4+4*c))
	}
	return out, nil
}

// All returns the whole feature table (every node's row, Nodes x Cols):
// this machine's rows and every other machine's, asked in requests of at
// most MaxRows rows (a whole-graph evaluation needs them all).
func (s *Service) All() ([]float32, error) {
	n := s.owner[len(s.owner)-1]
	c := int64(s.cols)
	out := make([]float32, n*c)
	copy(out[s.lo*c:s.hi*c], s.x)
	for m := range s.clients {
		if m == s.me {
			continue
		}
		lo, hi := s.owner[m], s.owner[m+1]
		ids := make([]int32, hi-lo)
		for i := range ids {
			ids[i] = int32(lo + int64(i))
		}
		rows, err := s.fetch(m, ids)
		if err != nil {
			return nil, err
		}
		copy(out[lo*c:hi*c], rows)
	}
	return out, nil
}
