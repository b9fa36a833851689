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
	"sync/atomic"
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
	// Hot is the machine's hot rows of other machines (Dir.Hot's IDs),
	// prepared as X: read locally, never asked for. Nil: none.
	Hot *Hot
	// MaxRows bounds the rows of one request (larger asks are split;
	// default: what fits serve's default reply limit).
	MaxRows int
	// InFlight bounds the requests in flight to one machine, over every
	// Gather of the process (default DefaultInFlight): a batch's ask of
	// a machine is split into up to InFlight requests of at least
	// MinRequestBytes each (and at most MaxRows rows) sent at once.
	InFlight int
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
	stats   []*fetchStats   // per machine (nil for this one)
	hot     map[int32]int32 // hot row of another machine -> its row of hotX
	hotIDs  []int32         // the rows of hotX, hottest first
	hotX    []float32
	slots   []chan struct{} // per machine: a token per request in flight
	hotHits atomic.Int64
}

// DefaultTimeout is ServiceOptions.Timeout's default.
const DefaultTimeout = 30 * time.Second

// DefaultInFlight is ServiceOptions.InFlight's default, and
// MinRequestBytes the smallest request a split makes (smaller asks go
// in one request: a request costs a round trip however small).
const (
	DefaultInFlight = 4
	MinRequestBytes = 256 << 10
)

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
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	var hot map[int32]int32
	var hotX []float32
	if h := o.Hot; h != nil && len(h.IDs) > 0 {
		if len(h.X) != len(h.IDs)*m.Cols {
			return nil, fmt.Errorf("machines: %d hot values for %d rows x %d", len(h.X), len(h.IDs), m.Cols)
		}
		hot, hotX = make(map[int32]int32, len(h.IDs)), h.X
		for i, v := range h.IDs {
			if v < 0 || int64(v) >= m.Nodes || (int64(v) >= m.Lo && int64(v) < m.Hi) {
				return nil, fmt.Errorf("machines: hot row %d (entry %d) is not another machine's row of [0, %d)", v, i, m.Nodes)
			}
			hot[v] = int32(i)
		}
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
		maxRows: o.MaxRows, timeout: o.Timeout, cache: newRowCache(o.CacheBytes, m.Cols), hot: hot, hotX: hotX}
	if hot != nil {
		s.hotIDs = o.Hot.IDs
	}
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
	s.slots = make([]chan struct{}, m.Machines)
	for q := range s.slots {
		s.slots[q] = make(chan struct{}, o.InFlight)
	}
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

// Hot is the machine's hot rows of other machines as served (IDs,
// hottest first, and their rows, prepared as ServiceOptions.Hot's;
// shared, not copied): a device keeps them in its memory as far as its
// cache budget goes (cache.NewShardCache), and Gather then never sees
// them.
func (s *Service) Hot() (ids []int32, x []float32) { return s.hotIDs, s.hotX }

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
// Cols): this machine's from its shard, hot rows from the machine's hot
// rows, the cached ones from the cache, the others asked of their
// machines, each distinct row once, every machine at once (fetch: in
// concurrent requests). Bytes on the network go to ctr (when not nil)
// as feature bytes.
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
	hot := int64(0)
	defer func() { s.hotHits.Add(hot) }()
	for i, v := range ids {
		if v < 0 || int64(v) >= s.owner[len(s.owner)-1] {
			return fmt.Errorf("machines: node %d (position %d) not in [0, %d)", v, i, s.owner[len(s.owner)-1])
		}
		if int64(v) >= s.lo && int64(v) < s.hi {
			copy(out[i*c:(i+1)*c], s.x[(int64(v)-s.lo)*int64(c):(int64(v)-s.lo+1)*int64(c)])
			continue
		}
		if j, ok := s.hot[v]; ok {
			copy(out[i*c:(i+1)*c], s.hotX[int(j)*c:(int(j)+1)*c])
			hot++
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

// fetch asks machine m for the rows of ids (distinct): in requests of
// at most maxRows rows, split further so that up to InFlight requests of
// at least MinRequestBytes go at once, at most InFlight in flight to m
// over the whole process.
func (s *Service) fetch(m int, ids []int32) ([]float32, error) {
	c := s.cols
	out := make([]float32, len(ids)*c)
	chunk := s.chunkRows(len(ids))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for at := 0; at < len(ids); at += chunk {
		s.slots[m] <- struct{}{} // a deadline bounds every request holding a slot
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			<-s.slots[m]
			break
		}
		wg.Go(func() {
			defer func() { <-s.slots[m] }()
			n := min(chunk, len(ids)-at)
			if err := s.fetchOne(m, ids[at:at+n], out[at*c:(at+n)*c]); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

// chunkRows is the rows of one request of an ask of n rows: n split into
// one request per slot, each at least MinRequestBytes and at most
// maxRows rows.
func (s *Service) chunkRows(n int) int {
	row := 4*s.cols + 4
	k := cap(s.slots[0])
	chunk := max((n+k-1)/k, (MinRequestBytes+row-1)/row)
	return max(1, min(chunk, s.maxRows))
}

// fetchOne asks machine m for the rows of chunk (at most maxRows) into
// dst.
func (s *Service) fetchOne(m int, chunk []int32, dst []float32) error {
	c := s.cols
	nodes := make([]graph.NodeID, len(chunk))
	for i, v := range chunk {
		nodes[i] = graph.NodeID(v)
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	rep, err := s.clients[m].Features(ctx, nodes, true, false)
	cancel()
	if err != nil {
		return fmt.Errorf("machines: asking %s for %d rows (deadline %v): %w", s.names[m], len(chunk), s.timeout, err)
	}
	x := rep.GetX()
	if x == nil || len(x.Data) != 4*len(chunk)*c {
		return fmt.Errorf("machines: %s answered %d bytes for %d rows x %d", s.names[m], len(x.GetData()), len(chunk), c)
	}
	for i := range len(chunk) * c {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*i:]))
	}
	s.stats[m].add(time.Since(t0), int64(len(chunk)), int64(len(chunk))*int64(4+4*c))
	return nil
}

// All returns the whole feature table (every node's row, Nodes x Cols):
// this machine's rows and hot rows, and every other row asked of its
// machine (a whole-graph evaluation needs them all), kept in the cache
// of remote rows as far as its budget goes.
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
		ids := make([]int32, 0, hi-lo)
		for v := lo; v < hi; v++ {
			if j, ok := s.hot[int32(v)]; ok {
				copy(out[v*c:(v+1)*c], s.hotX[int64(j)*c:(int64(j)+1)*c])
				continue
			}
			ids = append(ids, int32(v))
		}
		rows, err := s.fetch(m, ids)
		if err != nil {
			return nil, err
		}
		for i, v := range ids {
			r := rows[int64(i)*c : (int64(i)+1)*c]
			copy(out[int64(v)*c:(int64(v)+1)*c], r)
			s.cache.put(v, r) // the process's batches read these rows too
		}
	}
	return out, nil
}

// HotHits is the number of rows Gather read from the machine's hot rows
// of other machines (rows that were not asked of anyone): on the host,
// for the devices whose cache budget does not hold them (the rows a
// device holds never reach Gather: cache.ShardStore.Served counts them).
func (s *Service) HotHits() int64 { return s.hotHits.Load() }
