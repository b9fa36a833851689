package importer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/klauspost/compress/gzip"

	"github.com/strata-gnn/strata/internal/excerpt"
	"github.com/strata-gnn/strata/internal/progress"
	"github.com/strata-gnn/strata/internal/regfile"
)

// progressMin is the input size from which a progress bar is shown.
const progressMin = 64 << 20

// maxLine bounds one text line; longer lines are an error, not a huge
// buffer.
const maxLine = 4 << 20

// input is an opened (possibly gzip-compressed) file.
type input struct {
	path string
	f    *os.File
	zr   *gzip.Reader
	ra   *readahead
	bar  *progress.Bar
	r    io.Reader // decompressed stream
	// bufSize is the line buffer size for this input (longer lines are
	// still read, see lineReader.next).
	bufSize int
}

// countingReader feeds a progress bar with the raw bytes read.
type countingReader struct {
	r   io.Reader
	bar *progress.Bar
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.bar.Add(int64(n))
	return n, err
}

// openInput opens path, transparently gunzipping names ending in ".gz".
func openInput(path string, quiet bool) (*input, error) {
	f, fi, err := regfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("importer: %w", err)
	}
	in := &input{path: path, f: f, r: f, bufSize: bufSize(fi.Size())}
	if !quiet && fi.Size() >= progressMin {
		in.bar = progress.New(fi.Size(), "reading "+shortName(path))
		in.r = &countingReader{r: f, bar: in.bar}
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bufio.NewReaderSize(in.r, bufSize(fi.Size())))
		if err != nil {
			f.Close()
			return nil, offErr(path, 0, "not a gzip file: %v", err)
		}
		in.zr = zr
		in.r = zr
		// Decompressing ahead pays off for big inputs only; small ones
		// (tests, fuzzing) skip its buffers.
		if fi.Size() >= raMin {
			in.ra = newReadahead(zr)
			in.r = in.ra
		}
		in.bufSize = bufSize(8 * fi.Size())
	}
	return in, nil
}

// raMin is the compressed size from which openInput decompresses ahead.
const raMin = 1 << 20

// bufSize sizes a read buffer for about n bytes of input: 4 KiB to 1 MiB.
func bufSize(n int64) int { return int(min(max(n, 4<<10), 1<<20)) }

func (in *input) Close() error {
	in.bar.Finish()
	if in.ra != nil {
		in.ra.Close()
	}
	if in.zr != nil {
		in.zr.Close()
	}
	return in.f.Close()
}

func shortName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// lineReader yields lines with their 1-based numbers, stripping "\r\n".
type lineReader struct {
	path string
	r    *bufio.Reader
	line int64
}

func newLineReader(in *input) *lineReader {
	return &lineReader{path: in.path, r: bufio.NewReaderSize(in.r, in.bufSize)}
}

// next returns the next line (valid until the following call) or io.EOF.
func (lr *lineReader) next() ([]byte, error) {
	b, err := lr.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// Accumulate a long line up to maxLine.
		long := append([]byte(nil), b...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(long) > maxLine {
				return nil, lineErr(lr.path, lr.line+1, "line longer than %d bytes", maxLine)
			}
			b, err = lr.r.ReadSlice('\n')
			long = append(long, b...)
		}
		b = long
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, lineErr(lr.path, lr.line+1, "read error: %v", err)
	}
	if len(b) == 0 && err != nil {
		return nil, io.EOF
	}
	lr.line++
	b = bytes.TrimSuffix(b, []byte{'\n'})
	b = bytes.TrimSuffix(b, []byte{'\r'})
	return b, nil
}

// parseInt parses a base-10 integer (optional sign) without allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := false
	if b[0] == '-' || b[0] == '+' {
		neg = b[0] == '-'
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var v uint64
	for _, c := range b {
		d := uint64(c) - '0'
		if d > 9 {
			return 0, false
		}
		if v > (math.MaxInt64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// parseFloat32 parses a finite decimal float (as strconv does) without
// copying; NaN, Inf and out-of-range values are rejected.
func parseFloat32(b []byte) (float32, bool) {
	if len(b) == 0 {
		return 0, false
	}
	// The string view does not outlive the call: strconv clones what it
	// keeps in errors, and we drop the error.
	f, err := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 32)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return float32(f), true
}

// quote shows a bad token in an error message: escaped, and at most
// excerpt.Max bytes of it.
func quote(b []byte) string { return excerpt.Quote(b) }
