package world

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
	"github.com/strata-gnn/strata/comm/rendezvous"
)

// MaxRanks bounds the job's ranks (every process's devices together).
const MaxRanks = 1 << 16

// DefaultTimeout bounds the setup waits (joining, agreeing, opening
// communicators) when Options.Timeout is zero: processes load and
// partition the dataset between them, which takes a while on large
// graphs.
const DefaultTimeout = 10 * time.Minute

// Process describes one process of a job.
type Process struct {
	Index int    `json:"process"`
	Host  string `json:"host"` // STRATA_HOST_ID, NCCL_HOSTID or the host name
	Addr  string `json:"addr"` // the address it advertises to peers
	PID   int    `json:"pid"`
	// Ranks are its devices' global ranks, First .. First+Devices-1.
	First   int `json:"first_rank"`
	Devices int `json:"devices"`

	hostID string // what decides "same machine"
	realID string // boot id and host name, whatever the overrides say
}

// Ranks lists p's global ranks.
func (p Process) Ranks() []int {
	r := make([]int, p.Devices)
	for i := range r {
		r[i] = p.First + i
	}
	return r
}

// String names the process for messages: "process 1 (host h2 at
// 10.0.0.2, pid 77, ranks 2-3)".
func (p Process) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "process %d (host %s", p.Index, p.Host)
	if p.Addr != "" && p.Addr != p.Host {
		fmt.Fprintf(&b, " at %s", p.Addr)
	}
	if p.PID > 0 {
		fmt.Fprintf(&b, ", pid %d", p.PID)
	}
	switch p.Devices {
	case 0:
	case 1:
		fmt.Fprintf(&b, ", rank %d", p.First)
	default:
		fmt.Fprintf(&b, ", ranks %d-%d", p.First, p.First+p.Devices-1)
	}
	b.WriteString(")")
	return b.String()
}

// Info is a job's layout for reports ('report.world').
type Info struct {
	// Machines counts the distinct hosts.
	Machines  int `json:"machines"`
	Processes int `json:"processes"`
	Ranks     int `json:"ranks"`
	// Comm is the host communicators' back end across processes
	// ("inproc" in one process, "shm" or "tcp").
	Comm       string    `json:"comm"`
	PerProcess []Process `json:"per_process"`
	// PerMachine is filled by the trainers at the end of a job (process
	// 0's report): bytes per link and remote-feature latency per machine.
	PerMachine []MachineInfo `json:"per_machine,omitempty"`
}

// World is this process's view of a job.
type World struct {
	store rendezvous.Store // nil for a lone process
	env   rendezvous.Env
	sec   auth.Security
	procs []Process
	me    int // this process's index
	size  int
	wait  time.Duration
	same  bool // every process on one host (hostID)
	real  bool // every process on one physical host

	mu     sync.Mutex
	groups map[string]bool // names opened so far
	closed bool

	// Heartbeats: every process bumps its counter in the store; a setup
	// wait fails, naming the process, when another's has not moved for
	// peer (a dead or stopped process, or one that lost the store).
	peer     time.Duration
	stopBeat chan struct{}
	beatMu   sync.Mutex
	beats    []int64     // last seen counters
	beatAt   []time.Time // when each last moved
	checked  time.Time   // last look at them

	acked atomic.Bool // this process has seen another's abort
}

// Single is the world of a lone process that owns all n ranks.
func Single(n int) *World {
	host, _ := os.Hostname()
	p := Process{Index: 0, Host: host, PID: os.Getpid(), Devices: n}
	return &World{procs: []Process{p}, size: n, same: true, real: true, wait: DefaultTimeout, groups: map[string]bool{}}
}

