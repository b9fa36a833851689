package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Limits on what the store holds, checked before anything is allocated.
const (
	MaxKey        = 256
	MaxValue      = 1 << 20
	maxTotalBytes = 64 << 20
)

// Store is the rank-0 key-value store every rank of a job shares.
type Store interface {
	Rank() int
	Size() int
	// Set stores value under key (replacing any earlier value).
	Set(ctx context.Context, key string, value []byte) error
	// Get returns key's value, waiting until some rank sets it or ctx's
	// deadline passes (*WaitError).
	Get(ctx context.Context, key string) ([]byte, error)
	// Add adds delta to the integer stored under key (0 if absent) and
	// returns the new value.
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// Barrier returns once every rank has called Barrier with the same
	// name the same number of times; at the deadline it returns a
	// *WaitError naming the ranks that never arrived.
	Barrier(ctx context.Context, name string) error
	Close() error
}

// WaitError reports a wait that ran out of time.
type WaitError struct {
	What    string // `barrier "join"`, `key "x"`
	Missing []int  // ranks that never arrived (barriers)
	Timeout time.Duration
	Addr    string // the store's address, if remote
}

func (e *WaitError) Error() string {
	where := ""
	if e.Addr != "" {
		where = " (store " + e.Addr + ")"
	}
	if len(e.Missing) > 0 {
		return fmt.Sprintf("rendezvous: ranks %v never arrived at %s%s within %v", e.Missing, e.What, where, e.Timeout.Round(time.Millisecond))
	}
	return fmt.Sprintf("rendezvous: %s not reached%s within %v", e.What, where, e.Timeout.Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, context.DeadlineExceeded) true.
func (e *WaitError) Unwrap() error { return context.DeadlineExceeded }

var errClosed = errors.New("rendezvous: store closed")

func checkKey(key string, value []byte) error {
	if len(key) == 0 || len(key) > MaxKey {
		return fmt.Errorf("rendezvous: key length %d, want 1..%d", len(key), MaxKey)
	}
	if len(value) > MaxValue {
		return fmt.Errorf("rendezvous: value for %q has %d bytes, limit %d", key, len(value), MaxValue)
	}
	return nil
}

// state is the store's contents, shared by the server and local stores.
type state struct {
	n        int
	mu       sync.Mutex
	kv       map[string][]byte
	bytes    int
	barriers map[string][]bool
	changed  chan struct{} // closed and replaced on every change
	closed   bool
}

func newState(n int) *state {
	return &state{n: n, kv: map[string][]byte{}, barriers: map[string][]bool{}, changed: make(chan struct{})}
}

func (s *state) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *state) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.notify()
	}
}

func (s *state) set(key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := len(s.kv[key])
	if s.bytes-old+len(value) > maxTotalBytes {
		return fmt.Errorf("rendezvous: store full (%d bytes)", maxTotalBytes)
	}
	s.bytes += len(value) - old
	s.kv[key] = append([]byte(nil), value...)
	s.notify()
	return nil
}

func (s *state) add(key string, delta int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v int64
	if old, ok := s.kv[key]; ok {
		var err error
		if v, err = strconv.ParseInt(string(old), 10, 64); err != nil {
			return 0, fmt.Errorf("rendezvous: Add on %q, which holds a non-integer", key)
		}
	}
	v += delta
	b := []byte(strconv.FormatInt(v, 10))
	s.bytes += len(b) - len(s.kv[key])
	s.kv[key] = b
	s.notify()
	return v, nil
}

// wait calls check under the lock until it reports done, the deadline
// passes, ctx ends or the store closes.
func (s *state) wait(ctx context.Context, deadline time.Time, check func() bool) error {
	var timer *time.Timer
	for {
		s.mu.Lock()
		if check() {
			s.mu.Unlock()
			return nil
		}
		if s.closed {
			s.mu.Unlock()
			return errClosed
		}
		ch := s.changed
		s.mu.Unlock()
		d := time.Until(deadline)
		if d <= 0 {
			return context.DeadlineExceeded
		}
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return context.DeadlineExceeded
			}
			return ctx.Err()
		}
	}
}

func (s *state) get(ctx context.Context, deadline time.Time, key string) ([]byte, error) {
	var v []byte
	err := s.wait(ctx, deadline, func() bool {
		b, ok := s.kv[key]
		v = b
		return ok
	})
	return v, err
}

// barrier records rank's arrival at name and waits for all; on timeout it
// returns the ranks that never arrived.
func (s *state) barrier(ctx context.Context, deadline time.Time, name string, rank int) ([]int, error) {
	s.mu.Lock()
	arr, ok := s.barriers[name]
	if !ok {
		if len(s.barriers) > 1<<16 {
			s.mu.Unlock()
			return nil, errors.New("rendezvous: too many barriers")
		}
		arr = make([]bool, s.n)
		s.barriers[name] = arr
	}
	arr[rank] = true
	s.notify()
	s.mu.Unlock()
	err := s.wait(ctx, deadline, func() bool { return !slices.Contains(arr, false) })
	if err == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var missing []int
	for r, ok := range arr {
		if !ok {
			missing = append(missing, r)
		}
	}
	return missing, err
}

// local is an in-memory Store for ranks that are goroutines of one
// process.
type local struct {
	s     *state
	rank  int
	mu    sync.Mutex
	count map[string]int
}

// NewLocal returns the n in-memory stores of one group (index = rank).
func NewLocal(n int) []Store {
	s := newState(n)
	out := make([]Store, n)
	for r := range out {
		out[r] = &local{s: s, rank: r, count: map[string]int{}}
	}
	return out
}

func (l *local) Rank() int { return l.rank }
func (l *local) Size() int { return l.s.n }

func deadlineOf(ctx context.Context, def time.Duration) (time.Time, time.Duration) {
	if dl, ok := ctx.Deadline(); ok {
		return dl, time.Until(dl)
	}
	return time.Now().Add(def), def
}

func (l *local) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key, value); err != nil {
		return err
	}
	return l.s.set(key, value)
}

func (l *local) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key, nil); err != nil {
		return nil, err
	}
	dl, d := deadlineOf(ctx, DefaultTimeout)
	v, err := l.s.get(ctx, dl, key)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, &WaitError{What: fmt.Sprintf("key %q", key), Timeout: d}
	}
	return v, err
}

func (l *local) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key, nil); err != nil {
		return 0, err
	}
	return l.s.add(key, delta)
}

func (l *local) Barrier(ctx context.Context, name string) error {
	if err := checkKey(name, nil); err != nil {
		return err
	}
	l.mu.Lock()
	l.count[name]++
	full := name + "#" + strconv.Itoa(l.count[name])
	l.mu.Unlock()
	dl, d := deadlineOf(ctx, DefaultTimeout)
	missing, err := l.s.barrier(ctx, dl, full, l.rank)
	if errors.Is(err, context.DeadlineExceeded) {
		return &WaitError{What: fmt.Sprintf("barrier %q", name), Missing: missing, Timeout: d}
	}
	return err
}

func (l *local) Close() error { return nil }
