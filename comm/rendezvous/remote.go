package rendezvous

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
)

// DefaultTimeout bounds Join and store calls whose context has no
// deadline.
const DefaultTimeout = 5 * time.Minute

// Options configure Join.
type Options struct {
	// Timeout bounds Join (and later calls without a context deadline);
	// DefaultTimeout if zero.
	Timeout time.Duration
	// Security authenticates store connections; required unless
	// MASTER_ADDR is a loopback address.
	Security auth.Security
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// Request ops and response statuses of the store protocol. A frame is a
// 4-byte big-endian length of the rest, then the body. Requests: op (1),
// timeout in ms (4), key length (2), key, value. Responses: status (1),
// payload.
const (
	opHello   = 1
	opSet     = 2
	opGet     = 3
	opAdd     = 4
	opBarrier = 5

	stOK      = 0
	stTimeout = 1
	stError   = 2

	maxFrame = 1 + 4 + 2 + MaxKey + MaxValue
)

func writeFrame(w io.Writer, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	buf := make([]byte, 4, 4+n)
	binary.BigEndian.PutUint32(buf, uint32(n))
	for _, p := range parts {
		buf = append(buf, p...)
	}
	_, err := w.Write(buf)
	return err
}

// frameChunk is how much of a frame readFrame allocates ahead of the
// data that has arrived.
const frameChunk = 64 << 10

// readFrame reads one frame, refusing lengths over max before allocating;
// the buffer grows with the data received (frameChunk at a time), so a
// peer that claims a large frame and sends little costs little.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := int64(binary.BigEndian.Uint32(h[:]))
	if n == 0 || n > int64(max) {
		return nil, fmt.Errorf("rendezvous: frame of %d bytes (limit %d)", n, max)
	}
	b := make([]byte, 0, min(n, frameChunk))
	for int64(len(b)) < n {
		k := min(n-int64(len(b)), frameChunk)
		if int64(cap(b)-len(b)) < k {
			b = append(b, make([]byte, k)...)[:len(b)]
		}
		m, err := io.ReadFull(r, b[len(b):int64(len(b))+k])
		b = b[:len(b)+m]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}

// Server is the rank-0 store.
type Server struct {
	ln      net.Listener
	s       *state
	sec     auth.Security
	wg      sync.WaitGroup
	quit    chan struct{} // closed by Close
	pending *auth.Limiter // connections not yet through their hello

	mu     sync.Mutex
	conns  map[net.Conn]bool
	joined []bool // ranks with a live connection
}

// Serve starts a store for a job of world ranks on ln. Close stops it.
func Serve(ln net.Listener, world int, sec auth.Security) *Server {
	srv := &Server{ln: ln, s: newState(world), sec: sec, quit: make(chan struct{}), pending: auth.NewLimiter(0),
		conns: map[net.Conn]bool{}, joined: make([]bool, world)}
	srv.wg.Add(1)
	go srv.accept()
	return srv
}

// Addr is the listening address.
func (srv *Server) Addr() string { return srv.ln.Addr().String() }

// Close stops accepting and fails pending waits (a pending barrier is
// answered with the ranks still missing), then drops every connection.
func (srv *Server) Close() error {
	srv.mu.Lock()
	select {
	case <-srv.quit:
	default:
		close(srv.quit)
	}
	srv.mu.Unlock()
	err := srv.ln.Close()
	srv.s.close()
	// Handlers answer their pending request, then their next read fails.
	srv.mu.Lock()
	for c := range srv.conns {
		c.SetReadDeadline(time.Now())
	}
	srv.mu.Unlock()
	done := make(chan struct{})
	go func() { srv.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		srv.mu.Lock()
		for c := range srv.conns {
			c.Close()
		}
		srv.mu.Unlock()
		<-done
	}
	return err
}

// accept serves connections until the listener is closed. Temporary
// accept errors (EMFILE after a burst of connections) are retried with a
// backoff; connections beyond auth.MaxPending that have not said hello
// yet are closed at once, and a silent one is dropped after
// auth.HandshakeTimeout, so a flood of idle connections can neither
// exhaust the file descriptors nor keep ranks out for long.
func (srv *Server) accept() {
	defer srv.wg.Done()
	for {
		c, err := auth.Accept(srv.ln, srv.quit)
		if err != nil {
			return
		}
		release, ok := srv.pending.Admit()
		if !ok {
			c.Close()
			continue
		}
		srv.mu.Lock()
		srv.conns[c] = true
		srv.mu.Unlock()
		srv.wg.Add(1)
		go func() {
			defer srv.wg.Done()
			srv.handle(c, release)
			release()
			srv.mu.Lock()
			delete(srv.conns, c)
			srv.mu.Unlock()
			c.Close()
		}()
	}
}

// handle serves one connection; release is called once it has said
// hello (it no longer counts as pending).
func (srv *Server) handle(raw net.Conn, release func()) {
	raw.SetDeadline(time.Now().Add(auth.HandshakeTimeout))
	c, err := srv.sec.Wrap(raw, true)
	if err != nil {
		return
	}
	if err := srv.sec.Authenticate(c, true, []byte("strata-store")); err != nil {
		return
	}
	br := bufio.NewReader(c)
	// The first request must be a hello naming the rank and world size.
	req, err := readFrame(br, maxFrame)
	if err != nil {
		return
	}
	rank := -1
	op, _, _, val, perr := parseRequest(req)
	switch {
	case perr != nil:
		writeFrame(c, []byte{stError}, []byte(perr.Error()))
		return
	case op != opHello || len(val) != 8:
		writeFrame(c, []byte{stError}, []byte("first request must be hello"))
		return
	}
	rank, world := int(int32(binary.BigEndian.Uint32(val))), int(int32(binary.BigEndian.Uint32(val[4:])))
	if world != srv.s.n {
		writeFrame(c, []byte{stError}, []byte(fmt.Sprintf("rank %d has WORLD_SIZE=%d but the store serves %d ranks", rank, world, srv.s.n)))
		return
	}
	if rank < 0 || rank >= world {
		writeFrame(c, []byte{stError}, []byte(fmt.Sprintf("rank %d out of range [0, %d)", rank, world)))
		return
	}
	srv.mu.Lock()
	dup := srv.joined[rank]
	srv.joined[rank] = true
	srv.mu.Unlock()
	if dup {
		writeFrame(c, []byte{stError}, []byte(fmt.Sprintf("rank %d is already connected (two processes with RANK=%d?)", rank, rank)))
		return
	}
	defer func() {
		srv.mu.Lock()
		srv.joined[rank] = false
		srv.mu.Unlock()
	}()
	raw.SetDeadline(time.Time{})
	release()
	writeFrame(c, []byte{stOK})
	ctx := context.Background()
	for {
		req, err := readFrame(br, maxFrame)
		if err != nil {
			return
		}
		op, tmo, key, val, err := parseRequest(req)
		if err != nil {
			writeFrame(c, []byte{stError}, []byte(err.Error()))
			return
		}
		dl := time.Now().Add(tmo)
		var resp [][]byte
		switch op {
		case opSet:
			if err := srv.s.set(key, val); err != nil {
				resp = [][]byte{{stError}, []byte(err.Error())}
			} else {
				resp = [][]byte{{stOK}}
			}
		case opGet:
			v, err := srv.s.get(ctx, dl, key)
			switch {
			case err == nil:
				resp = [][]byte{{stOK}, v}
			case errors.Is(err, context.DeadlineExceeded):
				resp = [][]byte{{stTimeout}}
			default:
				resp = [][]byte{{stError}, []byte(err.Error())}
			}
		case opAdd:
			if len(val) != 8 {
				resp = [][]byte{{stError}, []byte("add needs an 8-byte delta")}
				break
			}
			v, err := srv.s.add(key, int64(binary.BigEndian.Uint64(val)))
			if err != nil {
				resp = [][]byte{{stError}, []byte(err.Error())}
			} else {
				resp = [][]byte{{stOK}, binary.BigEndian.AppendUint64(nil, uint64(v))}
			}
		case opBarrier:
			missing, err := srv.s.barrier(ctx, dl, key, rank)
			switch {
			case err == nil:
				resp = [][]byte{{stOK}}
			case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errClosed):
				p := make([]byte, 0, 4*len(missing))
				for _, m := range missing {
					p = binary.BigEndian.AppendUint32(p, uint32(m))
				}
				resp = [][]byte{{stTimeout}, p}
			default:
				resp = [][]byte{{stError}, []byte(err.Error())}
			}
		default:
			resp = [][]byte{{stError}, []byte(fmt.Sprintf("unknown request %d", op))}
		}
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := writeFrame(c, resp...); err != nil {
			return
		}
	}
}

