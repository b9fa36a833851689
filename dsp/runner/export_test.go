package runner

import (
	"context"
	"slices"
	"testing"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend/cpu"
	"github.com/strata-gnn/strata/train"
)

// TestExports: the exported pieces are the ones Run uses: the same
// assignment, and an evaluator that scores a model as Run does.
func TestExports(t *testing.T) {
	ds := tiny(t)
	cfg := small(3, 1)
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	pd, err := Partition(context.Background(), ds, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if pd.Book.K() != 3 || pd.Dataset.NumNodes() != ds.NumNodes() {
		t.Fatalf("partition: %d parts, %d nodes", pd.Book.K(), pd.Dataset.NumNodes())
	}
	got, dropped, err := AssignBatches(pd.Dataset.Train, pd.Book, 16, Pad, 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	want, err := assign(pd.Dataset.Train, pd.Book, 16, Pad, 7, 2)
	if err != nil {
		t.Fatal(err)
	}
	if dropped != want.dropped || len(got) != 3 {
		t.Fatalf("dropped %d (want %d), %d devices", dropped, want.dropped, len(got))
	}
	for r := range got {
		if !slices.EqualFunc(got[r], want.batches[r], slices.Equal[[]graph.NodeID]) {
			t.Fatalf("device %d: batches differ", r)
		}
	}
	if _, _, err := AssignBatches(pd.Dataset.Train, nil, 16, Pad, 7, 2); err == nil {
		t.Fatal("nil book accepted")
	}
	if DropoutSeed(1, 2, 3) == DropoutSeed(1, 2, 4) {
		t.Fatal("dropout seeds of different batches agree")
	}
	x, _, sparse := Features(pd.Dataset, train.RowNormAuto)
	b, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	model, err := nn.New(b, ModelConfig(cfg.Train, pd.Dataset.FeatDim, pd.Dataset.NumClasses))
	if err != nil {
		t.Fatal(err)
	}
	defer nn.FreeParams(b, model.Params())
	cfg.Train.Eval, cfg.Train.EvalFanouts = train.Sampled, []int{5, 5}
	ev, err := NewEvaluator(b, pd.Dataset, x, sparse, cfg.Train)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Free()
	rec, err := ev.Run(model)
	if err != nil {
		t.Fatal(err)
	}
	if rec.TestAccuracy < 0 || rec.TestAccuracy > 1 || !(rec.ValLoss > 0) {
		t.Fatalf("untrained model scored %+v", rec)
	}
	if _, err := NewEvaluator(b, pd.Dataset, x[:len(x)-1], sparse, cfg.Train); err == nil {
		t.Fatal("short feature table accepted")
	}
	if _, err := HotOrder(pd.Dataset.Graph, "presample"); err == nil {
		t.Fatal("presample hotness without a sampling pass accepted")
	}
	if n := CrossEdges(pd.Dataset.Graph, pd.Book); n <= 0 || n > pd.Dataset.Graph.NumEdges() {
		t.Fatalf("cross edges %d of %d", n, pd.Dataset.Graph.NumEdges())
	}
}
