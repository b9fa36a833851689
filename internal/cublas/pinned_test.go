package cublas

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

func TestBucket(t *testing.T) {
	for _, c := range []struct{ x, want int }{
		{-3, 1}, {0, 1}, {1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {1000, 1024}, {1024, 1024}, {1025, 2048},
		{300000, 1 << 19}, {1 << 24, 1 << 24}, {1<<24 + 1, 1 << 25}, {1<<31 - 1, 1 << 31},
	} {
		if got := Bucket(c.x); got != c.want {
			t.Errorf("Bucket(%d) = %d, want %d", c.x, got, c.want)
		}
	}
}

func TestAlignClass(t *testing.T) {
	for _, c := range []struct {
		ptr  uintptr
		ld   int
		want int
	}{
		{0x1000, 1024, 16}, {0x1000, 24, 8}, {0x1008, 1024, 8}, {0x1000, 12, 4}, {0x1004, 16, 4},
		{0x1000, 94, 2}, {0x1002, 256, 2}, {0x1001, 256, 1}, {0x1000, 3, 1},
	} {
		if got := AlignClass(c.ptr, c.ld); got != c.want {
			t.Errorf("AlignClass(%#x, %d) = %d, want %d", c.ptr, c.ld, got, c.want)
		}
	}
}

func TestKey(t *testing.T) {
	// A training step's forward product: X (m x 128) W (128 x 256).
	r := GemmRequest{Compute: Compute32F, AB: R32F, C: R32F, M: 300000, N: 256, K: 128, A: 0x7f0000000000, B: 0x7f0000100000, CPtr: 0x7f0000200000}
	want := Key{Compute: Compute32F, AB: R32F, C: R32F, LogM: 19, LogN: 8, LogK: 7, AlignA: 16, AlignB: 16, AlignC: 16}
	if got := r.Key(); got != want {
		t.Fatalf("key %v, want %v", got, want)
	}
	// Rows vary within a bucket: same key.
	r.M = 262145
	if got := r.Key(); got != want {
		t.Fatalf("m=%d: key %v, want %v", r.M, got, want)
	}
	// bfloat16 operands, odd widths: A is k x m (transA, lda = m = 47:
	// 94 bytes), B n x k (transB, ldb = k = 12: 24 bytes), C float32 with
	// ldc = n = 5 (20 bytes), C's pointer 8-aligned.
	r = GemmRequest{Compute: Compute32F, AB: R16BF, C: R32F, TransA: true, TransB: true, M: 47, N: 5, K: 12, A: 0x1000, B: 0x2000, CPtr: 0x3008}
	want = Key{Compute: Compute32F, AB: R16BF, C: R32F, TransA: true, TransB: true, LogM: 6, LogN: 3, LogK: 4, AlignA: 2, AlignB: 8, AlignC: 4}
	if got := r.Key(); got != want {
		t.Fatalf("key %v, want %v", got, want)
	}
}

func TestFamily(t *testing.T) {
	center := Key{Compute: Compute32FFast16BF, AB: R32F, C: R32F, LogM: 17, LogN: 8, LogK: 7, AlignA: 16, AlignB: 16, AlignC: 16}
	fam := center.Family()
	if len(fam) != FamilySize || FamilySize != 73 {
		t.Fatalf("family of %d keys (FamilySize %d), want 73", len(fam), FamilySize)
	}
	if fam[0] != center {
		t.Fatalf("family starts with %v, want the key itself", fam[0])
	}
	seen := map[Key]bool{}
	lines := [3]map[uint8]bool{{}, {}, {}}
	for _, k := range fam {
		if seen[k] {
			t.Fatalf("%v twice", k)
		}
		seen[k] = true
		x := k
		x.LogM, x.LogN, x.LogK = center.LogM, center.LogN, center.LogK
		if x != center {
			t.Fatalf("%v differs from %v in more than the buckets", k, center)
		}
		diff := 0
		for d := range 3 {
			if *k.log(d) != *center.log(d) {
				diff++
				lines[d][*k.log(d)] = true
			}
		}
		if diff > 1 {
			t.Fatalf("%v differs from %v in %d dimensions", k, center, diff)
		}
	}
	for d := range 3 {
		if len(lines[d]) != FamilyBuckets-1 {
			t.Errorf("dimension %d: %d other buckets, want %d", d, len(lines[d]), FamilyBuckets-1)
		}
	}
	// A key past 2^24 keeps itself, beside three full lines.
	center.LogM = 26
	if n := len(center.Family()); n != FamilySize+1 {
		t.Fatalf("family of a 2^26-row key: %d keys, want %d", n, FamilySize+1)
	}
	// Every key a product with m in the first key's family line has is in
	// that family.
	r := GemmRequest{Compute: Compute32F, AB: R32F, C: R32F, M: 1, N: 256, K: 128, A: 0x10000, B: 0x20000, CPtr: 0x30000}
	fam = r.Key().Family()
	in := map[Key]bool{}
	for _, k := range fam {
		in[k] = true
	}
	for m := 1; m <= 1<<24; m = m*3 + 1 {
		r.M = m
		if !in[r.Key()] {
			t.Fatalf("m=%d: key %v outside the family of m=1", m, r.Key())
		}
	}
}

func TestReachable(t *testing.T) {
	k := Key{Compute: Compute32F, AB: R32F, C: R32F, LogM: 10, LogN: 0, LogK: 7, AlignA: 16, AlignB: 4, AlignC: 16}
	if k.reachable() {
		t.Fatalf("%v: n=1 gives C rows of 4 bytes, never 16-byte aligned", k)
	}
	k.LogN = 2 // n = 4: 16-byte rows
	if !k.reachable() {
		t.Fatalf("%v: unreachable", k)
	}
	// Every product's own key is reachable.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		r := GemmRequest{Compute: Compute32F, AB: R32F, C: R32F, TransA: rng.IntN(2) == 0, TransB: rng.IntN(2) == 0,
			M: 1 + rng.IntN(5000), N: 1 + rng.IntN(300), K: 1 + rng.IntN(300),
			A: uintptr(rng.IntN(64)) * 4, B: uintptr(rng.IntN(64)) * 4, CPtr: uintptr(rng.IntN(64)) * 4}
		if rng.IntN(2) == 0 {
			r.AB, r.A, r.B = R16BF, uintptr(rng.IntN(64))*2, uintptr(rng.IntN(64))*2
			if rng.IntN(2) == 0 {
				r.C, r.CPtr = R16BF, uintptr(rng.IntN(64))*2
			}
		}
		if k := r.Key(); !k.reachable() {
			t.Fatalf("%+v: its key %v is not reachable", r, k)
		}
	}
}

