package fullgraph

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/strata-gnn/strata/tensor/backend"
)

// ledger counts the buffers and sparse matrices in use and fails the
// first sparse upload (the adjacency, after the parameters and the
// optimizer exist).
type ledger struct {
	backend.Backend
	mu           sync.Mutex
	live, sparse int
	failSparse   bool
}

func (l *ledger) Alloc(dt backend.DType, n int) (backend.Buffer, error) {
	b, err := l.Backend.Alloc(dt, n)
	if err == nil {
		l.mu.Lock()
		l.live++
		l.mu.Unlock()
	}
	return b, err
}

func (l *ledger) Free(b backend.Buffer) {
	if b == nil {
		return
	}
	l.mu.Lock()
	l.live--
	l.mu.Unlock()
	l.Backend.Free(b)
}

func (l *ledger) NewSparse(rows, cols int, indptr []int64, indices []int32) (backend.Sparse, error) {
	l.mu.Lock()
	fail := l.failSparse
	l.failSparse = false
	l.mu.Unlock()
	if fail {
		return nil, errInjected
	}
	s, err := l.Backend.NewSparse(rows, cols, indptr, indices)
	if err == nil {
		l.mu.Lock()
		l.sparse++
		l.mu.Unlock()
	}
	return s, err
}

func (l *ledger) FreeSparse(s backend.Sparse) {
	if s == nil {
		return
	}
	l.mu.Lock()
	l.sparse--
	l.mu.Unlock()
	l.Backend.FreeSparse(s)
}

// TestSetupFailureFreesEverything: a device whose setup fails part way
// (its adjacency cannot be uploaded) returns what it had allocated,
// parameters and optimizer state included; the cleanup used to see a nil
// worker and free nothing.
func TestSetupFailureFreesEverything(t *testing.T) {
	ds := cora(t)
	l := &ledger{Backend: cpuBackend(t), failSparse: true}
	cfg := Defaults(GCN)
	cfg.Epochs = 1
	_, err := Run(context.Background(), ds, cfg, Options{Backends: []backend.Backend{l}})
	if !errors.Is(err, errInjected) {
		t.Fatalf("got %v, want the injected failure", err)
	}
	if l.live != 0 || l.sparse != 0 {
		t.Fatalf("after the failed setup: %d buffers and %d sparse matrices still allocated", l.live, l.sparse)
	}
	// The same back end trains once nothing fails.
	if _, err := Run(context.Background(), ds, cfg, Options{Backends: []backend.Backend{l}}); err != nil {
		t.Fatal(err)
	}
	if l.live != 0 || l.sparse != 0 {
		t.Fatalf("after a run: %d buffers and %d sparse matrices still allocated", l.live, l.sparse)
	}
}
