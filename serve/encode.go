package serve

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/serve/shmring"
)

// A batch's tensors are written once, from the sampler's output and the
// dataset straight into where they travel: the bytes of the gRPC message
// (wireWriter) or a ring slot (slotWriter). No intermediate slices, no
// per-row allocations: the feature rows are copied from the (mapped)
// dataset into the destination.

// tensorDst receives a batch's tensors. The same sequence of calls runs
// twice: first to size (sizing true: tensor returns nil and only records
// the tensor), then to write (tensor returns the bytes to fill).
type tensorDst interface {
	tensor(field protowire.Number, name string, dtype uint32, shape ...int64) []byte
}

// putTensors writes b's tensors: n_id, edge_index, input_id (the seed
// positions pos, mapped through posOf when set), x and y when the stream
// sends them. wide writes IDs and labels as int64 (the ring: what PyG
// uses, unless the client asked for narrow IDs), else int32 (the wire);
// half writes x as bfloat16 (feature_dtype, messages only).
func (st *stream) putTensors(d tensorDst, b *PyGBatch, pos []int32, wide, half bool) {
	n, e := int64(len(b.NodeIDs)), int64(len(b.Src))
	idt := uint32(shmring.DTypeInt32)
	if wide {
		idt = shmring.DTypeInt64
	}
	if out := d.tensor(3, "n_id", idt, n); out != nil {
		putIDs(out, b.NodeIDs, wide)
	}
	if out := d.tensor(4, "edge_index", idt, 2, e); out != nil {
		half := len(out) / 2
		putIDs(out[:half], b.Src, wide)
		putIDs(out[half:], b.Dst, wide)
	}
	if out := d.tensor(8, "input_id", shmring.DTypeInt64, int64(len(pos))); out != nil {
		for k, p := range pos {
			if st.posOf != nil {
				p = st.posOf[p]
			}
			binary.LittleEndian.PutUint64(out[8*k:], uint64(p))
		}
	}
	if b.LabelSrc != nil {
		if out := d.tensor(13, "edge_label_index", idt, 2, int64(len(b.LabelSrc))); out != nil {
			half := len(out) / 2
			putIDs(out[:half], b.LabelSrc, wide)
			putIDs(out[half:], b.LabelDst, wide)
		}
	}
	ds := st.s.ds
	if st.withX {
		dt := uint32(shmring.DTypeFloat32)
		if half {
			dt = dtypeBFloat16
		}
		if out := d.tensor(9, "x", dt, n, int64(ds.FeatDim)); out != nil {
			var t []uint16
			if half && littleEndian {
				t = st.s.bf16Rows()
			}
			if t != nil {
				inParallel(len(b.NodeIDs), 2*ds.FeatDim, func(lo, hi int) {
					gatherRowsU16(out[2*lo*ds.FeatDim:2*hi*ds.FeatDim], t, ds.FeatDim, b.NodeIDs[lo:hi])
				})
			} else {
				gatherFeatures(out, ds.Features, ds.FeatDim, b.NodeIDs, half)
			}
		}
	}
	if st.withY {
		if out := d.tensor(10, "y", idt, n); out != nil {
			gatherLabelsInto(out, ds.Labels, b.NodeIDs, wide)
		}
	}
}

// putIDs writes v as little-endian int32s, or widened to int64s.
func putIDs(dst []byte, v []int32, wide bool) {
	if !wide {
		if littleEndian && len(v) > 0 {
			copy(dst, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)))
			return
		}
		for i, x := range v {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(x))
		}
		return
	}
	if littleEndian && len(v) > 0 {
		out := unsafe.Slice((*int64)(unsafe.Pointer(&dst[0])), len(v))
		for i, x := range v {
			out[i] = int64(x)
		}
		return
	}
	for i, x := range v {
		binary.LittleEndian.PutUint64(dst[8*i:], uint64(int64(x)))
	}
}

