package cuda

import (
	"fmt"
	"math/bits"

	cu "github.com/strata-gnn/strata/internal/cuda"
	"github.com/strata-gnn/strata/tensor/backend"
)

// scanTile is the number of elements one block scans (kernels/sort.cu).
const scanTile = 1024

// scanI64 writes the exclusive prefix sum of in[0:n] to out[0:n]; out may
// equal in. Tiles are scanned in blocks, tile totals recursively, then
// offsets added back. Callers hold the lock.
func (d *Device) scanI64(out, in cu.DevPtr, n int64) error {
	if n <= 0 {
		return nil
	}
	ntiles := (n + scanTile - 1) / scanTile
	sums, err := d.allocLocked(backend.Int64, int(ntiles))
	if err != nil {
		return err
	}
	defer d.freeLocked(sums)
	if err := d.launchGrid("scan_tiles", cu.D1(int(ntiles)), cu.D1(256), uint64(in), uint64(out), uint64(sums.ptr), cu.I64(n)); err != nil {
		return err
	}
	if ntiles == 1 {
		return nil
	}
	offs, err := d.allocLocked(backend.Int64, int(ntiles))
	if err != nil {
		return err
	}
	defer d.freeLocked(offs)
	if err := d.scanI64(offs.ptr, sums.ptr, ntiles); err != nil {
		return err
	}
	return d.launchN("scan_add", n, uint64(out), uint64(offs.ptr), cu.I64(n))
}

// scratch allocates temporary buffers and frees them together.
type scratch struct {
	d    *Device
	bufs []*Buffer
	err  error
}

// alloc returns an uninitialized buffer, or nil after the first failure
// (which s.err keeps).
func (s *scratch) alloc(dt backend.DType, n int) *Buffer {
	if s.err != nil {
		return nil
	}
	b, err := s.d.allocLocked(dt, n)
	if err != nil {
		s.err = err
		return nil
	}
	s.bufs = append(s.bufs, b)
	return b
}

// release frees every buffer except those in keep.
func (s *scratch) release(keep ...*Buffer) {
	for _, b := range s.bufs {
		kept := false
		for _, k := range keep {
			kept = kept || b == k
		}
		if !kept {
			s.d.freeLocked(b)
		}
	}
	s.bufs = nil
}

// radixTile is the number of elements one block of the 8-bit radix
// passes handles (RADIX_TILE in kernels/sort.cu).
const radixTile = 2048

// bucket is a stable counting sort of positions 0..n-1 by the int32 keys:
// positions with key k are order[ptr[k]:ptr[k+1]] in increasing order.
// Keys outside [0, nkeys) land in the extra bucket nkeys and are reported
// through errSlot (0: not reported). ptr has nkeys+2 int64 entries and
// order n int32 entries; the caller frees both. The order comes from
// ceil(log2(nkeys+1)/8) stable 8-bit radix passes, so the result is
// deterministic.
func (d *Device) bucket(keys *Buffer, nkeys int, errSlot uint64) (ptr, order *Buffer, err error) {
	n := keys.n
	if n >= 1<<31 || nkeys < 0 || nkeys >= 1<<31-1 {
		return nil, nil, fmt.Errorf("cuda: bucket: %d keys in %d buckets: out of range (limit 2^31-1)", n, nkeys)
	}
	s := &scratch{d: d}
	counts := s.alloc(backend.Int64, nkeys+2)
	ptr = s.alloc(backend.Int64, nkeys+2)
	k0, k1 := s.alloc(backend.Int32, n), s.alloc(backend.Int32, n)
	v0, v1 := s.alloc(backend.Int32, n), s.alloc(backend.Int32, n)
	ntiles := (n + radixTile - 1) / radixTile
	hist := s.alloc(backend.Int64, 256*ntiles)
	if s.err != nil {
		s.release()
		return nil, nil, s.err
	}
	err = d.timed("memset", func() error { return cu.MemsetD8Async(counts.ptr, 0, uint64(8*(nkeys+2)), d.stream) })
	if err == nil {
		err = d.launchN("bucket_count", int64(n), uint64(counts.ptr), uint64(keys.ptr), cu.I64(int64(n)), cu.I64(int64(nkeys)), errSlot)
	}
	if err == nil {
		err = d.scanI64(ptr.ptr, counts.ptr, int64(nkeys+2))
	}
	if err == nil {
		err = d.launchN("radix_init", int64(n), uint64(k0.ptr), uint64(v0.ptr), uint64(keys.ptr), cu.I64(int64(n)), cu.I64(int64(nkeys)))
	}
	nbits := bits.Len(uint(nkeys)) // keys are in [0, nkeys]
	for shift := 0; shift < nbits && n > 0 && err == nil; shift += 8 {
		err = d.launchGrid("radix_hist8", cu.D1(ntiles), cu.D1(256), uint64(k0.ptr), cu.I64(int64(n)), cu.I32(int32(shift)), cu.I64(int64(ntiles)), uint64(hist.ptr))
		if err == nil {
			err = d.scanI64(hist.ptr, hist.ptr, int64(256*ntiles))
		}
		if err == nil {
			err = d.launchGrid("radix_scatter8", cu.D1(ntiles), cu.D1(256), uint64(k0.ptr), uint64(v0.ptr), uint64(k1.ptr), uint64(v1.ptr),
				cu.I64(int64(n)), cu.I32(int32(shift)), cu.I64(int64(ntiles)), uint64(hist.ptr))
		}
		k0, k1 = k1, k0
		v0, v1 = v1, v0
	}
	if err != nil {
		s.release()
		return nil, nil, err
	}
	s.release(ptr, v0)
	return ptr, v0, nil
}
