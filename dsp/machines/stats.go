package machines

import (
	"math"
	"sync"
	"time"
)

// Latency buckets: bucket b holds latencies in [base*f^b, base*f^(b+1)),
// f = 1.1 (a quantile is known to 10%), from 10 µs to about 2 hours.
const (
	numBuckets = 256
	bucketBase = 10 * time.Microsecond
	bucketStep = 1.1
)

func bucketOf(d time.Duration) int {
	if d <= bucketBase {
		return 0
	}
	b := int(math.Log(float64(d)/float64(bucketBase)) / math.Log(bucketStep))
	return min(max(b, 0), numBuckets-1)
}

// Fetches counts one process's remote-feature requests to one machine:
// mergeable over processes (the report's per-machine entries).
type Fetches struct {
	Requests int64 `json:"requests"`
	Rows     int64 `json:"rows"`
	Bytes    int64 `json:"bytes"`
	// Hist counts the requests per latency bucket (sparse: bucket ->
	// count).
	Hist map[int]int64 `json:"hist,omitempty"`
}

// Merge adds o's counts.
func (f *Fetches) Merge(o Fetches) {
	f.Requests += o.Requests
	f.Rows += o.Rows
	f.Bytes += o.Bytes
	for b, n := range o.Hist {
		if b < 0 || b >= numBuckets || n < 0 {
			continue // not ours: a peer's bad numbers are dropped, not sized from
		}
		if f.Hist == nil {
			f.Hist = map[int]int64{}
		}
		f.Hist[b] += n
	}
}

// Quantile is the q-quantile (0 < q <= 1) of the latencies in
// milliseconds (a bucket's geometric middle), 0 without requests.
func (f *Fetches) Quantile(q float64) float64 {
	var total int64
	for _, n := range f.Hist {
		total += n
	}
	if total == 0 {
		return 0
	}
	need := int64(math.Ceil(q * float64(total)))
	var seen int64
	for b := range numBuckets {
		seen += f.Hist[b]
		if seen >= need {
			lo := float64(bucketBase) * math.Pow(bucketStep, float64(b))
			return lo * math.Sqrt(bucketStep) / float64(time.Millisecond)
		}
	}
	return 0
}

// fetchStats is a Fetches being counted.
type fetchStats struct {
	mu sync.Mutex
	f  Fetches
}

func (s *fetchStats) add(d time.Duration, rows, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f.Requests++
	s.f.Rows += rows
	s.f.Bytes += bytes
	if s.f.Hist == nil {
		s.f.Hist = map[int]int64{}
	}
	s.f.Hist[bucketOf(d)]++
}

func (s *fetchStats) snapshot() Fetches {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.f
	f.Hist = make(map[int]int64, len(s.f.Hist))
	for b, n := range s.f.Hist {
		f.Hist[b] = n
	}
	return f
}

// Fetches is what this process asked of the other machines, in all.
func (s *Service) Fetches() Fetches {
	var f Fetches
	for _, st := range s.stats {
		if st != nil {
			f.Merge(st.snapshot())
		}
	}
	return f
}

// rowCache keeps remote rows within a byte budget, first in first out
// (a row's value never changes, so what is evicted only costs a fetch).
type rowCache struct {
	mu    sync.Mutex
	cols  int
	limit int // rows
	rows  map[int32][]float32
	order []int32
	next  int // oldest entry of order once full
	hits  int64
}

func newRowCache(budget int64, cols int) *rowCache {
	limit := budget / (4 * int64(max(cols, 1)))
	return &rowCache{cols: cols, limit: int(min(limit, math.MaxInt32)), rows: map[int32][]float32{}}
}

func (c *rowCache) get(v int32, dst []float32) bool {
	if c == nil || c.limit == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.rows[v]
	if ok {
		copy(dst, r)
		c.hits++
	}
	return ok
}

func (c *rowCache) put(v int32, r []float32) {
	if c == nil || c.limit == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.rows[v]; ok {
		return
	}
	if len(c.order) < c.limit {
		c.order = append(c.order, v)
	} else {
		delete(c.rows, c.order[c.next])
		c.order[c.next] = v
		c.next = (c.next + 1) % c.limit
	}
	c.rows[v] = append([]float32(nil), r...)
}

// CacheHits is the number of rows the remote-row cache answered.
func (s *Service) CacheHits() int64 {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	return s.cache.hits
}