func parseRequest(b []byte) (op byte, timeout time.Duration, key string, val []byte, err error) {
	if len(b) < 7 {
		return 0, 0, "", nil, errors.New("short request")
	}
	op = b[0]
	timeout = time.Duration(binary.BigEndian.Uint32(b[1:5])) * time.Millisecond
	kl := int(binary.BigEndian.Uint16(b[5:7]))
	if kl > MaxKey || 7+kl > len(b) {
		return 0, 0, "", nil, fmt.Errorf("key length %d invalid", kl)
	}
	return op, timeout, string(b[7 : 7+kl]), b[7+kl:], nil
}

// client is a Store connected to a remote Server.
type client struct {
	rank, n int
	addr    string
	def     time.Duration
	srv     *Server // rank 0 owns the server

	mu     sync.Mutex // one request at a time; guards br, count
	c      net.Conn
	br     *bufio.Reader
	count  map[string]int
	closed atomic.Bool
}

// Join connects this rank to the job's store (serving it first on rank 0)
// and waits until every rank has joined. At the deadline (ctx's, else
// o.Timeout) it fails naming the ranks that never arrived, or, on ranks
// other than 0, saying that no store answered at the master address.
func Join(ctx context.Context, e Env, o Options) (Store, error) {
	if e.WorldSize < 1 || e.Rank < 0 || e.Rank >= e.WorldSize {
		return nil, fmt.Errorf("rendezvous: rank %d of %d", e.Rank, e.WorldSize)
	}
	if err := o.Security.Require("rendezvous", e.Addr()); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout())
		defer cancel()
	}
	var srv *Server
	if e.Rank == 0 {
		ln, err := net.Listen("tcp", e.Addr())
		if err != nil {
			return nil, fmt.Errorf("rendezvous: rank 0 cannot serve the store: %w", err)
		}
		srv = Serve(ln, e.WorldSize, o.Security)
	}
	cl, err := dial(ctx, e, o)
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, err
	}
	cl.srv = srv
	if err := cl.Barrier(ctx, "join"); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// dial connects and says hello, retrying while nothing listens yet.
