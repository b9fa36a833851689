package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// Coordinator fixes one global launch order for collectives that several
// stages (goroutines: sampler, loader, trainer) issue concurrently on each
// rank, as DSP's centralized communication coordination does: without it
// rank 0 might launch the sampler's all-to-all while rank 1 launches the
// trainer's all-reduce, and both wait forever.
//
// A stage calls Do(ctx, stage, fn) when its collective is ready. The
// leader (rank 0) takes its ready stages in arrival order and broadcasts
// each choice over the control communicator; every rank runs the chosen
// stage's fn when that stage is ready there too, one at a time, in the
// leader's order. fn issues the collective (on any communicator) and
// returns once it is launched (for host back ends: finished).
//
// Every wait has a deadline: a Do that is not launched by its context's
// deadline fails, and a follower whose chosen stage does not ask within
// CoordOptions.Timeout fails. Any failure breaks the coordinator on that
// rank and closes the control communicator, so the other ranks fail
// promptly too instead of waiting.
type Coordinator struct {
	ctrl      Comm
	timeout   time.Duration
	maxStages int

	mu       sync.Mutex
	waiting  map[int]*coordReq // ready stages not yet launched
	arrivals []int             // leader: stages in arrival order
	wake     chan struct{}
	err      error // set once broken
	broken   chan struct{}
	launched []int
	done     chan struct{}
}

type coordReq struct {
	stage    int
	deadline time.Time
	grant    chan struct{}
	finished chan struct{}
}

// CoordOptions configure a Coordinator.
type CoordOptions struct {
	// Timeout bounds how long a follower waits for the stage the leader
	// chose to become ready there (DefaultTimeout if 0).
	Timeout time.Duration
	// MaxStages bounds stage ids to [0, MaxStages) (64 if 0).
	MaxStages int
}

const defaultMaxStages = 64

// NewCoordinator starts a coordinator on ctrl, which it owns from then on
// (it must not be used for anything else; Close closes it).
func NewCoordinator(ctrl Comm, o CoordOptions) *Coordinator {
	to := o.Timeout
	if to <= 0 {
		to = DefaultTimeout
	}
	ms := o.MaxStages
	if ms <= 0 {
		ms = defaultMaxStages
	}
	c := &Coordinator{ctrl: ctrl, timeout: to, maxStages: ms, waiting: map[int]*coordReq{}, wake: make(chan struct{}, 1),
		broken: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c
}

// ErrCoordinator wraps every coordinator failure.
var ErrCoordinator = errors.New("comm: coordinator")

// Do runs fn when this rank's turn for stage comes in the global order.
// A stage may have one Do outstanding at a time.
func (c *Coordinator) Do(ctx context.Context, stage int, fn func(ctx context.Context) error) error {
	if stage < 0 || stage >= c.maxStages {
		return fmt.Errorf("%w: stage %d out of range [0, %d)", ErrCoordinator, stage, c.maxStages)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(c.timeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	req := &coordReq{stage: stage, deadline: dl, grant: make(chan struct{}), finished: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	if _, dup := c.waiting[stage]; dup {
		c.mu.Unlock()
		return fmt.Errorf("%w: stage %d already has a collective waiting", ErrCoordinator, stage)
	}
	c.waiting[stage] = req
	c.arrivals = append(c.arrivals, stage)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	select {
	case <-req.grant:
	case <-c.broken:
		return c.failure()
	case <-ctx.Done():
		// Other ranks may already launch this stage: the order can no
		// longer be kept, so the coordinator fails everywhere.
		c.fail(fmt.Errorf("%w: stage %d was not launched before its deadline: %v", ErrCoordinator, stage, ctx.Err()))
		return c.failure()
	}
	err := fn(ctx)
	close(req.finished)
	return err
}

func (c *Coordinator) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail breaks the coordinator (first error wins) and closes the control
// communicator so peers blocked on it fail too.
func (c *Coordinator) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.broken)
	c.mu.Unlock()
	c.ctrl.Close()
}

// Launched returns the stages launched so far, in order (the same on every
// rank).
func (c *Coordinator) Launched() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.launched)
}

// Close stops the coordinator and closes the control communicator. Do
// calls still waiting fail.
func (c *Coordinator) Close() error {
	c.fail(fmt.Errorf("%w: closed", ErrCoordinator))
	<-c.done
	return nil
}

// loop is the per-rank driver: wait for a local request, agree on the next
// stage with the leader, let it run, repeat.
func (c *Coordinator) loop() {
	defer close(c.done)
	leader := c.ctrl.Rank() == 0
	for {
		// Wait until some stage is ready here.
		var dl time.Time
		for {
			c.mu.Lock()
			if c.err != nil {
				c.mu.Unlock()
				return
			}
			if len(c.waiting) > 0 {
				if leader {
					dl = c.waiting[c.arrivals[0]].deadline
				} else {
					for _, r := range c.waiting {
						if dl.IsZero() || r.deadline.Before(dl) {
							dl = r.deadline
						}
					}
				}
				c.mu.Unlock()
				break
			}
			c.mu.Unlock()
			select {
			case <-c.wake:
			case <-c.broken:
				return
			}
		}
		token := []int64{-1}
		if leader {
			c.mu.Lock()
			token[0] = int64(c.arrivals[0])
			c.mu.Unlock()
		}
		ctx, cancel := context.WithDeadline(context.Background(), dl)
		err := c.ctrl.Broadcast(ctx, cpu.WrapI64(token), 0)
		cancel()
		if err != nil {
			c.fail(fmt.Errorf("%w: agreeing on the next stage: %w", ErrCoordinator, err))
			return
		}
		stage := int(token[0])
		req, err := c.await(stage)
		if err != nil {
			c.fail(err)
			return
		}
		close(req.grant)
		select {
		case <-req.finished:
		case <-c.broken:
			return
		}
	}
}

// await returns the local request for the stage the leader chose, waiting
// up to the timeout for it to become ready.
func (c *Coordinator) await(stage int) (*coordReq, error) {
	if stage < 0 || stage >= c.maxStages {
		return nil, fmt.Errorf("%w: the leader chose stage %d, out of range", ErrCoordinator, stage)
	}
	deadline := time.Now().Add(c.timeout)
	for {
		c.mu.Lock()
		if req, ok := c.waiting[stage]; ok {
			delete(c.waiting, stage)
			if i := slices.Index(c.arrivals, stage); i >= 0 {
				c.arrivals = slices.Delete(c.arrivals, i, i+1)
			}
			c.launched = append(c.launched, stage)
			c.mu.Unlock()
			return req, nil
		}
		c.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("%w: the leader launched stage %d, which did not become ready on rank %d within %v", ErrCoordinator, stage, c.ctrl.Rank(), c.timeout)
		}
		select {
		case <-c.wake:
		case <-c.broken:
			return nil, c.failure()
		case <-time.After(min(left, 50*time.Millisecond)):
		}
	}
}
