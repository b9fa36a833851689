package machines

import (
	"slices"
	"sync"

	"github.com/strata-gnn/strata/dsp/metrics"
)

// MaxAhead bounds the prefetches a Source holds: a pipeline has at most
// its queues' batches between the sampler and the loader.
const MaxAhead = 8

// Source is one device's reader of the feature service: Gather as the
// Service's, with its bytes counted on ctr, and Prefetch, which starts
// a gather of the rows of a batch the device will ask for next (the
// sampler hands the loader a batch through a queue: the remote rows are
// on their way while earlier batches load and train). Safe for
// concurrent use.
type Source struct {
	svc *Service
	ctr *metrics.Counters
	mu  sync.Mutex
	// ahead holds the prefetches not yet gathered, oldest first.
	ahead []*prefetch
	hits  int64
}

type prefetch struct {
	ids  []int32
	out  []float32
	err  error
	done chan struct{}
}

// Source returns a reader whose network bytes go to ctr (nil: none).
func (s *Service) Source(ctr *metrics.Counters) *Source { return &Source{svc: s, ctr: ctr} }

// Prefetch starts gathering the rows of ids (copied) for a later Gather
// of the same IDs in the same order. With MaxAhead prefetches pending
// it does nothing (the rows are gathered when asked for). The values
// are the same either way: a prefetch only moves the wait.
func (r *Source) Prefetch(ids []int32) {
	if len(ids) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ahead) == MaxAhead {
		// The oldest are the batches the loader asks for first: keep
		// them; this one is fetched when asked for.
		return
	}
	p := &prefetch{ids: slices.Clone(ids), out: make([]float32, len(ids)*r.svc.cols), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = r.svc.Gather(p.ids, p.out, r.ctr)
	}()
	r.ahead = append(r.ahead, p)
}

// Gather writes the rows of ids into out: from the prefetch of the same
// IDs when there is one (waiting for it), else as Service.Gather.
func (r *Source) Gather(ids []int32, out []float32) error {
	r.mu.Lock()
	var p *prefetch
	for i, q := range r.ahead {
		if slices.Equal(q.ids, ids) {
			p = q
			r.ahead = slices.Delete(r.ahead, i, i+1)
			break
		}
	}
	r.mu.Unlock()
	if p != nil {
		<-p.done // every request it made has a deadline
		if p.err == nil && len(out) == len(p.out) {
			copy(out, p.out)
			r.mu.Lock()
			r.hits++
			r.mu.Unlock()
			return nil
		}
		// A failed prefetch is asked again: the error, if it stays,
		// comes from the gather that needs the rows.
	}
	return r.svc.Gather(ids, out, r.ctr)
}

// Prefetched is the number of Gathers a prefetch answered.
func (r *Source) Prefetched() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits
}
