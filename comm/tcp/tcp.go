package tcp

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/rendezvous"
)

// DefaultSegmentBytes is the pipelining unit.
const DefaultSegmentBytes = 1 << 20

// Options configure a TCP communicator.
type Options struct {
	comm.Options
	// Security authenticates connections; required unless every rank's
	// address is on loopback.
	Security auth.Security
	// Host is the address to listen on and advertise to peers
	// ("127.0.0.1" if empty; comm/dist picks the interface that reaches
	// MASTER_ADDR).
	Host string
	// SegmentBytes is the pipelining unit (DefaultSegmentBytes if zero;
	// rounded down to a multiple of 8, at least 64).
	SegmentBytes int
	// Prefix namespaces the store keys, so several communicators can be
	// opened through one store ("tcp" if empty).
	Prefix string
}

const (
	kindData = 0
	kindCtrl = 1

	helloLen   = 32
	dataHdrLen = 32
	ctrlHdrLen = 32
	maxCtrl    = 64 << 10
)

var (
	helloMagic = [4]byte{'S', 'T', 'R', 'H'}
	dataMagic  = [4]byte{'S', 'T', 'R', 'D'}
	ctrlMagic  = [4]byte{'S', 'T', 'R', 'C'}
)

// Control frame types.
const (
	ctStatusReq = 1
	ctStatusRep = 2
	ctAbort     = 3
	ctClose     = 4
)

type peer struct {
	rank int
	data net.Conn
	br   *bufio.Reader
	ctrl net.Conn
	cmu  sync.Mutex // ctrl writes

	mu   sync.Mutex
	gone string // why the peer is gone ("" while connected)

	// seen is the highest sequence number this peer is known to have
	// entered (from its data frames and aborts): it took part in those,
	// even if it has left since.
	seen atomic.Uint64
}

func (p *peer) saw(seq uint64) {
	for {
		v := p.seen.Load()
		if seq <= v || p.seen.CompareAndSwap(v, seq) {
			return
		}
	}
}

func (p *peer) goneReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone
}

func (p *peer) setGone(why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone == "" {
		p.gone = why
	}
}

type transport struct {
	rank, n int
	seg     int
	peers   []*peer // nil at index rank

	entered atomic.Uint64

	amu     sync.Mutex
	abort   error // first abort (remote *comm.AbortError or local)
	aborted chan struct{}
	closed  atomic.Bool
	readers sync.WaitGroup

	smu      sync.Mutex
	statusID uint64
	status   map[uint64]chan statusRep

	scratch []uint64 // one segment, for reductions
	tmp     []uint64 // reduce-scatter partial blocks
}

type statusRep struct {
	rank    int
	entered uint64
}

// New opens this rank's TCP communicator through the store: it listens,
// publishes its address, connects to every peer and authenticates. The
// context bounds the whole setup (o.Timeout if it has no deadline).
func New(ctx context.Context, store rendezvous.Store, o Options) (comm.Comm, error) {
	t, err := open(ctx, store, o)
	if err != nil {
		return nil, err
	}
	return comm.New(t, o.Options), nil
}