// Options configure Join.
type Options struct {
	// Devices is the number of ranks this process owns (its devices).
	Devices int
	// Config is what every process must pass identically (the training
	// settings as JSON); nil checks nothing.
	Config []byte
	// Timeout bounds every setup wait (DefaultTimeout if zero).
	Timeout time.Duration
	// Security for the store and TCP; nil reads the environment
	// (auth.FromEnv). Off loopback mutual TLS is required.
	Security *auth.Security
	// Host is the address advertised to peers
	// (rendezvous.AdvertiseHost when empty).
	Host string
	// HostID overrides the host identity (HostID() when empty).
	HostID string
	// PeerTimeout is how long a process may go without a heartbeat
	// before the others' setup waits fail naming it (DefaultPeerTimeout
	// if zero; the communicators' own deadlines bound the waits during
	// training).
	PeerTimeout time.Duration
}

// DefaultPeerTimeout is Options.PeerTimeout's default.
const DefaultPeerTimeout = time.Minute

// HostID is this process's machine identity: STRATA_HOST_ID, else
// NCCL_HOSTID, else the boot id and host name.
func HostID() string {
	for _, v := range []string{"STRATA_HOST_ID", "NCCL_HOSTID"} {
		if s := strings.TrimSpace(os.Getenv(v)); s != "" {
			return s
		}
	}
	return realHostID()
}

func realHostID() string {
	name, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(boot)) + "/" + name
}

// announce is what a process publishes about itself.
type announce struct {
	Devices int    `json:"devices"`
	Host    string `json:"host"`
	HostID  string `json:"host_id"`
	RealID  string `json:"real_id"`
	Addr    string `json:"addr"`
	PID     int    `json:"pid"`
}

// maxField bounds every string of an announcement (host names, ids and
// addresses are short).
const maxField = 512

// parseAnnounce decodes process p's announcement, checking every field
// before anything is sized from it.
func parseAnnounce(p int, b []byte) (announce, error) {
	var a announce
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return a, fmt.Errorf("world: process %d published a malformed description (%d bytes): %v", p, len(b), err)
	}
	if dec.More() {
		return a, fmt.Errorf("world: process %d published a description with trailing data", p)
	}
	switch {
	case a.Devices < 1 || a.Devices > MaxRanks:
		return a, fmt.Errorf("world: process %d owns %d devices, want 1..%d", p, a.Devices, MaxRanks)
	case a.PID < 0:
		return a, fmt.Errorf("world: process %d published pid %d", p, a.PID)
	case len(a.Host) > maxField || len(a.HostID) > maxField || len(a.RealID) > maxField || len(a.Addr) > maxField:
		return a, fmt.Errorf("world: process %d published a field longer than %d bytes", p, maxField)
	case a.HostID == "":
		return a, fmt.Errorf("world: process %d published no host id", p)
	}
	return a, nil
}

// Join brings this process into the job env describes: it joins the
// rank-0 store (process env.Rank of env.WorldSize), publishes its device
// count, host and address, learns everyone's, and checks that every
// process passed the same configuration. Every wait is bounded by the
// timeout and a process that never arrives is named.
func Join(ctx context.Context, env rendezvous.Env, o Options) (*World, error) {
	if o.Devices < 1 || o.Devices > MaxRanks {
		return nil, fmt.Errorf("world: %d devices, want 1..%d", o.Devices, MaxRanks)
	}
	wait := o.Timeout
	if wait <= 0 {
		wait = DefaultTimeout
	}
	jctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var sec auth.Security
	if o.Security != nil {
		sec = *o.Security
	} else {
		var err error
		if sec, err = auth.FromEnv(); err != nil {
			return nil, fmt.Errorf("world: %w", err)
		}
	}
	store, err := rendezvous.Join(jctx, env, rendezvous.Options{Timeout: wait, Security: sec})
	if err != nil {
		return nil, fmt.Errorf("world: process %d of %d joining the store at %s: %w", env.Rank, env.WorldSize, env.Addr(), processWait(err))
	}
	peer := o.PeerTimeout
	if peer <= 0 {
		peer = DefaultPeerTimeout
	}
	w := &World{store: store, env: env, sec: sec, me: env.Rank, wait: wait, groups: map[string]bool{}, peer: peer,
		stopBeat: make(chan struct{}), beats: make([]int64, env.WorldSize), beatAt: make([]time.Time, env.WorldSize)}
	now := time.Now()
	for i := range w.beatAt {
		w.beatAt[i] = now
	}
	go w.heartbeat()
	if err := w.introduce(jctx, o); err != nil {
		w.Leave(err)
		return nil, err
	}
	return w, nil
}