func TestShapes(t *testing.T) {
	k := Key{LogM: 19, LogN: 8, LogK: 31}
	if m, n, kk := k.rep(); m != 1<<19 || n != 256 || kk != 1<<30 {
		t.Fatalf("rep %d %d %d", m, n, kk)
	}
	if m, n, kk := k.warmShape(); m != warmMax || n != 256 || kk != warmMax {
		t.Fatalf("warm shape %d %d %d", m, n, kk)
	}
	if PinnedScratchBytes != 3*warmMax*warmMax*4 {
		t.Fatal("scratch size")
	}
}

// TestLtDims: cuBLASLt's layouts describe the column-major product
// C^T (n x m) = op(B)^T (n x k) op(A)^T (k x m), with the leading
// dimensions of the row-major matrices (as Gemm's gemmArgs).
func TestLtDims(t *testing.T) {
	const m, n, k = 7, 5, 3
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			d := ltDims(ta, tb, m, n, k)
			_, _, lda, ldb, err := gemmArgs("test", ta, tb, m, n, k)
			if err != nil {
				t.Fatal(err)
			}
			opShape := func(l [3]uint64, trans bool) (uint64, uint64) {
				if trans {
					return l[1], l[0]
				}
				return l[0], l[1]
			}
			r0, c0 := opShape(d[0], tb)
			r1, c1 := opShape(d[1], ta)
			if r0 != n || c0 != k || r1 != k || c1 != m || d[2] != [3]uint64{n, m, n} {
				t.Errorf("ta=%v tb=%v: layouts %v", ta, tb, d)
			}
			if d[0][2] != uint64(ldb) || d[1][2] != uint64(lda) {
				t.Errorf("ta=%v tb=%v: lds %d %d, want %d %d", ta, tb, d[0][2], d[1][2], ldb, lda)
			}
			for i := range d {
				if d[i][2] < d[i][0] {
					t.Errorf("ta=%v tb=%v: layout %d ld %d < rows %d", ta, tb, i, d[i][2], d[i][0])
				}
			}
			lda2, ldb2, ldc2 := lds(ta, tb, m, n, k)
			if lda2 != lda || ldb2 != ldb || ldc2 != n {
				t.Errorf("lds %d %d %d", lda2, ldb2, ldc2)
			}
		}
	}
}

// TestLtStructLayout pins the Go mirrors of cublasLt.h's structs.
func TestLtStructLayout(t *testing.T) {
	var h ltHeuristic
	if unsafe.Sizeof(ltAlgo{}) != 64 || unsafe.Sizeof(h) != 96 ||
		unsafe.Offsetof(h.workspaceSize) != 64 || unsafe.Offsetof(h.state) != 72 ||
		unsafe.Offsetof(h.wavesCount) != 76 || unsafe.Offsetof(h.reserved) != 80 {
		t.Fatalf("cublasLtMatmulHeuristicResult_t mirror: size %d, offsets %d %d %d %d",
			unsafe.Sizeof(h), unsafe.Offsetof(h.workspaceSize), unsafe.Offsetof(h.state), unsafe.Offsetof(h.wavesCount), unsafe.Offsetof(h.reserved))
	}
}

func TestNewPinnedWithoutLibrary(t *testing.T) {
	if LoadLt() == nil {
		t.Skip("cuBLASLt loads here")
	}
	if p, err := NewPinned(0x1000, PinnedScratchBytes); err == nil || p != nil {
		t.Fatalf("NewPinned without cuBLASLt: %v, %v", p, err)
	}
}
