package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"unicode/utf8"

	"github.com/strata-gnn/strata/internal/regfile"
)

// Magic opens every checkpoint file.
const Magic = "STRATACK"

// Version is the format version this package writes and reads.
const Version = 1

// Bounds on the fields of a file; a reader rejects anything larger before
// allocating.
const (
	MaxMeta    = 64 << 20 // bytes of metadata
	MaxTensors = 1 << 16  // tensors per file
	MaxName    = 1024     // bytes of a tensor name
	// MaxFileSize bounds the whole file (it is read into memory).
	MaxFileSize = 16 << 30
)

const (
	headerSize  = 24
	trailerSize = 4
	dtypeF32    = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is matched (errors.Is) by every *FormatError.
var ErrCorrupt = errors.New("checkpoint: corrupt or unsupported file")

// FormatError reports a malformed checkpoint: the file, the byte offset of
// the offending field and what was wrong with it.
type FormatError struct {
	Path   string
	Offset int64
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("checkpoint: %s: at byte %d: %s", e.Path, e.Offset, e.Msg)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *FormatError) Is(target error) bool { return target == ErrCorrupt }

// Tensor is one named float32 array.
type Tensor struct {
	Name string
	Data []float32
}

// File is the content of a checkpoint.
type File struct {
	Meta    []byte // JSON chosen by the caller
	Tensors []Tensor
}

// Tensor returns the tensor called name, or nil.
func (f *File) Tensor(name string) []float32 {
	for i := range f.Tensors {
		if f.Tensors[i].Name == name {
			return f.Tensors[i].Data
		}
	}
	return nil
}

// validate checks what Encode would otherwise write as a file Decode
// rejects.
func (f *File) validate() error {
	if len(f.Meta) > MaxMeta {
		return fmt.Errorf("checkpoint: metadata of %d bytes exceeds %d", len(f.Meta), MaxMeta)
	}
	if len(f.Tensors) > MaxTensors {
		return fmt.Errorf("checkpoint: %d tensors exceed %d", len(f.Tensors), MaxTensors)
	}
	seen := make(map[string]bool, len(f.Tensors))
	for _, t := range f.Tensors {
		if err := checkName(t.Name); err != "" {
			return fmt.Errorf("checkpoint: tensor name %q: %s", t.Name, err)
		}
		if seen[t.Name] {
			return fmt.Errorf("checkpoint: duplicate tensor name %q", t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

func checkName(name string) string {
	switch {
	case len(name) == 0:
		return "empty name"
	case len(name) > MaxName:
		return fmt.Sprintf("name of %d bytes exceeds %d", len(name), MaxName)
	case !utf8.ValidString(name):
		return "name is not valid UTF-8"
	}
	return ""
}

// Encode writes f in the checkpoint format.
func Encode(w io.Writer, f *File) error {
	if err := f.validate(); err != nil {
		return err
	}
	crc := crc32.New(castagnoli)
	bw := &errWriter{w: io.MultiWriter(w, crc)}
	var hdr [headerSize]byte
	copy(hdr[:8], Magic)
	binary.LittleEndian.PutUint32(hdr[8:], Version)
	binary.LittleEndian.PutUint32(hdr[12:], 0)
	binary.LittleEndian.PutUint32(hdr[16:], uint32(len(f.Meta)))
	binary.LittleEndian.PutUint32(hdr[20:], uint32(len(f.Tensors)))
	bw.write(hdr[:])
	bw.write(f.Meta)
	buf := make([]byte, 0, 64<<10)
	for _, t := range f.Tensors {
		var rec [2]byte
		binary.LittleEndian.PutUint16(rec[:], uint16(len(t.Name)))
		bw.write(rec[:])
		bw.write([]byte(t.Name))
		var dt [9]byte
		dt[0] = dtypeF32
		binary.LittleEndian.PutUint64(dt[1:], uint64(len(t.Data)))
		bw.write(dt[:])
		for i := 0; i < len(t.Data); {
			buf = buf[:0]
			for ; i < len(t.Data) && len(buf)+4 <= cap(buf); i++ {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(t.Data[i]))
			}
			bw.write(buf)
		}
	}
	if bw.err != nil {
		return bw.err
	}
	var sum [trailerSize]byte
	binary.LittleEndian.PutUint32(sum[:], crc.Sum32())
	_, err := w.Write(sum[:])
	return err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) write(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

// Decode parses a checkpoint held in data; path is used in errors only.
func Decode(path string, data []byte) (*File, error) {
	ferr := func(off int, format string, args ...any) error {
		return &FormatError{Path: path, Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) < headerSize+trailerSize {
		return nil, ferr(0, "file of %d bytes is shorter than the %d-byte minimum", len(data), headerSize+trailerSize)
	}
	if string(data[:8]) != Magic {
		return nil, ferr(0, "bad magic %q, want %q", data[:8], Magic)
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != Version {
		return nil, ferr(8, "unsupported format version %d (this build reads version %d)", v, Version)
	}
	body := data[:len(data)-trailerSize]
	want := binary.LittleEndian.Uint32(data[len(body):])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, ferr(len(body), "checksum mismatch: stored %#08x, computed %#08x", want, got)
	}
	if fl := binary.LittleEndian.Uint32(data[12:]); fl != 0 {
		return nil, ferr(12, "unknown flags %#x", fl)
	}
	metaLen := binary.LittleEndian.Uint32(data[16:])
	count := binary.LittleEndian.Uint32(data[20:])
	if metaLen > MaxMeta {
		return nil, ferr(16, "metadata length %d exceeds %d", metaLen, MaxMeta)
	}
	if count > MaxTensors {
		return nil, ferr(20, "tensor count %d exceeds %d", count, MaxTensors)
	}
	off := headerSize
	if int(metaLen) > len(body)-off {
		return nil, ferr(16, "metadata length %d runs past the end (%d bytes left)", metaLen, len(body)-off)
	}
	f := &File{Meta: bytes.Clone(body[off : off+int(metaLen)])}
	off += int(metaLen)
	seen := make(map[string]bool)
	for i := 0; i < int(count); i++ {
		if len(body)-off < 2 {
			return nil, ferr(off, "tensor %d: name length runs past the end", i)
		}
		n := int(binary.LittleEndian.Uint16(body[off:]))
		if n == 0 || n > MaxName {
			return nil, ferr(off, "tensor %d: name length %d not in [1, %d]", i, n, MaxName)
		}
		off += 2
		if len(body)-off < n {
			return nil, ferr(off, "tensor %d: name of %d bytes runs past the end", i, n)
		}
		name := string(body[off : off+n])
		if msg := checkName(name); msg != "" {
			return nil, ferr(off, "tensor %d: %s", i, msg)
		}
		if seen[name] {
			return nil, ferr(off, "tensor %d: duplicate name %q", i, name)
		}
		seen[name] = true
		off += n
		if len(body)-off < 9 {
			return nil, ferr(off, "tensor %q: header runs past the end", name)
		}
		if dt := body[off]; dt != dtypeF32 {
			return nil, ferr(off, "tensor %q: unknown dtype %d", name, dt)
		}
		c := binary.LittleEndian.Uint64(body[off+1:])
		off += 9
		if c > uint64(len(body)-off)/4 {
			return nil, ferr(off-8, "tensor %q: %d elements run past the end (%d bytes left)", name, c, len(body)-off)
		}
		vals := make([]float32, c)
		for j := range vals {
			vals[j] = math.Float32frombits(binary.LittleEndian.Uint32(body[off+4*j:]))
		}
		off += 4 * int(c)
		f.Tensors = append(f.Tensors, Tensor{Name: name, Data: vals})
	}
	if off != len(body) {
		return nil, ferr(off, "%d unexpected bytes after the last tensor", len(body)-off)
	}
	return f, nil
}

// ReadFile reads and validates the checkpoint at path.
func ReadFile(path string) (*File, error) {
	// regfile refuses a FIFO (or other non-regular file) without
	// blocking in open(2), which os.Open would do forever.
	fh, st, err := regfile.Open(path)
	var nr *regfile.NotRegularError
	if errors.As(err, &nr) {
		return nil, &FormatError{Path: path, Msg: nr.Error()}
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if st.Size() > MaxFileSize {
		return nil, &FormatError{Path: path, Msg: fmt.Sprintf("file of %d bytes exceeds %d", st.Size(), int64(MaxFileSize))}
	}
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(fh, data); err != nil {
		return nil, fmt.Errorf("checkpoint: reading %s: %w", path, err)
	}
	// A file that grew after Stat is not the file we sized.
	if n, _ := fh.Read(make([]byte, 1)); n != 0 {
		return nil, &FormatError{Path: path, Offset: st.Size(), Msg: "file grew while being read"}
	}
	return Decode(path, data)
}
