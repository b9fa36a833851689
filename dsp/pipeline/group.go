package pipeline

import (
	"context"
	"fmt"
	"sync"
)

// Group runs goroutines and cancels them all when one fails, like
// errgroup: Wait returns the first error.
type Group struct {
	// OnFail, when set before the first Go, is called once with the first
	// error, before the other goroutines are cancelled (to record their
	// state while they are still where they were).
	OnFail func(err error)

	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// NewGroup returns a group and the context its goroutines should watch.
func NewGroup(ctx context.Context) (*Group, context.Context) {
	ctx, cancel := context.WithCancelCause(ctx)
	return &Group{cancel: cancel}, ctx
}

// Go runs fn in a goroutine; a panic is turned into an error naming what.
func (g *Group) Go(what string, fn func() error) {
	g.wg.Go(func() {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("pipeline: %s panicked: %v", what, p)
				}
			}()
			return fn()
		}()
		if err != nil {
			g.Fail(err)
		}
	})
}

// Fail records err (the first one wins) and cancels the group.
func (g *Group) Fail(err error) {
	g.once.Do(func() {
		g.err = err
		if g.OnFail != nil {
			g.OnFail(err)
		}
		g.cancel(err)
	})
}

// Wait waits for every goroutine and returns the first error.
func (g *Group) Wait() error {
	g.wg.Wait()
	g.cancel(nil)
	return g.err
}
