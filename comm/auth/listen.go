package auth

import (
	"errors"
	"net"
	"os"
	"time"
)

// HandshakeTimeout bounds the handshake of an accepted connection (TLS,
// the secret's challenge-response and the first request): a peer that
// connects and stays silent is dropped after it.
const HandshakeTimeout = 3 * time.Second

// MaxPending is how many accepted connections that have not finished
// their handshake a listener holds at once; it closes any beyond at once.
// A real peer whose connection was closed retries (the store's and the
// TCP transport's dialers do).
var MaxPending = 256

// Limiter caps the connections held before they have authenticated.
type Limiter struct{ slots chan struct{} }

// NewLimiter allows n pending connections (MaxPending if n <= 0).
func NewLimiter(n int) *Limiter {
	if n <= 0 {
		n = MaxPending
	}
	return &Limiter{slots: make(chan struct{}, n)}
}

// Admit reports whether one more pending connection may be held; if so,
// release must be called once it has authenticated or been dropped.
func (l *Limiter) Admit() (release func(), ok bool) {
	select {
	case l.slots <- struct{}{}:
		done := false
		return func() {
			if !done {
				done = true
				<-l.slots
			}
		}, true
	default:
		return nil, false
	}
}

// Accept waits for the next connection on ln. Temporary errors (EMFILE
// when the process is out of file descriptors, ECONNABORTED, ...) are
// retried with a backoff from 5 ms doubling up to 1 s, as net/http's
// Server does, until stop is closed; other errors (the listener closed,
// its deadline passed) are returned.
func Accept(ln net.Listener, stop <-chan struct{}) (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err == nil {
			return c, nil
		}
		if !temporary(err) {
			return nil, err
		}
		if backoff == 0 {
			backoff = 5 * time.Millisecond
		} else {
			backoff = min(2*backoff, time.Second)
		}
		select {
		case <-stop:
			return nil, err
		case <-time.After(backoff):
		}
	}
}

func temporary(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return false
	}
	var ne interface{ Temporary() bool } // deprecated in net.Error, but what net/http's Server still asks
	return errors.As(err, &ne) && ne.Temporary()
}
