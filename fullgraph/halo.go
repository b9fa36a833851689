package fullgraph

import (
	"github.com/strata-gnn/strata/tensor/backend"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
)

// Halo exchange (Config.Exchange "halo"): each device receives only the
// rows of the other blocks it reads, not whole blocks. Exact, since
// A_ds has no entry in the other rows.

// Which rows a halo set lists.
const (
	haloAll   = iota // every row any of the device's rows reads (Layout.Used)
	haloTrain        // the rows its training nodes read: the last layer in training
)

// haloSet is one way of reading the blocks, as this device sees it.
type haloSet struct {
	rows [][][]int32      // rows[r][s]: the rows of block s device r reads, local to s (r != s)
	to   []backend.Buffer // to[r]: rows[r][rank], gathered from this device's block for r
	from []backend.Buffer // from[s]: rows[rank][s], scattered into block s of the N-row matrix
	back []blockMat       // haloTrain: the transposed blocks restricted to these rows (reduce)
}

func (h *haloSet) free(b backend.Backend) {
	if h == nil {
		return
	}
	for _, x := range h.to {
		b.Free(x)
	}
	for _, x := range h.from {
		b.Free(x)
	}
	for i := range h.back {
		h.back[i].free(b)
	}
}

// n returns how many rows of block s device r reads.
func (h *haloSet) n(r, s int) int { return len(h.rows[r][s]) }

// trainRead returns, for every pair r != s, the rows of block s that
// device r's training nodes read (ascending): the columns of A_rs in the
// rows of training nodes.
func trainRead(lay *Layout, isTrain []bool) [][][]int32 {
	p := lay.P()
	out := make([][][]int32, p)
	for r := 0; r < p; r++ {
		out[r] = make([][]int32, p)
		lo, _ := lay.Range(r)
		for s := 0; s < p; s++ {
			b := &lay.Blocks[r][s]
			if s == r || b.NNZ() == 0 {
				continue
			}
			seen := make([]bool, b.Cols)
			for i := 0; i < b.Rows; i++ {
				if !isTrain[lo+i] {
					continue
				}
				for _, c := range b.Indices[b.Indptr[i]:b.Indptr[i+1]] {
					seen[c] = true
				}
			}
			for c, ok := range seen {
				if ok {
					out[r][s] = append(out[r][s], int32(c))
				}
			}
		}
	}
	return out
}

// trainRows returns b with the entries of the rows of non-training nodes
// removed (isTrain: b's rows).
func trainRows(b *SubBlock, isTrain []bool) *SubBlock {
	out := &SubBlock{Rows: b.Rows, Cols: b.Cols, Indptr: make([]int64, b.Rows+1)}
	for i := 0; i < b.Rows; i++ {
		if isTrain[i] {
			lo, hi := b.Indptr[i], b.Indptr[i+1]
			out.Indices = append(out.Indices, b.Indices[lo:hi]...)
			out.Weights = append(out.Weights, b.Weights[lo:hi]...)
		}
		out.Indptr[i+1] = int64(len(out.Indices))
	}
	return out
}

// initHalo builds the halo sets of Config.Exchange "halo": every row
// read, and (node classification) the rows the training nodes read, with
// their transposed blocks for the last layer's gradient messages.
func (w *worker) initHalo(train []int32) error {
	lay, d := w.lay, w.rank
	sets := [][][][]int32{lay.Used}
	isTrain := make([]bool, lay.N)
	if w.task == nil {
		for _, v := range train {
			isTrain[v] = true
		}
		sets = append(sets, trainRead(lay, isTrain))
	}
	for v, rows := range sets {
		h := &haloSet{rows: rows, to: make([]backend.Buffer, w.p), from: make([]backend.Buffer, w.p)}
		w.halo[v] = h
		var err error
		for r := 0; r < w.p; r++ {
			if r == d {
				continue
			}
			if len(rows[r][d]) > 0 {
				if h.to[r], err = uploadI32(w.b, rows[r][d]); err != nil {
					return err
				}
			}
			if len(rows[d][r]) > 0 {
				if h.from[r], err = uploadI32(w.b, rows[d][r]); err != nil {
					return err
				}
			}
		}
		if v != haloTrain {
			continue
		}
		h.back = make([]blockMat, w.p)
		for t := 0; t < w.p; t++ {
			sb := &lay.Blocks[d][t]
			if t == d || len(rows[d][t]) == 0 {
				continue
			}
			tr, err := trainRows(sb, isTrain[w.lo:w.lo+w.n]).Transpose(rows[d][t])
			if err != nil {
				return err
			}
			bm := &h.back[t]
			if bm.a, err = w.b.NewSparse(tr.Rows, tr.Cols, tr.Indptr, tr.Indices); err != nil {
				return err
			}
			if bm.w, err = upload(w.b, tr.Weights); err != nil {
				return err
			}
		}
	}
	return nil
}