// parallelChunkBytes is the least a goroutine of inParallel copies: below
// it the goroutine costs more than the copy.
const parallelChunkBytes = 4 << 20

// inParallel runs f over [0, n) in contiguous chunks of at least
// parallelChunkBytes (rows of rowBytes), one goroutine each, up to
// GOMAXPROCS of them: the feature gather of a large batch is a copy of
// tens to hundreds of MB, which one core does at a fraction of the
// memory's bandwidth. Each chunk writes its own rows, so the result does
// not depend on the split.
func inParallel(n, rowBytes int, f func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), n*max(rowBytes, 1)/parallelChunkBytes)
	if parts <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := n*p/parts, n*(p+1)/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

// gatherFeatures writes rows ids of x into dst, as float32s or rounded to
// bfloat16 (half), in parallel for a large batch.
func gatherFeatures(dst []byte, x []float32, dim int, ids []graph.NodeID, half bool) {
	w := 4
	if half {
		w = 2
	}
	inParallel(len(ids), w*dim, func(lo, hi int) {
		part := dst[w*lo*dim : w*hi*dim]
		if half {
			gatherRowsBF16(part, x, dim, ids[lo:hi])
		} else {
			gatherRowsInto(part, x, dim, ids[lo:hi])
		}
	})
}

// gatherRowsInto copies rows ids of the row-major [*, dim] matrix x into
// dst (len(ids)*dim float32s, little-endian).
func gatherRowsInto(dst []byte, x []float32, dim int, ids []graph.NodeID) {
	if littleEndian && len(dst) > 0 {
		out := unsafe.Slice((*float32)(unsafe.Pointer(&dst[0])), dim*len(ids))
		for i, v := range ids {
			copy(out[i*dim:(i+1)*dim], x[int(v)*dim:(int(v)+1)*dim])
		}
		return
	}
	for i, v := range ids {
		for j, f := range x[int(v)*dim : (int(v)+1)*dim] {
			binary.LittleEndian.PutUint32(dst[4*(i*dim+j):], math.Float32bits(f))
		}
	}
}

// dtypeBFloat16 is servepb.DType_DTYPE_BFLOAT16 (messages only: ring
// slots never hold it).
const dtypeBFloat16 = 4

// bf16 rounds f to bfloat16 (nearest, ties to even; NaN stays a quiet
// NaN): the upper half of its bits.
func bf16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// gatherRowsBF16 writes rows ids of x into dst as little-endian bfloat16s.
func gatherRowsBF16(dst []byte, x []float32, dim int, ids []graph.NodeID) {
	if littleEndian && len(dst) > 0 {
		out := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[0])), dim*len(ids))
		for i, v := range ids {
			roundBF16(out[i*dim:(i+1)*dim], x[int(v)*dim:(int(v)+1)*dim])
		}
		return
	}
	k := 0
	for _, v := range ids {
		for _, f := range x[int(v)*dim : (int(v)+1)*dim] {
			binary.LittleEndian.PutUint16(dst[k:], bf16(f))
			k += 2
		}
	}
}

// gatherLabelsInto writes labels[ids] as int32s, or int64s when wide.
func gatherLabelsInto(dst []byte, labels []int32, ids []graph.NodeID, wide bool) {
	for i, v := range ids {
		if wide {
			binary.LittleEndian.PutUint64(dst[8*i:], uint64(int64(labels[v])))
		} else {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(labels[v]))
		}
	}
}

// wireWriter encodes a servepb.Batch by hand into one pooled buffer, the
// tensors' data written in place (tensor returns their bytes).
type wireWriter struct {
	sizing bool
	n      int    // sizing: bytes so far
	buf    []byte // writing: the message so far, cap its full size
	// encodeAt: where the timing's encode_ns lies in buf (0: not written)
	encodeAt int
}

