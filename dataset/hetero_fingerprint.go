package dataset

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
)

// HeteroFingerprintVersion is the version of Hetero.Fingerprint's
// definition; it is part of the value.
const HeteroFingerprintVersion = 1

// Fingerprint identifies a typed dataset's content: type and relation
// names, node counts, every relation's edges and weights, the features,
// the labels and the splits (a SHA-256 over them, the first 128 bits in
// hex after "h1:"). A saved typed model records its training dataset's
// so that 'strata evaluate' can tell the same data from other data. It
// reads every array, so it costs a pass over the dataset. A nil dataset
// gives "".
func (h *Hetero) Fingerprint() string {
	if h == nil {
		return ""
	}
	w := &fpWriter{h: sha256.New()}
	w.str(fmt.Sprintf("strata-hetero-fingerprint v%d", HeteroFingerprintVersion))
	w.u64(uint64(len(h.NodeTypes)))
	for _, nt := range h.NodeTypes {
		w.str(nt.Name)
		w.u64(uint64(nt.NumNodes))
		w.u64(uint64(nt.FeatDim))
		w.f32s(nt.Features)
	}
	w.u64(uint64(len(h.EdgeTypes)))
	for r, et := range h.EdgeTypes {
		w.str(h.EdgeTypeName(r))
		if et.In == nil {
			w.u64(0)
			continue
		}
		w.u64(uint64(len(et.In.Indptr)))
		for _, v := range et.In.Indptr {
			w.u64(uint64(v))
		}
		w.i32s(et.In.Indices)
		w.u64(uint64(len(et.In.Weights)))
		w.f32s(et.In.Weights)
	}
	w.u64(uint64(h.Target))
	w.u64(uint64(h.NumClasses))
	for _, a := range [][]int32{h.Labels, h.Train, h.Val, h.Test} {
		w.i32s(a)
	}
	w.flush(true)
	sum := w.h.Sum(nil)
	return fmt.Sprintf("h%d:%s", HeteroFingerprintVersion, hex.EncodeToString(sum[:16]))
}

// fpWriter feeds little-endian values to a hash through a buffer.
type fpWriter struct {
	h   hash.Hash
	buf []byte
}

func (w *fpWriter) flush(force bool) {
	if force || len(w.buf) >= 1<<16 {
		w.h.Write(w.buf)
		w.buf = w.buf[:0]
	}
}

func (w *fpWriter) u64(v uint64) {
	w.buf = binary.LittleEndian.AppendUint64(w.buf, v)
	w.flush(false)
}

func (w *fpWriter) str(s string) {
	w.u64(uint64(len(s)))
	w.buf = append(w.buf, s...)
	w.flush(false)
}

func (w *fpWriter) f32s(v []float32) {
	w.u64(uint64(len(v)))
	for _, x := range v {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, math.Float32bits(x))
		w.flush(false)
	}
	w.flush(true)
}

func (w *fpWriter) i32s(v []int32) {
	w.u64(uint64(len(v)))
	for _, x := range v {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(x))
		w.flush(false)
	}
	w.flush(true)
}
