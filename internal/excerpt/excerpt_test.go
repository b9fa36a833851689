package excerpt

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", `"abc"`},
		{"a\x1b[31mb\x07", `"a\x1b[31mb\a"`},
		{strings.Repeat("9", 40), `"` + strings.Repeat("9", 32) + `"... (40 bytes)`},
		// The cut backs off to a rune start: 31 ASCII bytes then a 3-byte rune.
		{strings.Repeat("a", 31) + "€€", `"` + strings.Repeat("a", 31) + `"... (37 bytes)`},
	} {
		if got := Quote([]byte(c.in)); got != c.want {
			t.Errorf("Quote(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	huge := strings.Repeat("x", 1<<20) + "\x1b"
	if got := String(huge); len(got) > 2*Max+32 || strings.ContainsRune(got, 0x1b) {
		t.Errorf("String of 1 MiB gives %d bytes: %.80s", len(got), got)
	}
}

func TestMessage(t *testing.T) {
	got := Message("bad 'x\x1b' \xff end")
	if want := `bad 'x\x1b' \xff end`; got != want {
		t.Errorf("Message = %q, want %q", got, want)
	}
	long := Message(strings.Repeat("y", 10000) + "\n")
	if len(long) > 4*Max+32 || strings.ContainsRune(long, '\n') || !strings.HasSuffix(long, "(10001 bytes)") {
		t.Errorf("Message of 10001 bytes = %q", long)
	}
}

func TestJSON(t *testing.T) {
	var v struct {
		N int64 `json:"num_nodes"`
	}
	decode := func(s string) (int64, string) {
		return JSON(json.Unmarshal([]byte(s), &v), int64(len(s)))
	}
	off, msg := decode(`{"num_nodes": 1` + strings.Repeat("0", 100000) + `}`)
	if len(msg) > 200 || !strings.Contains(msg, "num_nodes") || !strings.Contains(msg, "(100008 bytes)") {
		t.Errorf("huge number: off %d, %d-byte message %.300s", off, len(msg), msg)
	}
	if off, msg = decode(`{"num_nodes": 12`); off != 16 || !strings.Contains(msg, "truncated") {
		t.Errorf("truncated: off %d, %s", off, msg)
	}
	if off, msg = decode("{\x1b}"); off != 2 || strings.ContainsRune(msg, 0x1b) {
		t.Errorf("control character: off %d, %q", off, msg)
	}
}