func (w *wireWriter) varint(f protowire.Number, v uint64) {
	if w.sizing {
		w.n += protowire.SizeTag(f) + protowire.SizeVarint(v)
		return
	}
	w.buf = protowire.AppendTag(w.buf, f, protowire.VarintType)
	w.buf = protowire.AppendVarint(w.buf, v)
}

func packedSize(v []int64) int {
	n := 0
	for _, x := range v {
		n += protowire.SizeVarint(uint64(x))
	}
	return n
}

func (w *wireWriter) packed(f protowire.Number, v []int64) {
	if len(v) == 0 {
		return
	}
	ps := packedSize(v)
	if w.sizing {
		w.n += protowire.SizeTag(f) + protowire.SizeBytes(ps)
		return
	}
	w.buf = protowire.AppendTag(w.buf, f, protowire.BytesType)
	w.buf = protowire.AppendVarint(w.buf, uint64(ps))
	for _, x := range v {
		w.buf = protowire.AppendVarint(w.buf, uint64(x))
	}
}

func (w *wireWriter) bytes(f protowire.Number, b []byte) {
	if len(b) == 0 {
		return
	}
	if w.sizing {
		w.n += protowire.SizeTag(f) + protowire.SizeBytes(len(b))
		return
	}
	w.buf = protowire.AppendTag(w.buf, f, protowire.BytesType)
	w.buf = protowire.AppendBytes(w.buf, b)
}

// tensor writes a strata.v1.Tensor field and returns its data bytes.
func (w *wireWriter) tensor(f protowire.Number, _ string, dtype uint32, shape ...int64) []byte {
	n := shmring.ItemSize(dtype)
	if dtype == dtypeBFloat16 {
		n = 2
	}
	for _, d := range shape {
		n *= d
	}
	inner := protowire.SizeTag(1) + protowire.SizeVarint(uint64(dtype))
	if len(shape) > 0 {
		inner += protowire.SizeTag(2) + protowire.SizeBytes(packedSize(shape))
	}
	if n > 0 {
		inner += protowire.SizeTag(3) + protowire.SizeBytes(int(n))
	}
	if w.sizing {
		w.n += protowire.SizeTag(f) + protowire.SizeBytes(inner)
		return nil
	}
	w.buf = protowire.AppendTag(w.buf, f, protowire.BytesType)
	w.buf = protowire.AppendVarint(w.buf, uint64(inner))
	w.varint(1, uint64(dtype))
	w.packed(2, shape)
	if n == 0 {
		return w.buf[len(w.buf):]
	}
	w.buf = protowire.AppendTag(w.buf, 3, protowire.BytesType)
	w.buf = protowire.AppendVarint(w.buf, uint64(n))
	at := len(w.buf)
	w.buf = w.buf[:at+int(n)] // within capacity: sized before
	return w.buf[at:]
}

// writeBatch runs the sequence of a Batch message's fields on w (both
// passes): the header fields, then the tensors when inline, or the ring
// slot (shm) otherwise, and the note.
func (st *stream) writeBatch(w *wireWriter, b *PyGBatch, i int, pos []int32, slot []byte, note string, tm batchTiming) {
	w.varint(1, uint64(i))
	w.varint(2, uint64(st.nb))
	w.packed(5, b.NumSampledNodes)
	w.packed(6, b.NumSampledEdges)
	w.varint(7, uint64(b.BatchSize))
	if slot == nil {
		st.putTensors(w, b, pos, false, st.bf16)
	} else {
		w.bytes(11, slot)
	}
	w.bytes(12, []byte(note))
	w.timing(16, tm)
}

// batchTiming is a batch's BatchTiming (see the proto file).
type batchTiming struct{ sample, encode, slotWait time.Duration }

// timingBytes is the size of an encoded BatchTiming field: a two-byte
// tag (field 16), a one-byte length, three fixed64 fields of one-byte tags.
const timingBytes = 2 + 1 + 3*9

