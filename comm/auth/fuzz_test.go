package auth

import (
	"bytes"
	"io"
	"testing"
)

// peerStream is one side's view of a connection: reads come from the
// fuzzer's bytes, writes are swallowed.
type peerStream struct{ r io.Reader }

func (p peerStream) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p peerStream) Write(b []byte) (int, error) { return len(b), nil }

// FuzzAuthenticate feeds Authenticate the peer's side of the exchange
// (preamble, then the MAC). Without a secret only a well-formed preamble
// passes; with one, nothing the fuzzer writes can pass, since the MAC
// covers this side's fresh nonce.
func FuzzAuthenticate(f *testing.F) {
	valid := func(withSecret byte) []byte {
		return append([]byte{'S', 'T', 'R', 'A', version, withSecret}, bytes.Repeat([]byte{7}, 16)...)
	}
	f.Add(valid(0), false, false)
	f.Add(valid(0), false, true)
	f.Add(append(valid(1), make([]byte, macLen)...), true, true)
	f.Add(append(valid(1), make([]byte, macLen)...), true, false)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), false, true)
	f.Add(valid(1)[:10], true, false)
	f.Fuzz(func(t *testing.T, data []byte, secret, server bool) {
		var s Security
		if secret {
			s.Secret = []byte("fuzz secret")
		}
		err := s.Authenticate(peerStream{bytes.NewReader(data)}, server, []byte("ctx"))
		if err != nil {
			return
		}
		if secret {
			t.Fatalf("a peer without the secret was accepted: %x", data)
		}
		if len(data) < preambleLen || !bytes.Equal(data[:4], magic[:]) || data[4] != version || data[5] != 0 {
			t.Fatalf("malformed preamble accepted: %x", data)
		}
	})
}
