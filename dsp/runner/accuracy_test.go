package runner

import (
	"fmt"
	"math"
	"testing"

	"github.com/strata-gnn/strata/train"
)

// TestAccuracyAcrossDevices: sampled GraphSAGE on Cora (the trainer's
// defaults) reaches the same accuracy on 1, 2 and 4 devices: the mean test
// accuracy over seeds 1-3 is within 0.025 of the 1-device mean, and every
// run reaches 0.77. More devices take fewer, larger steps per epoch (the
// global batch grows with the device count), hence a small expected drop.
func TestAccuracyAcrossDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("accuracy over 9 runs: skipped in -short mode")
	}
	const seeds = 3
	means := map[int]float64{}
	for _, k := range []int{1, 2, 4} {
		var accs []float64
		for s := 1; s <= seeds; s++ {
			cfg := Defaults(train.SAGE, k)
			cfg.Train.Seed = uint64(s)
			rep := run(t, cfg, Options{})
			if rep.TestAccuracy < 0.77 {
				t.Errorf("%d devices, seed %d: test accuracy %.4f < 0.77", k, s, rep.TestAccuracy)
			}
			accs = append(accs, rep.TestAccuracy)
			means[k] += rep.TestAccuracy / seeds
		}
		t.Logf("%d devices: mean test accuracy %.4f %v", k, means[k], accs)
	}
	for _, k := range []int{2, 4} {
		if d := math.Abs(means[k] - means[1]); d > 0.025 {
			t.Errorf("%s", fmt.Sprintf("%d devices: mean %.4f differs from 1 device's %.4f by %.4f > 0.025", k, means[k], means[1], d))
		}
	}
}