// NewLocal opens a group of n communicators in this process over loopback
// (goroutine ranks; for tests and benchmarks).
func NewLocal(n int, o Options) ([]comm.Comm, error) {
	stores := rendezvous.NewLocal(n)
	cs := make([]comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for r := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[r], errs[r] = New(ctx, stores[r], o)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return cs, nil
}

func open(ctx context.Context, store rendezvous.Store, o Options) (*transport, error) {
	rank, n := store.Rank(), store.Size()
	if _, ok := ctx.Deadline(); !ok {
		to := o.Timeout
		if to <= 0 {
			to = comm.DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, to)
		defer cancel()
	}
	seg := o.SegmentBytes
	if seg <= 0 {
		seg = DefaultSegmentBytes
	}
	seg = max(64, seg&^7)
	prefix := o.Prefix
	if prefix == "" {
		prefix = "tcp"
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	t := &transport{rank: rank, n: n, seg: seg, peers: make([]*peer, n), aborted: make(chan struct{}),
		status: map[uint64]chan statusRep{}, scratch: make([]uint64, seg/8)}
	if n == 1 {
		return t, nil
	}

	ln, err := listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp rank %d: listen on %s: %w", rank, host, err)
	}
	defer ln.Close()

	// A job id (from rank 0) keeps connections of different jobs apart.
	var job []byte
	if rank == 0 {
		job = make([]byte, 16)
		rand.Read(job)
		if err := store.Set(ctx, prefix+"/job", []byte(hex.EncodeToString(job))); err != nil {
			return nil, fmt.Errorf("tcp rank 0: publishing the job id: %w", err)
		}
	} else {
		v, err := store.Get(ctx, prefix+"/job")
		if err != nil {
			return nil, fmt.Errorf("tcp rank %d: waiting for rank 0's job id: %w", rank, err)
		}
		if job, err = hex.DecodeString(string(v)); err != nil || len(job) != 16 {
			return nil, fmt.Errorf("tcp rank %d: malformed job id %q", rank, v)
		}
	}
	if err := store.Set(ctx, prefix+"/addr/"+strconv.Itoa(rank), []byte(ln.Addr().String())); err != nil {
		return nil, fmt.Errorf("tcp rank %d: publishing address: %w", rank, err)
	}
	addrs := make([]string, n)
	for p := 0; p < n; p++ {
		v, err := store.Get(ctx, prefix+"/addr/"+strconv.Itoa(p))
		if err != nil {
			return nil, fmt.Errorf("tcp rank %d: rank %d never published its address: %w", rank, p, err)
		}
		if _, _, err := net.SplitHostPort(string(v)); err != nil {
			return nil, fmt.Errorf("tcp rank %d: rank %d published a malformed address %q", rank, p, v)
		}
		addrs[p] = string(v)
	}
	if err := o.Security.Require("tcp", addrs...); err != nil {
		return nil, err
	}

	for p := range t.peers {
		if p != rank {
			t.peers[p] = &peer{rank: p}
		}
	}
	if err := t.connect(ctx, ln, job, addrs, o.Security); err != nil {
		t.closeConns()
		return nil, err
	}
	for _, p := range t.peers {
		if p != nil {
			t.readers.Add(1)
			go t.readCtrl(p)
		}
	}
	return t, nil
}

// listen opens a rank's listener (tests wrap it).
var listen = net.Listen

func hello(job []byte, from, to, kind int) []byte {
	h := make([]byte, helloLen)
	copy(h, helloMagic[:])
	copy(h[4:20], job)
	binary.BigEndian.PutUint32(h[20:], uint32(from))
	binary.BigEndian.PutUint32(h[24:], uint32(to))
	h[28] = byte(kind)
	return h
}

// parseHello checks a hello received by rank of n (a higher rank's
// connection to it, for this job) and returns the sender and the kind of
// connection.
func parseHello(h, job []byte, rank, n int) (from, kind int, err error) {
	if len(h) != helloLen || [4]byte(h[:4]) != helloMagic || string(h[4:20]) != string(job) {
		return 0, 0, errors.New("connection from another job or program")
	}
	f, to, k := binary.BigEndian.Uint32(h[20:]), binary.BigEndian.Uint32(h[24:]), h[28]
	if int64(to) != int64(rank) || int64(f) <= int64(rank) || int64(f) >= int64(n) || k > kindCtrl {
		return 0, 0, fmt.Errorf("unexpected hello from rank %d to rank %d (kind %d)", f, to, k)
	}
	return int(f), int(k), nil
}

func tune(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
		tc.SetKeepAlivePeriod(15 * time.Second)
	}
}