// processWait rewords the store's wait errors, whose ranks are process
// indices.
func processWait(err error) error {
	var we *rendezvous.WaitError
	if errors.As(err, &we) && len(we.Missing) > 0 {
		return fmt.Errorf("processes %v did not arrive: %w", we.Missing, err)
	}
	return err
}

func (w *World) introduce(ctx context.Context, o Options) error {
	host := o.HostID
	if host == "" {
		host = HostID()
	}
	name := host
	if os.Getenv("STRATA_HOST_ID") == "" && os.Getenv("NCCL_HOSTID") == "" && o.HostID == "" {
		name, _ = os.Hostname()
	}
	addr := o.Host
	if addr == "" {
		addr = rendezvous.AdvertiseHost("", w.env)
	}
	me := announce{Devices: o.Devices, Host: name, HostID: host, RealID: realHostID(), Addr: addr, PID: os.Getpid()}
	b, err := json.Marshal(me)
	if err != nil {
		return err
	}
	if err := w.store.Set(ctx, "world/proc/"+strconv.Itoa(w.me), b); err != nil {
		return fmt.Errorf("world: publishing this process: %w", err)
	}
	if o.Config != nil {
		if err := w.store.Set(ctx, "world/config/"+strconv.Itoa(w.me), o.Config); err != nil {
			return fmt.Errorf("world: publishing the configuration: %w", err)
		}
	}
	n := w.env.WorldSize
	w.procs = make([]Process, n)
	first := 0
	w.same, w.real = true, true
	for p := range n {
		v, err := w.get(ctx, "world/proc/"+strconv.Itoa(p))
		if err != nil {
			return fmt.Errorf("world: process %d never described itself: %w", p, err)
		}
		a, err := parseAnnounce(p, v)
		if err != nil {
			return err
		}
		if first+a.Devices > MaxRanks {
			return fmt.Errorf("world: the processes own more than %d devices together", MaxRanks)
		}
		w.procs[p] = Process{Index: p, Host: a.Host, Addr: a.Addr, PID: a.PID, First: first, Devices: a.Devices, hostID: a.HostID, realID: a.RealID}
		first += a.Devices
		w.same = w.same && a.HostID == w.procs[0].hostID
		w.real = w.real && a.RealID == w.procs[0].realID
	}
	w.size = first
	if o.Config != nil {
		if err := w.agree(ctx, "world/config/", o.Config); err != nil {
			return err
		}
	}
	return nil
}

// agree compares every process's value under prefix+index with process
// 0's; the first that differs is a *MismatchError (the same on every
// process).
func (w *World) agree(ctx context.Context, prefix string, mine []byte) error {
	var ref []byte
	for p := range w.procs {
		v := mine
		if p != w.me {
			var err error
			if v, err = w.get(ctx, prefix+strconv.Itoa(p)); err != nil {
				return fmt.Errorf("world: %s never published its %s: %w", w.procs[p], strings.TrimSuffix(strings.TrimPrefix(prefix, "world/"), "/"), err)
			}
		}
		if p == 0 {
			ref = v
			continue
		}
		if !bytes.Equal(v, ref) {
			path, a, b := jsonDiff(ref, v)
			return &MismatchError{What: strings.TrimSuffix(strings.TrimPrefix(prefix, "world/"), "/"), Process: w.procs[p], Path: path, Theirs: b, Ref: a}
		}
	}
	return nil
}