// timing writes the BatchTiming field; encodeAt records where its
// encode_ns lies, for encodeWire to fill in once the message is written.
func (w *wireWriter) timing(f protowire.Number, tm batchTiming) {
	if w.sizing {
		w.n += timingBytes
		return
	}
	w.buf = protowire.AppendTag(w.buf, f, protowire.BytesType)
	w.buf = protowire.AppendVarint(w.buf, 3*9)
	for k, d := range []time.Duration{tm.sample, tm.encode, tm.slotWait} {
		w.buf = protowire.AppendTag(w.buf, protowire.Number(k+1), protowire.Fixed64Type)
		if k == 1 {
			w.encodeAt = len(w.buf)
		}
		w.buf = protowire.AppendFixed64(w.buf, uint64(max(d, 0)))
	}
}

// wireMsg is a Batch message encoded by hand; the server's codec sends
// its bytes as they are, and gRPC returns the buffer to wirePool once
// written.
type wireMsg struct {
	buf *[]byte
	pb  proto.Message // or a message the codec marshals (typed batches)
}

// encodeWire returns batch i's message (slot: an encoded ShmSlot for a
// ring batch, nil to put the tensors in the message). The message is
// sized first, and refused over max bytes before any copy. tm goes into
// the message's timing; for an inline batch (slot nil) its encode time is
// this call's.
func (st *stream) encodeWire(b *PyGBatch, i int, pos []int32, slot []byte, note string, max int, tm batchTiming) (*wireMsg, int, error) {
	t0 := time.Now()
	sz := &wireWriter{sizing: true}
	st.writeBatch(sz, b, i, pos, slot, note, tm)
	if sz.n > max {
		return nil, sz.n, reqErr(ErrTooLarge, "batch_size", -1, "batch %d is a %d-byte message, over this server's limit of %d (--max-message-mb): use a smaller batch_size or fanouts, or gather the features on the client (strata_pyg does when it has them)",
			i, sz.n, max)
	}
	buf := wirePool.Get(sz.n)
	w := &wireWriter{buf: (*buf)[:0]}
	st.writeBatch(w, b, i, pos, slot, note, tm)
	if len(w.buf) != sz.n {
		wirePool.Put(buf)
		return nil, 0, fmt.Errorf("serve: batch %d: encoded %d bytes, sized %d", i, len(w.buf), sz.n)
	}
	if slot == nil && w.encodeAt > 0 {
		binary.LittleEndian.PutUint64(w.buf[w.encodeAt:], uint64(time.Since(t0)))
	}
	*buf = w.buf
	return &wireMsg{buf: buf}, sz.n, nil
}

// free returns an unsent message's buffer.
func (m *wireMsg) free() {
	if m != nil && m.buf != nil {
		wirePool.Put(m.buf)
		m.buf = nil
	}
}

// bufPool is a mem.BufferPool of message buffers. Batches of a stream
// have similar sizes, so reusing a buffer saves both the allocation and
// the page faults of fresh memory; a buffer too small is dropped.
type bufPool struct{ p sync.Pool }

func (bp *bufPool) Get(n int) *[]byte {
	if v, ok := bp.p.Get().(*[]byte); ok {
		if cap(*v) >= n {
			*v = (*v)[:n]
			return v
		}
	}
	b := make([]byte, n, n+n/8) // headroom: the next batch may be a little larger
	return &b
}

func (bp *bufPool) Put(b *[]byte) { bp.p.Put(b) }

var wirePool = &bufPool{}

// codec is the server's gRPC codec: the proto codec, except that a
// *wireMsg is sent as the bytes it already holds.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2("proto")} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*wireMsg); ok && m.pb != nil {
		return c.proto.Marshal(m.pb)
	}
	if m, ok := v.(*wireMsg); ok {
		buf := m.buf
		m.buf = nil
		return mem.BufferSlice{mem.NewBuffer(buf, wirePool)}, nil
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c codec) Name() string { return "proto" }
