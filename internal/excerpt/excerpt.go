// Package excerpt shows untrusted input in error messages safely: a short,
// escaped excerpt instead of the raw bytes, which may be megabytes long or
// hold terminal control sequences.
package excerpt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Max is the most input bytes an excerpt shows.
const Max = 32

// Quote returns b as a Go-quoted string (control characters and invalid
// UTF-8 escaped) of at most Max input bytes; a longer b is cut at a rune
// boundary and followed by "... (N bytes)".
func Quote(b []byte) string {
	if len(b) <= Max {
		return strconv.Quote(string(b))
	}
	cut := Max
	for cut > Max-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(string(b[:cut])), len(b))
}

// String is Quote for a string.
func String(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	return Quote([]byte(s))
}

// Message makes an error message built by someone else (a parser library,
// which may quote input) safe to print: control characters, other
// non-printing runes and invalid UTF-8 are escaped as in Go literals, and
// the result shows at most 4*Max bytes of the original.
func Message(s string) string {
	const limit = 4 * Max
	tail := ""
	if len(s) > limit {
		cut := limit
		for cut > limit-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s, tail = s[:cut], fmt.Sprintf("... (%d bytes)", len(s))
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r) // 'x' with x escaped
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String() + tail
}

// JSON describes an encoding/json decoding error without echoing the
// input: the byte offset where it is known (-1 otherwise) and a short
// message. A truncated document (io.ErrUnexpectedEOF, or a syntax error
// at the end) is reported at size, the length of the input.
func JSON(err error, size int64) (off int64, msg string) {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return size, fmt.Sprintf("truncated: the JSON ends after %d bytes", size)
	case errors.Is(err, io.EOF):
		return 0, "empty: no JSON value"
	case errors.As(err, &se):
		if se.Offset >= size {
			return size, fmt.Sprintf("truncated: the JSON ends after %d bytes", size)
		}
		return se.Offset, Message(se.Error())
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "(top level)"
		}
		return te.Offset, fmt.Sprintf("field %s: want %s, got %s", Message(field), te.Type, String(te.Value))
	}
	return -1, Message(err.Error())
}