// haloFor returns the halo set layer l exchanges (training: the last
// layer reads only the training nodes' rows), nil without halo exchange.
func (w *worker) haloFor(l int, train bool) *haloSet {
	if train && l == len(w.specs)-1 && w.halo[haloTrain] != nil {
		return w.halo[haloTrain]
	}
	return w.halo[haloAll]
}

// haloBytes returns the bytes block r's halo rows take to every reader.
func (w *worker) haloBytes(h *haloSet, r, width int) int64 {
	var n int64
	for d := 0; d < w.p; d++ {
		if d != r {
			n += int64(h.n(d, r))
		}
	}
	return 4 * n * int64(width)
}

// sendHalo is sendBlocks for halo exchange: each sending owner gathers
// the rows every reader reads and sends them packed (one all-to-all-v),
// and each reader scatters them into the sender's block of xall, which
// it zeroes first (the rows it does not read are never used, but stay
// finite). Every device ends with payload in its own block of xall.
func (w *worker) sendHalo(s *step, h *haloSet, xall, payload backend.Buffer, width int, sends []bool) {
	d, p := w.rank, w.p
	if s.ok() {
		s.do(w.b.Copy(w.block(s, xall, d, width), payload))
	}
	sendCounts, recvCounts := make([]int, p), make([]int, p)
	sendTotal, recvTotal := 0, 0
	for r := 0; r < p; r++ {
		if r == d {
			continue
		}
		if sends[d] {
			sendCounts[r] = h.n(r, d) * width
			sendTotal += sendCounts[r]
		}
		if sends[r] {
			recvCounts[r] = h.n(d, r) * width
			recvTotal += recvCounts[r]
		}
	}
	packed := s.f32(max(sendTotal, 1))
	off := 0
	for r := 0; r < p && s.ok(); r++ {
		if sendCounts[r] > 0 {
			s.do(w.b.GatherRows(s.view(packed, off, sendCounts[r]), payload, h.to[r], w.n, width))
			off += sendCounts[r]
		}
	}
	var recv backend.Buffer
	if w.dc != nil {
		recv = s.f32(max(recvTotal, 1))
		if s.ok() {
			s.do(w.dc.AllToAllV(w.ctx, s.view(recv, 0, recvTotal), recvCounts, s.view(packed, 0, sendTotal), sendCounts))
		}
	} else {
		send, rh := grow(&w.hostA, sendTotal), grow(&w.hostB, recvTotal)
		if s.ok() && sendTotal > 0 {
			s.do(w.b.Download(send, s.view(packed, 0, sendTotal)))
		}
		if s.ok() {
			s.do(w.c.AllToAllV(w.ctx, cpu.WrapF32(rh), recvCounts, cpu.WrapF32(send), sendCounts))
		}
		recv = s.f32(max(recvTotal, 1))
		if s.ok() && recvTotal > 0 {
			s.do(w.b.Upload(s.view(recv, 0, recvTotal), rh))
		}
	}
	s.drop(packed)
	off = 0
	for r := 0; r < p && s.ok(); r++ {
		if r == d || !sends[r] {
			continue
		}
		blk := w.block(s, xall, r, width)
		if s.ok() {
			s.do(w.b.Fill(blk, 0))
		}
		if n := recvCounts[r]; n > 0 && s.ok() {
			s.do(w.b.ScatterAddRows(blk, s.view(recv, off, n), h.from[r], w.lay.Size(r), width))
			off += n
		}
	}
	s.drop(recv)
}
