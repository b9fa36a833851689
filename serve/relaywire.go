package serve

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/serve/servepb"
)

// relayCodec is the relay's codec for one upstream Sample stream: the
// proto codec, except that a Batch's tensors are left in the received
// bytes (decodeBatchAliased) instead of copied out of them by
// proto.Unmarshal, and those bytes are one of a few buffers the stream
// reuses: fresh tens of MiB for every batch cost ten times their copy
// (page faults, zeroing, collection). A stream's batches are received in
// order and consumed in order, and batch i is done with before batch
// i+relayBufs is received (one being written to the ring, relayAhead
// waiting, one being received), so buffer i mod relayBufs is free again.
type relayCodec struct {
	proto encoding.CodecV2
	bufs  [relayBufs][]byte
	next  int
}

const relayBufs = relayAhead + 2

func newRelayCodec() *relayCodec { return &relayCodec{proto: encoding.GetCodecV2("proto")} }

func (c *relayCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c *relayCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*servepb.Batch)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	// A copy all the same: gRPC reuses data's buffers once this returns.
	n := data.Len()
	b := c.bufs[c.next]
	if cap(b) < n {
		b = make([]byte, n, n+n/8) // the next batch may be a little larger
	}
	b = b[:n]
	data.CopyTo(b)
	c.bufs[c.next] = b
	c.next = (c.next + 1) % relayBufs
	return decodeBatchAliased(b, m)
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
