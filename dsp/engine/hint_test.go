package engine

import (
	"strings"
	"testing"

	"github.com/strata-gnn/strata/train"
)

// TestEvalHint: a note when an evaluation takes 10 s or more, over five
// epochs of training, and more are to come, naming --eval-every, and
// --eval sampled unless the run uses it already; nothing otherwise.
func TestEvalHint(t *testing.T) {
	h := evalHint(91.2, 2.82, train.Full, 9)
	for _, want := range []string{"91.2 s", "32x", "9 more", "--eval-every N", "--eval sampled"} {
		if !strings.Contains(h, want) {
			t.Errorf("hint %q lacks %q", h, want)
		}
	}
	if h := evalHint(91.2, 2.82, train.Sampled, 9); !strings.Contains(h, "--eval-every") || strings.Contains(h, "--eval sampled") {
		t.Errorf("sampled evaluation: hint %q", h)
	}
	for _, c := range []struct {
		eval, train float64
		ahead       int
	}{{91.2, 2.82, 0}, {12, 2.5, 9}, {9.9, 0.5, 9}, {91.2, 0, 9}} {
		if h := evalHint(c.eval, c.train, train.Full, c.ahead); h != "" {
			t.Errorf("eval %.1f s, train %.2f s, %d ahead: hint %q, want none", c.eval, c.train, c.ahead, h)
		}
	}
	c := &train.Common{Epochs: 10, EvalEvery: 3} // evaluates after epochs 3, 6, 9 and 10
	for epoch, want := range map[int]int{0: 4, 2: 3, 8: 1, 9: 0} {
		if got := evaluationsAfter(c, epoch); got != want {
			t.Errorf("after epoch %d: %d evaluations, want %d", epoch+1, got, want)
		}
	}
}