// Agree checks that every process passed the same value under name
// (e.g. a summary of the dataset it loaded); every process must call it
// with the same name. The first process whose value differs from process
// 0's is a *MismatchError on every process.
func (w *World) Agree(ctx context.Context, name string, value []byte) error {
	if w.store == nil {
		return nil
	}
	ctx, cancel := w.bound(ctx)
	defer cancel()
	prefix := "world/agree/" + name + "/"
	if err := w.store.Set(ctx, prefix+strconv.Itoa(w.me), value); err != nil {
		return fmt.Errorf("world: publishing %s: %w", name, err)
	}
	return w.agree(ctx, prefix, value)
}

// MismatchError reports a process started differently from process 0.
type MismatchError struct {
	What    string // "config", or the name given to Agree
	Process Process
	Path    string // the first setting that differs ("train.lr"), "" if unknown
	Theirs  string // its value there
	Ref     string // process 0's
	Hint    string // what to do ("" : start every process with the same flags)
}

func (e *MismatchError) Error() string {
	hint := e.Hint
	if hint == "" {
		hint = "every process must be started with the same training flags"
	}
	if e.Path == "" {
		return fmt.Sprintf("world: %s has another %s than process 0 (%s)", e.Process, e.What, hint)
	}
	return fmt.Sprintf("world: %s has another %s than process 0: %s is %s there, %s on process 0 (%s)",
		e.Process, e.What, e.Path, e.Theirs, e.Ref, hint)
}

// bound gives ctx the world's setup timeout when it has no deadline.
func (w *World) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, w.wait)
}

// abortPoll is how often a wait on the store checks whether a process
// has given up.
const abortPoll = 500 * time.Millisecond

// maxPoll bounds the interval between a wait's looks at the store.
const maxPoll = 50 * time.Millisecond

// get is the store's Get, also ending when some process has left with
// an error (Leave): then it returns that process's *AbortError.
//
// It polls instead of letting the store wait: the process has one
// connection to the store, which serves one request at a time, and its
// local ranks open their communicators concurrently through it (one
// rank's wait must not hold back another's Set).
func (w *World) get(ctx context.Context, key string) ([]byte, error) {
	start, lastCheck := time.Now(), time.Now()
	delay := time.Millisecond
	for {
		now, cancel := context.WithDeadline(ctx, time.Now()) // answered at once
		v, err := w.store.Get(now, key)
		cancel()
		if err == nil {
			return v, nil
		}
		var we *rendezvous.WaitError
		if !errors.As(err, &we) {
			// The store is gone or refused: no use retrying. It lives in
			// process 0.
			p := w.known(0)
			return nil, &PeerError{Processes: []Process{p}, Ranks: p.Ranks(), Err: fmt.Errorf("the store it serves: %w", err)}
		}
		if time.Since(lastCheck) >= abortPoll {
			if ae := w.aborted(ctx); ae != nil {
				return nil, ae
			}
			if pe := w.silent(ctx); pe != nil {
				return nil, pe
			}
			lastCheck = time.Now()
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if ae := w.aborted(ctx); ae != nil {
				return nil, ae
			}
			return nil, &rendezvous.WaitError{What: fmt.Sprintf("key %q", key), Timeout: time.Since(start), Addr: w.env.Addr()}
		}
		delay = min(2*delay, maxPoll)
	}
}

// AbortError is what the other processes' waits return once a process
// has left with an error.
type AbortError struct {
	Process Process
	Msg     string
}

func (e *AbortError) Error() string { return fmt.Sprintf("world: %s failed: %s", e.Process, e.Msg) }

// MissingRanks names the ranks of the process that gave up.
func (e *AbortError) MissingRanks() []int { return e.Process.Ranks() }