// connect dials every lower rank (a data and a control connection each)
// and accepts both connections from every higher rank.
func (t *transport) connect(ctx context.Context, ln net.Listener, job []byte, addrs []string, sec auth.Security) error {
	dl, _ := ctx.Deadline()
	type result struct {
		from, kind int
		c          net.Conn
		err        error
	}
	want := 2 * (t.n - 1 - t.rank)
	accepted := make(chan result, want+8)
	stop := make(chan struct{})
	defer close(stop)
	if want > 0 {
		if tl, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
			tl.SetDeadline(dl)
		}
		// As the rendezvous store: temporary accept errors are retried,
		// connections beyond auth.MaxPending still in their handshake
		// are closed at once, and a silent one is dropped after
		// auth.HandshakeTimeout.
		pending := auth.NewLimiter(0)
		go func() {
			for {
				raw, err := auth.Accept(ln, stop)
				if err != nil {
					select {
					case accepted <- result{err: err}:
					case <-stop:
					}
					return
				}
				release, ok := pending.Admit()
				if !ok {
					raw.Close()
					continue
				}
				go func() {
					defer release()
					hd := time.Now().Add(auth.HandshakeTimeout)
					if dl.Before(hd) {
						hd = dl
					}
					raw.SetDeadline(hd)
					tune(raw)
					r := result{from: -1, c: raw}
					r.err = func() error {
						c, err := sec.Wrap(raw, true)
						if err != nil {
							return err
						}
						r.c = c
						h := make([]byte, helloLen)
						if _, err := io.ReadFull(c, h); err != nil {
							return err
						}
						from, kind, err := parseHello(h, job, t.rank, t.n)
						if err != nil {
							return err
						}
						if err := sec.Authenticate(c, true, h); err != nil {
							return err
						}
						raw.SetDeadline(dl) // the handshake's deadline no longer applies
						r.from, r.kind = from, kind
						return nil
					}()
					if r.err != nil {
						raw.Close() // a stray or hostile connection: drop it, keep accepting
						return
					}
					select {
					case accepted <- r:
					case <-stop:
						r.c.Close()
					}
				}()
			}
		}()
	}
	// Dial lower ranks.
	var derr error
	var dmu sync.Mutex
	var wg sync.WaitGroup
	for p := 0; p < t.rank; p++ {
		for kind := kindData; kind <= kindCtrl; kind++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := dialPeer(ctx, addrs[p], hello(job, t.rank, p, kind), sec)
				dmu.Lock()
				defer dmu.Unlock()
				if err != nil {
					derr = errors.Join(derr, fmt.Errorf("connecting to rank %d at %s: %w", p, addrs[p], err))
					return
				}
				t.setConn(p, kind, c)
			}()
		}
	}
	got := map[[2]int]bool{}
	var aerr error
	for len(got) < want {
		r := <-accepted
		if r.err != nil {
			aerr = r.err
			break
		}
		key := [2]int{r.from, r.kind}
		if got[key] {
			r.c.Close()
			continue
		}
		got[key] = true
		t.setConn(r.from, r.kind, r.c)
	}
	wg.Wait()
	if derr != nil {
		return &comm.PeerError{Ranks: t.unconnectedLower(), Err: comm.ErrPeerLost, Msg: fmt.Sprintf("tcp rank %d: %v", t.rank, derr)}
	}
	if aerr != nil {
		var missing []int
		for p := t.rank + 1; p < t.n; p++ {
			if !got[[2]int{p, kindData}] || !got[[2]int{p, kindCtrl}] {
				missing = append(missing, p)
			}
		}
		return &comm.PeerError{Ranks: missing, Err: comm.ErrPeerLost,
			Msg: fmt.Sprintf("tcp rank %d: ranks %v never connected: %v", t.rank, missing, aerr)}
	}
	for _, p := range t.peers {
		if p != nil {
			p.data.SetDeadline(time.Time{})
			p.ctrl.SetDeadline(time.Time{})
			p.br = bufio.NewReaderSize(p.data, 64<<10)
		}
	}
	return nil
}

