package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/strata-gnn/strata/comm/auth"
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

// preamble is a valid auth preamble without a secret.
func preamble() []byte {
	return append([]byte{'S', 'T', 'R', 'A', 1, 0}, make([]byte, 16)...)
}

// frame encodes a store frame.
func frame(parts ...[]byte) []byte {
	var b bytes.Buffer
	writeFrame(&b, parts...)
	return b.Bytes()
}

func request(op byte, ms uint32, key string, val []byte) []byte {
	h := make([]byte, 7)
	h[0] = op
	binary.BigEndian.PutUint32(h[1:], ms)
	binary.BigEndian.PutUint16(h[5:], uint16(len(key)))
	return frame(h, []byte(key), val)
}

func helloFrame(rank, world int) []byte {
	v := binary.BigEndian.AppendUint32(nil, uint32(rank))
	return request(opHello, 0, "", binary.BigEndian.AppendUint32(v, uint32(world)))
}

// FuzzStoreServer feeds the store's connection handler a byte stream: the
// peer's auth preamble, then request frames. The store's state is closed,
// so waits (Get of an absent key, Barrier) return at once.
func FuzzStoreServer(f *testing.F) {
	delta := binary.BigEndian.AppendUint64(nil, 5)
	for _, s := range [][]byte{
		preamble(),
		append(preamble(), helloFrame(1, 2)...),
		bytes.Join([][]byte{preamble(), helloFrame(0, 2), request(opSet, 1000, "addr/0", []byte("127.0.0.1:5")),
			request(opGet, 1000, "addr/0", nil), request(opAdd, 1000, "n", delta), request(opBarrier, 1000, "join#1", nil)}, nil),
		bytes.Join([][]byte{preamble(), helloFrame(1, 2), request(9, 0, "x", nil)}, nil),
		bytes.Join([][]byte{preamble(), helloFrame(5, 2)}, nil),
		bytes.Join([][]byte{preamble(), helloFrame(0, 3)}, nil),
		bytes.Join([][]byte{preamble(), {0, 0, 0, 3, opSet, 0, 0}}, nil),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		srv := &Server{s: newState(2), sec: auth.Security{}, quit: make(chan struct{}), pending: auth.NewLimiter(1),
			conns: map[net.Conn]bool{}, joined: make([]bool, 2)}
		srv.s.close()
		srv.handle(fuzzConn{bytes.NewReader(data)}, func() {})
	})
}

// FuzzStoreClient answers a client's requests with the fuzzer's bytes.
func FuzzStoreClient(f *testing.F) {
	ok := frame([]byte{stOK})
	for _, s := range [][]byte{
		bytes.Join([][]byte{ok, frame([]byte{stOK}, []byte("v")), frame([]byte{stOK}, binary.BigEndian.AppendUint64(nil, 7)), ok}, nil),
		bytes.Join([][]byte{ok, frame([]byte{stTimeout}), frame([]byte{stError}, []byte("no")), frame([]byte{stTimeout}, []byte{0, 0, 0, 1})}, nil),
		frame([]byte{stTimeout}, []byte{0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 2}),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := fuzzConn{bytes.NewReader(data)}
		cl := &client{rank: 0, n: 2, addr: "fuzz", def: time.Second, c: c, br: bufio.NewReader(c), count: map[string]int{}}
		ctx := context.Background()
		cl.Set(ctx, "k", []byte("v"))
		cl.Get(ctx, "k")
		cl.Add(ctx, "n", 1)
		cl.Barrier(ctx, "b")
	})
}

// FuzzReadFrame: a frame is refused over its limit, and otherwise is
// exactly the bytes its length announces.
func FuzzReadFrame(f *testing.F) {
	f.Add(request(opSet, 10, "key", []byte("value")), 64)
	f.Add([]byte{0, 1, 0, 0, 1, 2, 3}, 1<<20)
	f.Add([]byte{0, 0, 0, 0}, 8)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		max = max & (1<<21 - 1)
		b, err := readFrame(bytes.NewReader(data), max)
		if err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(data))
		if len(b) != n || n > max || !bytes.Equal(b, data[4:4+n]) {
			t.Fatalf("frame of %d bytes read as %d bytes (limit %d)", n, len(b), max)
		}
		parseRequest(b)
	})
}
