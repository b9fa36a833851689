package serve

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/serve/servepb"
)

// relayCodec is the relay's codec for one upstream Sample stream: the
// proto codec, except that a Batch's tensors are left in gRPC's receive
// buffers (decodeBatchSegments), which the codec keeps a reference on,
// instead of copied out of them by proto.Unmarshal: the relay copies the
// data once, from those buffers into the ring slot (a 56 MiB batch
// copied into a contiguous buffer first took as long as the copy into
// the slot). take hands the buffers of the batch just received to the
// stream's receiver, which frees them once the batch is in the ring.
// Recv calls Unmarshal on the receiving goroutine, one batch at a time.
type relayCodec struct {
	proto encoding.CodecV2
	last  *servepb.Batch
	in    *relayIn
}

func newRelayCodec() *relayCodec { return &relayCodec{proto: encoding.GetCodecV2("proto")} }

func (c *relayCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c *relayCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*servepb.Batch)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	segs := make([][]byte, len(data))
	for i, b := range data {
		segs[i] = b.ReadOnlyData()
	}
	pieces, err := decodeBatchSegments(segs, m)
	if err != nil {
		return err
	}
	data.Ref() // gRPC frees its own reference when this returns
	c.in.free()
	c.last, c.in = m, &relayIn{data: pieces, buf: data}
	return nil
}

// take returns the tensor data of m, the batch Recv just returned (nil
// if it was not decoded here); the caller frees it.
func (c *relayCodec) take(m *servepb.Batch) *relayIn {
	if m == nil || m != c.last {
		return nil
	}
	in := c.in
	c.last, c.in = nil, nil
	return in
}

func (*relayCodec) Name() string { return "proto" }

// batchTensorFields are the Batch fields that hold a Tensor.
var batchTensorFields = map[protowire.Number]func(*servepb.Batch) **servepb.Tensor{
	3:  func(m *servepb.Batch) **servepb.Tensor { return &m.NId },
	4:  func(m *servepb.Batch) **servepb.Tensor { return &m.EdgeIndex },
	8:  func(m *servepb.Batch) **servepb.Tensor { return &m.InputId },
	9:  func(m *servepb.Batch) **servepb.Tensor { return &m.X },
	10: func(m *servepb.Batch) **servepb.Tensor { return &m.Y },
	13: func(m *servepb.Batch) **servepb.Tensor { return &m.EdgeLabelIndex },
}

// decodeBatchAliased is proto.Unmarshal(b, m), except that the data of
// the batch's own tensors (n_id, edge_index, input_id, x, y,
// edge_label_index) are slices of b. The other fields go through
// proto.Unmarshal; a message that repeats a tensor field (proto would
// merge the two) goes through it whole.
func decodeBatchAliased(b []byte, m *servepb.Batch) error {
	proto.Reset(m)
	var rest []byte
	seen := map[protowire.Number]bool{}
	for p := b; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return fmt.Errorf("serve: batch message: at byte %d: %w", len(b)-len(p), protowire.ParseError(n))
		}
		k := protowire.ConsumeFieldValue(num, typ, p[n:])
		if k < 0 {
			return fmt.Errorf("serve: batch message: field %d at byte %d: %w", num, len(b)-len(p), protowire.ParseError(k))
		}
		field := p[:n+k]
		p = p[n+k:]
		at, ok := batchTensorFields[num]
		if !ok || typ != protowire.BytesType {
			rest = append(rest, field...)
			continue
		}
		if seen[num] {
			return proto.Unmarshal(b, m)
		}
		seen[num] = true
		v, _ := protowire.ConsumeBytes(field[n:])
		t, err := decodeTensorAliased(v)
		if err != nil {
			return fmt.Errorf("serve: batch message: field %d: %w", num, err)
		}
		*at(m) = t
	}
	return proto.UnmarshalOptions{Merge: true}.Unmarshal(rest, m)
}

// decodeTensorAliased is proto.Unmarshal of a Tensor with its data a
// slice of b.
func decodeTensorAliased(b []byte) (*servepb.Tensor, error) {
	t := &servepb.Tensor{}
	var rest, data []byte
	for p := b; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		k := protowire.ConsumeFieldValue(num, typ, p[n:])
		if k < 0 {
			return nil, protowire.ParseError(k)
		}
		if num == 3 && typ == protowire.BytesType {
			data, _ = protowire.ConsumeBytes(p[n:]) // the last one wins, as in proto
		} else {
			rest = append(rest, p[:n+k]...)
		}
		p = p[n+k:]
	}
	if err := proto.Unmarshal(rest, t); err != nil {
		return nil, err
	}
	t.Data = data
	return t, nil
}

// relayIn is what the relay keeps of a received batch beyond its
// message: each tensor's data as pieces of gRPC's receive buffers (a
// reference held on them until free), so that the data is copied once,
// from those buffers into the ring slot.
type relayIn struct {
	data map[protowire.Number][][]byte
	buf  mem.BufferSlice // nil: data lies in the codec's own buffers
}

// free drops the reference on gRPC's buffers.
func (in *relayIn) free() {
	if in != nil && in.buf != nil {
		in.buf.Free()
		in.buf = nil
	}
}

// bytes returns field num's tensor data in one slice (a copy if it is in
// pieces): for a batch sent on inline.
func (in *relayIn) bytes(num protowire.Number) []byte {
	p := in.data[num]
	if len(p) == 1 {
		return p[0]
	}
	var b []byte
	for _, s := range p {
		b = append(b, s...)
	}
	return b
}

// size is the byte count of field num's tensor data.
func (in *relayIn) size(num protowire.Number) int64 {
	var n int64
	for _, s := range in.data[num] {
		n += int64(len(s))
	}
	return n
}