// aborted returns the first process's *AbortError once one has left with
// an error, else nil.
func (w *World) aborted(ctx context.Context) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortPoll)
	defer cancel()
	n, err := w.store.Add(actx, "world/abort", 0)
	if err != nil || n == 0 {
		return nil
	}
	if !w.acked.Swap(true) {
		w.store.Add(actx, "world/abort/acks", 1) // process 0 keeps the store up until we know
	}
	v, err := w.store.Get(actx, "world/abort/msg")
	if err != nil {
		return nil
	}
	var m struct {
		Process int    `json:"process"`
		Msg     string `json:"msg"`
	}
	if json.Unmarshal(v, &m) != nil || m.Process < 0 || m.Process >= len(w.procs) {
		return &AbortError{Process: Process{Index: -1, Host: "?"}, Msg: "a process gave up (unreadable message)"}
	}
	return &AbortError{Process: w.procs[m.Process], Msg: m.Msg}
}

// Leave ends this process's part in the job. With err it first tells the
// other processes (best effort, within a second), so that their setup
// waits end at once with its message. It closes the store (process 0
// stops serving it: call Leave once every process is past setup, i.e.
// after training, or on failure).
func (w *World) Leave(err error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	if w.store == nil {
		return
	}
	close(w.stopBeat)
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		msg := err.Error()
		if len(msg) > 4096 {
			msg = msg[:4096] + "..."
		}
		b, _ := json.Marshal(struct {
			Process int    `json:"process"`
			Msg     string `json:"msg"`
		}{w.me, msg})
		if w.store.Set(ctx, "world/abort/msg", b) == nil {
			w.store.Add(ctx, "world/abort", 1)
		}
		cancel()
		if w.me == 0 {
			// The store lives in this process: keep it up until the
			// others waiting on it have read why (or a little while;
			// those training fail through their communicators anyway).
			dl := time.Now().Add(3 * abortPoll)
			for time.Now().Before(dl) {
				ctx, cancel := context.WithTimeout(context.Background(), abortPoll)
				n, err := w.store.Add(ctx, "world/abort/acks", 0)
				cancel()
				if err != nil || n >= int64(len(w.procs)-1) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	w.store.Close()
}

// heartbeat bumps this process's counter in the store until Leave.
func (w *World) heartbeat() {
	every := min(time.Second, w.peer/5)
	t := time.NewTicker(every)
	defer t.Stop()
	key := "world/beat/" + strconv.Itoa(w.me)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		w.store.Add(ctx, key, 1)
		cancel()
		select {
		case <-t.C:
		case <-w.stopBeat:
			return
		}
	}
}

// silent returns a *PeerError naming the processes whose heartbeat has
// not moved for the peer timeout (looked at once per abortPoll).
func (w *World) silent(ctx context.Context) error {
	w.beatMu.Lock()
	defer w.beatMu.Unlock()
	if len(w.beats) == 0 || time.Since(w.checked) < abortPoll {
		return nil
	}
	w.checked = time.Now()
	var gone []Process
	var ranks []int
	for p := range w.beats {
		if p == w.me {
			continue
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortPoll)
		v, err := w.store.Add(actx, "world/beat/"+strconv.Itoa(p), 0)
		cancel()
		if err != nil {
			return nil // the store's own failure is reported by the wait
		}
		now := time.Now()
		if v != w.beats[p] {
			w.beats[p], w.beatAt[p] = v, now
			continue
		}
		if now.Sub(w.beatAt[p]) >= w.peer {
			q := w.known(p)
			gone = append(gone, q)
			ranks = append(ranks, q.Ranks()...)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return &PeerError{Processes: gone, Ranks: ranks, Err: fmt.Errorf("no heartbeat for %v: the process died, stopped or lost the store", w.peer)}
}

// known is process p as far as this one knows it (while joining, only
// its index).
func (w *World) known(p int) Process {
	if p < len(w.procs) && w.procs[p].hostID != "" {
		return w.procs[p]
	}
	return Process{Index: p, Host: "unknown"}
}

// Barrier waits until every process has reached it under the same name,
// within the setup timeout; a process that gives up or never arrives is
// named.
func (w *World) Barrier(ctx context.Context, name string) error {
	if w.store == nil {
		return nil
	}
	ctx, cancel := w.bound(ctx)
	defer cancel()
	key := "world/barrier/" + name
	if err := w.store.Set(ctx, key+"/"+strconv.Itoa(w.me), []byte{1}); err != nil {
		return err
	}
	for p := range w.procs {
		if _, err := w.get(ctx, key+"/"+strconv.Itoa(p)); err != nil {
			var ae *AbortError
			if errors.As(err, &ae) {
				return err
			}
			return &PeerError{Processes: []Process{w.procs[p]}, Ranks: w.procs[p].Ranks(), Err: fmt.Errorf("did not reach %q: %w", name, err)}
		}
	}
	return nil
}

// Size is the job's number of ranks.
func (w *World) Size() int { return w.size }

// Local is the number of ranks of this process.
func (w *World) Local() int { return w.procs[w.me].Devices }

// First is the global rank of this process's first device.
func (w *World) First() int { return w.procs[w.me].First }

// Rank is the global rank of local device i.
func (w *World) Rank(i int) int { return w.procs[w.me].First + i }

// Ranks lists this process's global ranks.
func (w *World) Ranks() []int { return w.procs[w.me].Ranks() }

// IsLocal reports whether global rank r is one of this process's.
func (w *World) IsLocal(r int) bool {
	p := w.procs[w.me]
	return r >= p.First && r < p.First+p.Devices
}

// Process is this process's index; Processes describes all of them.
func (w *World) Process() int            { return w.me }
func (w *World) Processes() []Process    { return slices.Clone(w.procs) }
func (w *World) Self() Process           { return w.procs[w.me] }
func (w *World) Multi() bool             { return len(w.procs) > 1 }
func (w *World) SameHost() bool          { return w.same }
func (w *World) Env() rendezvous.Env     { return w.env }
func (w *World) Security() auth.Security { return w.sec }

// Owner is the process that owns global rank r.
func (w *World) Owner(r int) Process {
	i, _ := slices.BinarySearchFunc(w.procs, r, func(p Process, r int) int {
		switch {
		case r < p.First:
			return 1
		case r >= p.First+p.Devices:
			return -1
		}
		return 0
	})
	if i >= len(w.procs) {
		return Process{Index: -1, Host: "?"}
	}
	return w.procs[i]
}

// Info describes the layout for reports.
func (w *World) Info() Info {
	hosts := map[string]bool{}
	for _, p := range w.procs {
		id := p.hostID
		if id == "" {
			id = p.Host
		}
		hosts[id] = true
	}
	return Info{Machines: len(hosts), Processes: len(w.procs), Ranks: w.size, Comm: w.hostKind(), PerProcess: w.Processes()}
}

// JoinLocal joins len(layout) simulated processes of this one
// (goroutines, each with its own World and store connection), process p
// owning layout[p] devices and counting as machine "machine<p>", so
// their groups talk over TCP on loopback as machines would: for tests
// and experiments. o gives the other options (Devices and HostID are
// set here). Leave every world when done.
func JoinLocal(ctx context.Context, layout []int, o Options) ([]*World, error) {
	port, err := rendezvous.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	if o.Security == nil {
		o.Security = &auth.Security{} // loopback: nothing required
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	ws, errs := make([]*World, len(layout)), make([]error, len(layout))
	var wg sync.WaitGroup
	for p, n := range layout {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := rendezvous.Env{Rank: p, WorldSize: len(layout), LocalRank: -1, LocalWorldSize: -1, MasterAddr: "127.0.0.1", MasterPort: port}
			po := o
			po.Devices, po.HostID = n, fmt.Sprintf("machine%d", p)
			ws[p], errs[p] = Join(ctx, env, po)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, w := range ws {
			if w != nil {
				w.Leave(err)
			}
		}
		return nil, err
	}
	return ws, nil
}
