package link

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/strata-gnn/strata/dataset/gen"
	"github.com/strata-gnn/strata/train"
)

// TestHeteroLinkPrediction is typed link prediction's gate: on the hetero
// preset at half size, hsage predicts held-out author-writes-paper links
// (their reverse edges removed from message passing too) well above
// chance, averaged over three seeds (dataset and training).
func TestHeteroLinkPrediction(t *testing.T) {
	const seeds = 3
	var auc float64
	for s := uint64(1); s <= seeds; s++ {
		c := gen.HeteroPreset()
		c.Papers, c.Seed = 2000, s
		h, err := gen.GenerateHetero(c)
		if err != nil {
			t.Fatal(err)
		}
		cfg := HeteroDefaults(train.HSAGE, "writes")
		cfg.Seed, cfg.Epochs, cfg.Hidden = s, 4, 32
		rep, err := RunHetero(context.Background(), h, cfg, Options{Backend: cpuBackend(t)})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Relation != "author___writes___paper" || rep.Split.Test < 1 || rep.Split.Test != rep.Split.TestNeg {
			t.Fatalf("relation %q, split %+v", rep.Relation, rep.Split)
		}
		t.Logf("seed %d: test auc %.3f mrr %.3f hits@50 %.3f", s, rep.Test.AUC, rep.Test.MRR, rep.Test.Hits)
		auc += rep.Test.AUC / seeds
	}
	if auc < 0.75 {
		t.Fatalf("mean test AUC %.3f, want >= 0.75", auc)
	}
}

func TestHeteroLinkRelationErrors(t *testing.T) {
	c := gen.HeteroPreset()
	c.Papers = 200
	h, err := gen.GenerateHetero(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg := HeteroDefaults(train.HSAGE, "likes")
	cfg.Epochs = 1
	_, err = RunHetero(context.Background(), h, cfg, Options{Backend: cpuBackend(t)})
	var ce *train.ConfigError
	if !errors.As(err, &ce) || ce.Field != "relation" || !strings.Contains(err.Error(), "author___writes___paper") {
		t.Fatalf("unknown relation: %v", err)
	}
}