// unconnectedLower lists the lower ranks this rank could not connect to.
func (t *transport) unconnectedLower() []int {
	var r []int
	for _, p := range t.peers {
		if p != nil && (p.data == nil || p.ctrl == nil) && p.rank < t.rank {
			r = append(r, p.rank)
		}
	}
	return r
}

func (t *transport) setConn(p, kind int, c net.Conn) {
	if kind == kindData {
		t.peers[p].data = c
	} else {
		t.peers[p].ctrl = c
	}
}

// dialPeer connects (retrying while the peer is not listening yet),
// authenticates and sends the hello.
func dialPeer(ctx context.Context, addr string, h []byte, sec auth.Security) (net.Conn, error) {
	dl, _ := ctx.Deadline()
	backoff := 10 * time.Millisecond
	for {
		var d net.Dialer
		raw, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			raw.SetDeadline(dl)
			tune(raw)
			c, err := sec.Wrap(raw, false)
			if err == nil {
				if _, err = c.Write(h); err == nil {
					err = sec.Authenticate(c, false, h)
				}
			}
			if err != nil {
				raw.Close()
				return nil, err
			}
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, err
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

func (t *transport) closeConns() {
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		if p.data != nil {
			p.data.Close()
		}
		if p.ctrl != nil {
			p.ctrl.Close()
		}
	}
}

func (t *transport) Kind() string    { return "tcp" }
func (t *transport) Rank() int       { return t.rank }
func (t *transport) Size() int       { return t.n }
func (t *transport) Caps() comm.Caps { return comm.Caps{Overlap: true} }

// --- control connections ---

func ctrlFrame(typ byte, a, b uint64, payload []byte) []byte {
	f := make([]byte, ctrlHdrLen, ctrlHdrLen+len(payload))
	copy(f, ctrlMagic[:])
	f[4] = typ
	binary.BigEndian.PutUint64(f[8:], a)
	binary.BigEndian.PutUint64(f[16:], b)
	binary.BigEndian.PutUint32(f[24:], uint32(len(payload)))
	return append(f, payload...)
}

func (t *transport) sendCtrl(p *peer, f []byte, timeout time.Duration) error {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	p.ctrl.SetWriteDeadline(time.Now().Add(timeout))
	_, err := p.ctrl.Write(f)
	return err
}

func (t *transport) readCtrl(p *peer) {
	defer t.readers.Done()
	br := bufio.NewReader(p.ctrl)
	h := make([]byte, ctrlHdrLen)
	for {
		if _, err := io.ReadFull(br, h); err != nil {
			p.setGone(fmt.Sprintf("rank %d's connection was lost (exited?)", p.rank))
			return
		}
		if [4]byte(h[:4]) != ctrlMagic {
			p.setGone(fmt.Sprintf("rank %d sent a malformed control frame", p.rank))
			p.ctrl.Close()
			return
		}
		typ := h[4]
		a, b := binary.BigEndian.Uint64(h[8:]), binary.BigEndian.Uint64(h[16:])
		n := binary.BigEndian.Uint32(h[24:])
		if n > maxCtrl {
			p.setGone(fmt.Sprintf("rank %d sent a control frame of %d bytes", p.rank, n))
			p.ctrl.Close()
			return
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			p.setGone(fmt.Sprintf("rank %d's connection was lost (exited?)", p.rank))
			return
		}
		switch typ {
		case ctStatusReq:
			go t.sendCtrl(p, ctrlFrame(ctStatusRep, a, t.entered.Load(), nil), time.Second)
		case ctStatusRep:
			t.smu.Lock()
			ch := t.status[a]
			t.smu.Unlock()
			if ch != nil {
				select {
				case ch <- statusRep{rank: p.rank, entered: b}:
				default:
				}
			}
		case ctAbort:
			p.saw(a)
			t.remoteAbort(p.rank, a, payload)
		case ctClose:
			p.setGone(fmt.Sprintf("rank %d closed its communicator", p.rank))
		}
	}
}

func encodeAbort(missing []int, reason string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(missing)))
	for _, m := range missing {
		b = binary.BigEndian.AppendUint32(b, uint32(m))
	}
	if len(reason) > 4096 {
		reason = reason[:4096]
	}
	return append(b, reason...)
}

