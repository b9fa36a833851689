package importer

import "io"

// readahead decompresses (or reads) in its own goroutine, a few chunks
// ahead of the parser, so decompression and parsing use both cores.
type readahead struct {
	ch   chan chunk
	free chan []byte
	done chan struct{}
	cur  []byte // unread part of full
	full []byte // the buffer cur points into
	err  error
}

type chunk struct {
	b   []byte
	err error
}

const (
	raChunk = 1 << 20
	raDepth = 4
)

func newReadahead(r io.Reader) *readahead {
	ra := &readahead{ch: make(chan chunk, raDepth), free: make(chan []byte, raDepth+2), done: make(chan struct{})}
	for i := 0; i < raDepth+2; i++ {
		ra.free <- make([]byte, raChunk)
	}
	go func() {
		defer close(ra.ch)
		for {
			var buf []byte
			select {
			case buf = <-ra.free:
			case <-ra.done:
				return
			}
			// Fill buf; keep the reader's own error (a truncated gzip
			// stream must stay io.ErrUnexpectedEOF, not become io.EOF).
			n := 0
			var err error
			for n < len(buf) && err == nil {
				var k int
				k, err = r.Read(buf[n:])
				n += k
			}
			select {
			case ra.ch <- chunk{buf[:n], err}:
			case <-ra.done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ra
}

func (ra *readahead) Read(p []byte) (int, error) {
	for len(ra.cur) == 0 {
		if ra.err != nil {
			return 0, ra.err
		}
		c, ok := <-ra.ch
		if !ok {
			return 0, io.EOF
		}
		ra.cur, ra.full, ra.err = c.b, c.b[:cap(c.b)], c.err
	}
	n := copy(p, ra.cur)
	ra.cur = ra.cur[n:]
	if len(ra.cur) == 0 {
		// Hand the whole buffer back for reuse.
		ra.free <- ra.full
		ra.full = nil
	}
	return n, nil
}

// Close stops the goroutine; the underlying reader is closed by its owner
// afterwards.
func (ra *readahead) Close() {
	close(ra.done)
	for range ra.ch {
	}
}