// segments is a message received as pieces (gRPC's 16 KiB frames),
// read at logical offsets [0, n).
type segments struct {
	segs   [][]byte
	starts []int // logical offset of each piece
	n      int
}

func newSegments(segs [][]byte) *segments {
	s := &segments{starts: make([]int, 0, len(segs))}
	for _, b := range segs {
		if len(b) == 0 {
			continue
		}
		s.segs = append(s.segs, b)
		s.starts = append(s.starts, s.n)
		s.n += len(b)
	}
	return s
}

// find returns the piece that holds offset off (< n).
func (s *segments) find(off int) int {
	return sort.Search(len(s.starts), func(i int) bool { return s.starts[i] > off }) - 1
}

// pieces returns [lo, hi) as slices of the pieces (no copy).
func (s *segments) pieces(lo, hi int) [][]byte {
	if lo >= hi {
		return nil
	}
	var out [][]byte
	for i := s.find(lo); lo < hi; i++ {
		b := s.segs[i][lo-s.starts[i]:]
		b = b[:min(len(b), hi-lo)]
		out = append(out, b)
		lo += len(b)
	}
	return out
}

// window returns [lo, hi) in one slice: the piece itself when it holds
// the range, else a copy.
func (s *segments) window(lo, hi int) []byte {
	p := s.pieces(lo, hi)
	switch len(p) {
	case 0:
		return nil
	case 1:
		return p[0]
	}
	b := make([]byte, 0, hi-lo)
	for _, q := range p {
		b = append(b, q...)
	}
	return b
}

// errGroupField sends a message with a group field (proto2's, never
// sent by a server) through the contiguous path.
var errGroupField = errors.New("group field")

// fields walks the fields of the message in [lo, hi): field number, wire
// type, where the field starts, where its value starts and where it ends.
// Tags and lengths are at most 10 bytes each, so a field's head is read
// from a window of 20 bytes.
func (s *segments) fields(lo, hi int, f func(num protowire.Number, typ protowire.Type, start, value, end int) error) error {
	for p := lo; p < hi; {
		w := s.window(p, min(p+20, hi))
		num, typ, n := protowire.ConsumeTag(w)
		if n < 0 {
			return fmt.Errorf("at byte %d: %w", p, protowire.ParseError(n))
		}
		var value, end int
		switch typ {
		case protowire.BytesType:
			l, k := protowire.ConsumeVarint(w[n:])
			if k < 0 {
				return fmt.Errorf("field %d at byte %d: %w", num, p, protowire.ParseError(k))
			}
			value = p + n + k
			if l > uint64(hi-value) {
				return fmt.Errorf("field %d at byte %d: %d bytes, past the end (%d)", num, p, l, hi)
			}
			end = value + int(l)
		case protowire.StartGroupType:
			return errGroupField
		default:
			k := protowire.ConsumeFieldValue(num, typ, w[n:])
			if k < 0 {
				return fmt.Errorf("field %d at byte %d: %w", num, p, protowire.ParseError(k))
			}
			value, end = p+n, p+n+k
		}
		if err := f(num, typ, p, value, end); err != nil {
			return err
		}
		p = end
	}
	return nil
}

// decodeBatchSegments is proto.Unmarshal of a message received in
// pieces, except that the data of the batch's own tensors is left in the
// pieces (in.data, by field number; the tensors' Data stay nil). A
// message that repeats a tensor field (proto merges the two) or holds a
// group is copied whole and decoded by decodeBatchAliased.
func decodeBatchSegments(segs [][]byte, m *servepb.Batch) (map[protowire.Number][][]byte, error) {
	s := newSegments(segs)
	proto.Reset(m)
	var rest []byte
	data := map[protowire.Number][][]byte{}
	err := s.fields(0, s.n, func(num protowire.Number, typ protowire.Type, start, value, end int) error {
		at, ok := batchTensorFields[num]
		if !ok || typ != protowire.BytesType {
			rest = append(rest, s.window(start, end)...)
			return nil
		}
		if _, seen := data[num]; seen {
			return errGroupField // merged by proto: the contiguous path
		}
		t := &servepb.Tensor{}
		var trest []byte
		dlo, dhi := 0, 0
		err := s.fields(value, end, func(num protowire.Number, typ protowire.Type, start, value, end int) error {
			if num == 3 && typ == protowire.BytesType {
				dlo, dhi = value, end // the last one wins, as in proto
			} else {
				trest = append(trest, s.window(start, end)...)
			}
			return nil
		})
		if err == errGroupField {
			return err
		}
		if err == nil {
			err = proto.Unmarshal(trest, t)
		}
		if err != nil {
			return fmt.Errorf("serve: batch message: field %d: %w", num, err)
		}
		*at(m) = t
		data[num] = s.pieces(dlo, dhi)
		return nil
	})
	if err == errGroupField {
		b := s.window(0, s.n)
		if s.n > 0 && len(s.segs) == 1 {
			b = slices.Clone(b) // not gRPC's buffer: the caller frees that
		}
		if err := decodeBatchAliased(b, m); err != nil {
			return nil, err
		}
		data = map[protowire.Number][][]byte{}
		for num, at := range batchTensorFields {
			if t := *at(m); t != nil {
				data[num] = [][]byte{t.Data}
				t.Data = nil
			}
		}
		return data, nil
	}
	if err != nil {
		if !strings.HasPrefix(err.Error(), "serve:") {
			err = fmt.Errorf("serve: batch message: %w", err)
		}
		return nil, err
	}
	return data, proto.UnmarshalOptions{Merge: true}.Unmarshal(rest, m)
}
