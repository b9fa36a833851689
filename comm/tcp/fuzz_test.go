package tcp

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm"
	"github.com/strata-gnn/strata/tensor/backend"
)

// fuzzConn reads from the fuzzer's bytes and swallows writes.
type fuzzConn struct{ r *bytes.Reader }

func (c fuzzConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c fuzzConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c fuzzConn) Close() error                     { return nil }
func (c fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c fuzzConn) SetWriteDeadline(time.Time) error { return nil }

var fuzzJob = []byte("0123456789abcdef")

// FuzzHello: what a rank accepts as a hello names a higher rank of the
// group, addressed to it, for its job.
func FuzzHello(f *testing.F) {
	f.Add(hello(fuzzJob, 2, 1, kindData), 1, 3)
	f.Add(hello(fuzzJob, 1, 0, kindCtrl), 0, 2)
	f.Add(hello([]byte("another job....."), 1, 0, kindCtrl), 0, 2)
	f.Add(hello(fuzzJob, 0, 1, kindData), 1, 2)
	f.Fuzz(func(t *testing.T, h []byte, rank, n int) {
		n = 2 + n&1023
		rank = rank & 1023 % n
		from, kind, err := parseHello(h, fuzzJob, rank, n)
		// Accepted: the first 29 bytes are exactly that hello (the rest is padding).
		if err == nil && (from <= rank || from >= n || kind > kindCtrl || !bytes.Equal(h[:29], hello(fuzzJob, from, rank, kind)[:29])) {
			t.Fatalf("accepted hello %x as from rank %d (kind %d) at rank %d of %d", h, from, kind, rank, n)
		}
	})
}

// FuzzCtrl feeds a rank's control-connection reader a byte stream from
// its peer (status requests and replies, aborts, close).
func FuzzCtrl(f *testing.F) {
	f.Add(ctrlFrame(ctStatusReq, 1, 0, nil))
	f.Add(bytes.Join([][]byte{ctrlFrame(ctStatusRep, 1, 7, nil), ctrlFrame(ctClose, 0, 0, nil)}, nil))
	f.Add(ctrlFrame(ctAbort, 3, 0, encodeAbort([]int{1}, "comm tcp rank 1: all_reduce #3 failed")))
	f.Add(ctrlFrame(ctAbort, 3, 0, []byte{0, 0, 0, 9, 1}))
	f.Add(ctrlFrame(ctAbort, 3, 0, encodeAbort([]int{9}, "a rank that is not in the group")))
	f.Add(append(ctrlFrame(9, 0, 0, []byte("x")), 'S', 'T', 'R'))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := &transport{rank: 0, n: 2, peers: make([]*peer, 2), aborted: make(chan struct{}), status: map[uint64]chan statusRep{}}
		p := &peer{rank: 1, ctrl: fuzzConn{bytes.NewReader(data)}}
		tr.peers[1] = p
		ch := make(chan statusRep, 4)
		tr.status[1] = ch
		tr.readers.Add(1)
		tr.readCtrl(p)
		if p.goneReason() == "" {
			t.Fatal("the reader returned without saying why the peer is gone")
		}
		if ae, ok := tr.abortErr().(*comm.AbortError); ok {
			for _, r := range ae.Missing {
				if r < 0 || r >= tr.n {
					t.Fatalf("abort names rank %d of %d", r, tr.n)
				}
			}
		}
	})
}

// FuzzDataHeader: a data frame's header is accepted only when it matches
// the receiver's operation, count, frame index and length.
func FuzzDataHeader(f *testing.F) {
	c := &comm.Call{Op: comm.OpAllReduce, Seq: 5, DType: backend.Float32, Red: comm.Sum, Send: make([]byte, 400), Recv: make([]byte, 400)}
	f.Add(dataHeader(c, 2, 128))
	c2 := *c
	c2.Recv = make([]byte, 404)
	f.Add(dataHeader(&c2, 2, 128))
	f.Fuzz(func(t *testing.T, h []byte) {
		if len(h) != dataHdrLen {
			return
		}
		if checkHeader(h, c, 2, 128, 0, 1) == nil && !bytes.Equal(h[:4], dataMagic[:]) {
			t.Fatalf("accepted header %x", h)
		}
		if checkHeader(h, c, 2, 128, 0, 1) == nil && int64(binary.BigEndian.Uint64(h[24:])) != c.Count() {
			t.Fatalf("accepted header %x with another count", h)
		}
	})
}