func dial(ctx context.Context, e Env, o Options) (*client, error) {
	addr := e.Addr()
	dl, _ := ctx.Deadline()
	start := time.Now()
	backoff := 20 * time.Millisecond
	var lastErr error
	for {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			cl, err := hello(c, e, o, dl)
			if err == nil {
				return cl, nil
			}
			c.Close()
			var re *remoteError
			if errors.As(err, &re) || errors.Is(err, auth.ErrAuth) {
				return nil, err // refused: retrying will not help
			}
			lastErr = err
		} else {
			lastErr = err
		}
		if ctx.Err() != nil || time.Until(dl) < backoff {
			return nil, &WaitError{What: fmt.Sprintf("the store of rank 0 (last error: %v)", lastErr), Missing: []int{0}, Timeout: time.Since(start), Addr: addr}
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// FreePort returns a TCP port on host that was free a moment ago (for
// MASTER_PORT when the caller picks one).
func FreePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

type remoteError struct{ msg string }

func (e *remoteError) Error() string { return "rendezvous: store refused: " + e.msg }

func hello(raw net.Conn, e Env, o Options, dl time.Time) (*client, error) {
	raw.SetDeadline(dl)
	c, err := o.Security.Wrap(raw, false)
	if err != nil {
		return nil, err
	}
	if err := o.Security.Authenticate(c, false, []byte("strata-store")); err != nil {
		return nil, err
	}
	cl := &client{rank: e.Rank, n: e.WorldSize, addr: e.Addr(), def: o.timeout(), c: c, br: bufio.NewReader(c), count: map[string]int{}}
	v := binary.BigEndian.AppendUint32(nil, uint32(e.Rank))
	v = binary.BigEndian.AppendUint32(v, uint32(e.WorldSize))
	st, _, err := cl.roundTrip(opHello, 0, "", v)
	if err != nil {
		return nil, err
	}
	if st != stOK {
		return nil, errors.New("rendezvous: hello not accepted")
	}
	raw.SetDeadline(time.Time{})
	return cl, nil
}

func (cl *client) Rank() int { return cl.rank }
func (cl *client) Size() int { return cl.n }

// roundTrip sends a request and reads the response (caller holds no lock;
// roundTrip takes it).
func (cl *client) roundTrip(op byte, timeout time.Duration, key string, val []byte) (byte, []byte, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closed.Load() {
		return 0, nil, errClosed
	}
	ms := timeout.Milliseconds()
	if ms < 0 {
		ms = 0
	}
	if ms > 1<<31 {
		ms = 1 << 31
	}
	h := make([]byte, 7)
	h[0] = op
	binary.BigEndian.PutUint32(h[1:], uint32(ms))
	binary.BigEndian.PutUint16(h[5:], uint16(len(key)))
	// The server answers by the request's timeout; allow for transit.
	cl.c.SetDeadline(time.Now().Add(timeout + 5*time.Second))
	defer cl.c.SetDeadline(time.Time{})
	if err := writeFrame(cl.c, h, []byte(key), val); err != nil {
		return 0, nil, fmt.Errorf("rendezvous: store %s: %w", cl.addr, err)
	}
	resp, err := readFrame(cl.br, maxFrame)
	if err != nil {
		return 0, nil, fmt.Errorf("rendezvous: store %s: %w", cl.addr, err)
	}
	if resp[0] == stError {
		return 0, nil, &remoteError{msg: string(resp[1:])}
	}
	return resp[0], resp[1:], nil
}

func (cl *client) timeout(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return cl.def
}

func (cl *client) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key, value); err != nil {
		return err
	}
	_, _, err := cl.roundTrip(opSet, cl.timeout(ctx), key, value)
	return err
}