func (t *transport) remoteAbort(from int, seq uint64, payload []byte) {
	ae := &comm.AbortError{By: from, Seq: seq}
	ae.Missing, ae.Reason = decodeAbort(payload, t.n)
	t.setAbort(ae)
}

// decodeAbort reads an abort's payload (encodeAbort) from a group of n:
// ranks out of range are left out; a malformed payload gives nothing.
func decodeAbort(payload []byte, n int) (missing []int, reason string) {
	if len(payload) < 4 {
		return nil, ""
	}
	k := binary.BigEndian.Uint32(payload)
	if int64(k) > int64(n) || 4+4*int64(k) > int64(len(payload)) {
		return nil, ""
	}
	for i := 0; i < int(k); i++ {
		if r := binary.BigEndian.Uint32(payload[4+4*i:]); int64(r) < int64(n) {
			missing = append(missing, int(r))
		}
	}
	return missing, string(payload[4+4*k:])
}

// setAbort records the first abort and unblocks the data path.
func (t *transport) setAbort(err error) {
	t.amu.Lock()
	first := t.abort == nil
	if first {
		t.abort = err
		close(t.aborted)
	}
	t.amu.Unlock()
	if first {
		t.unblock()
	}
}

func (t *transport) abortErr() error {
	t.amu.Lock()
	defer t.amu.Unlock()
	return t.abort
}

// unblock makes every pending data read and write return.
func (t *transport) unblock() {
	for _, p := range t.peers {
		if p != nil && p.data != nil {
			p.data.SetDeadline(time.Unix(1, 0))
		}
	}
}

func (t *transport) Missing(ctx context.Context, seq uint64) []int {
	t.smu.Lock()
	t.statusID++
	id := t.statusID
	ch := make(chan statusRep, t.n)
	t.status[id] = ch
	t.smu.Unlock()
	defer func() {
		t.smu.Lock()
		delete(t.status, id)
		t.smu.Unlock()
	}()
	// A peer that answers is missing if it has not entered seq; one that
	// cannot answer (gone, or too busy) is missing unless it is known to
	// have entered seq already.
	var missing []int
	silent := func(p *peer) {
		if p.seen.Load() < seq {
			missing = append(missing, p.rank)
		}
	}
	asked := map[int]bool{}
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		if p.goneReason() != "" {
			silent(p)
			continue
		}
		if err := t.sendCtrl(p, ctrlFrame(ctStatusReq, id, 0, nil), 100*time.Millisecond); err != nil {
			silent(p)
			continue
		}
		asked[p.rank] = true
	}
	for len(asked) > 0 {
		select {
		case rep := <-ch:
			delete(asked, rep.rank)
			if rep.entered < seq {
				missing = append(missing, rep.rank)
			}
		case <-ctx.Done():
			for r := range asked {
				silent(t.peers[r])
			}
			asked = nil
		}
	}
	slices.Sort(missing)
	return missing
}

func (t *transport) Abort(oe *comm.OpError) {
	t.setAbort(oe)
	f := ctrlFrame(ctAbort, oe.Seq, 0, encodeAbort(oe.Missing, oe.Error()))
	var wg sync.WaitGroup
	for _, p := range t.peers {
		if p != nil && p.goneReason() == "" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.sendCtrl(p, f, 500*time.Millisecond)
			}()
		}
	}
	wg.Wait()
}

func (t *transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.setAbort(comm.ErrClosed)
	var wg sync.WaitGroup
	for _, p := range t.peers {
		if p != nil && p.ctrl != nil && p.goneReason() == "" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.sendCtrl(p, ctrlFrame(ctClose, 0, 0, nil), 200*time.Millisecond)
			}()
		}
	}
	wg.Wait()
	t.closeConns()
	t.readers.Wait()
	return nil
}
