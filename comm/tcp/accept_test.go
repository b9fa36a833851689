package tcp

import (
	"context"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// flaky fails its first accepts with EMFILE, as a process out of file
// descriptors does.
type flaky struct {
	net.Listener
	fails *atomic.Int32
}

func (l flaky) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptRetriesTemporaryErrors: every rank's listener fails a few
// accepts with EMFILE; the group still connects and works.
func TestAcceptRetriesTemporaryErrors(t *testing.T) {
	defer func(l func(string, string) (net.Listener, error)) { listen = l }(listen)
	listen = func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		f := new(atomic.Int32)
		f.Store(3)
		return flaky{ln, f}, nil
	}
	cs, err := NewLocal(3, Options{Options: comm.Options{Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	errs := make(chan error, 3)
	for _, c := range cs {
		go func() { errs <- c.AllReduce(context.Background(), cpu.WrapF32(make([]float32, 100)), comm.Sum) }()
	}
	for range cs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