func (cl *client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key, nil); err != nil {
		return nil, err
	}
	d := cl.timeout(ctx)
	st, v, err := cl.roundTrip(opGet, d, key, nil)
	if err != nil {
		return nil, err
	}
	if st == stTimeout {
		return nil, &WaitError{What: fmt.Sprintf("key %q", key), Timeout: d, Addr: cl.addr}
	}
	return v, nil
}

func (cl *client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key, nil); err != nil {
		return 0, err
	}
	_, v, err := cl.roundTrip(opAdd, cl.timeout(ctx), key, binary.BigEndian.AppendUint64(nil, uint64(delta)))
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, errors.New("rendezvous: malformed add response")
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func (cl *client) Barrier(ctx context.Context, name string) error {
	if err := checkKey(name, nil); err != nil {
		return err
	}
	cl.mu.Lock()
	cl.count[name]++
	full := name + "#" + strconv.Itoa(cl.count[name])
	cl.mu.Unlock()
	d := cl.timeout(ctx)
	st, v, err := cl.roundTrip(opBarrier, d, full, nil)
	if err != nil {
		return err
	}
	if st == stTimeout {
		if len(v)%4 != 0 || len(v)/4 > cl.n {
			return errors.New("rendezvous: malformed barrier response")
		}
		var missing []int
		for i := 0; i+4 <= len(v); i += 4 {
			missing = append(missing, int(binary.BigEndian.Uint32(v[i:])))
		}
		return &WaitError{What: fmt.Sprintf("barrier %q", name), Missing: missing, Timeout: d, Addr: cl.addr}
	}
	return nil
}

// Close disconnects; on rank 0 it also stops the store.
func (cl *client) Close() error {
	if cl.closed.Swap(true) {
		return nil
	}
	err := cl.c.Close() // also ends a request in flight
	if cl.srv != nil {
		cl.srv.Close()
	}
	return err
}
