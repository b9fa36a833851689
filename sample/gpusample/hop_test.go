package gpusample

import (
	"errors"
	"testing"

	"github.com/strata-gnn/strata/internal/testkit/gputest"
	"github.com/strata-gnn/strata/sample"
)

// TestHopKernelsCompile compiles the hop module (sample.cu plus hop.cu)
// with NVRTC when the library is available (no GPU needed).
func TestHopKernelsCompile(t *testing.T) {
	gputest.CompileKernels(t, kernelSrc+hopSrc, "gpusample-hop.cu")
}

// TestCheckSeg: DrawHop's and DrawStrided's segment check accepts
// non-decreasing offsets from 0 to n, one more than the keys, and rejects
// the rest with a config error naming seg.
func TestCheckSeg(t *testing.T) {
	keys := []uint64{5, 6}
	if err := checkSeg([]int64{0, 3, 7}, keys, 7); err != nil {
		t.Fatalf("valid segments: %v", err)
	}
	if err := checkSeg([]int64{0, 0, 0}, keys, 0); err != nil {
		t.Fatalf("empty segments: %v", err)
	}
	for _, c := range []struct {
		seg  []int64
		keys []uint64
		n    int64
	}{
		{[]int64{0}, nil, 0},           // no keys
		{[]int64{0, 7}, keys, 7},       // one offset short
		{[]int64{1, 3, 7}, keys, 7},    // does not start at 0
		{[]int64{0, 3, 6}, keys, 7},    // does not end at n
		{[]int64{0, 8, 7}, keys, 7},    // decreasing
		{[]int64{0, 3, 7, 7}, keys, 7}, // one offset too many
	} {
		err := checkSeg(c.seg, c.keys, c.n)
		var se *sample.Error
		if !errors.As(err, &se) || se.Field != "seg" || !errors.Is(err, sample.ErrConfig) {
			t.Fatalf("seg %v keys %v n %d: got %v, want a seg config error", c.seg, c.keys, c.n, err)
		}
	}
}
