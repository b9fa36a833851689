package train

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fakeReport(sel string) *Report {
	r := &Report{Schema: ReportVersion, Dataset: "toy", Model: GCN, Mode: Full, Config: Defaults(GCN)}
	r.Config.Select = sel
	vals := []struct{ val, vloss, test float64 }{
		{0.50, 1.0, 0.40}, {0.70, 0.9, 0.60}, {0.70, 0.8, 0.65}, {0.60, 0.7, 0.70},
	}
	for i, v := range vals {
		r.Epochs = append(r.Epochs, EpochRecord{Epoch: i + 1, Loss: 2 - float64(i)/4, TrainAccuracy: 0.5 + float64(i)/10,
			ValAccuracy: v.val, ValLoss: v.vloss, TestAccuracy: v.test, BatchLosses: []float64{2 - float64(i)/4}})
	}
	r.Summarize()
	return r
}

func TestSummarizeSelectsBestValidation(t *testing.T) {
	r := fakeReport(SelectBest)
	// Epochs 2 and 3 tie on validation accuracy; 3 has the lower val loss.
	if r.BestValEpoch != 3 || r.SelectedEpoch != 3 || r.TestAccuracy != 0.65 || r.ValAccuracy != 0.70 {
		t.Fatalf("best: epoch %d/%d test %v val %v, want epoch 3 test 0.65 val 0.70", r.BestValEpoch, r.SelectedEpoch, r.TestAccuracy, r.ValAccuracy)
	}
	if r.LastTestAcc != 0.70 || r.LastValAcc != 0.60 || r.TestAtBestVal != 0.65 {
		t.Fatalf("last test %v val %v, test at best %v", r.LastTestAcc, r.LastValAcc, r.TestAtBestVal)
	}
	r = fakeReport(SelectLast)
	if r.SelectedEpoch != 4 || r.TestAccuracy != 0.70 || r.BestValEpoch != 3 || r.Selection != SelectLast {
		t.Fatalf("last: selected %d test %v best %d", r.SelectedEpoch, r.TestAccuracy, r.BestValEpoch)
	}
}

// TestSummarizeSkipsUnevaluatedEpochs: epochs that were not evaluated
// (EvalEvery) are never selected, with either rule, and round-trip.
func TestSummarizeSkipsUnevaluatedEpochs(t *testing.T) {
	for _, sel := range []string{SelectBest, SelectLast} {
		r := fakeReport(sel)
		r.Epochs = append(r.Epochs, EpochRecord{Epoch: 5, Loss: 0.5, EvalSkipped: true}, EpochRecord{Epoch: 6, Loss: 0.4, ValAccuracy: 0.2, TestAccuracy: 0.1})
		r.Epochs[2].EvalSkipped = true // the best validation epoch
		r.Epochs[2].ValAccuracy = 0.99
		r.Summarize()
		want := 2
		if sel == SelectLast {
			want = 6
		}
		if r.SelectedEpoch != want || r.LastTestAcc != 0.1 {
			t.Errorf("%s: selected epoch %d, last test %v; want epoch %d, 0.1", sel, r.SelectedEpoch, r.LastTestAcc, want)
		}
	}
	path := filepath.Join(t.TempDir(), "r.json")
	r := fakeReport(SelectBest)
	r.Epochs[1].EvalSkipped = true
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Epochs[1].EvalSkipped || got.Epochs[0].EvalSkipped {
		t.Fatalf("eval_skipped did not round-trip: %+v", got.Epochs[:2])
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	r := fakeReport(SelectBest)
	r.Epochs[0].BatchLosses = []float64{1.0000000000000002, 0.1 + 0.2}
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	for _, key := range []string{`"dataset"`, `"model"`, `"device"`, `"val_accuracy"`, `"test_accuracy"`, `"total_seconds"`,
		`"epochs"`, `"epoch"`, `"loss"`, `"train_accuracy"`, `"seconds"`, `"strata_version"`, `"seed"`, `"config"`} {
		if !bytes.Contains(data, []byte(key)) {
			t.Errorf("report JSON lacks %s", key)
		}
	}
	got, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Epochs[0].BatchLosses[0] != 1.0000000000000002 || got.Epochs[0].BatchLosses[1] != 0.1+0.2 {
		t.Fatalf("losses did not round-trip exactly: %v", got.Epochs[0].BatchLosses)
	}
	if got.TestAccuracy != r.TestAccuracy || got.Config.Hidden != 16 {
		t.Fatalf("round trip: %+v", got)
	}
	if err := os.WriteFile(path, []byte(`{"schema":1,"bogus":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReport(path); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown field accepted: %v", err)
	}
}

func TestWritePlot(t *testing.T) {
	dir := t.TempDir()
	r := fakeReport(SelectBest)
	path := filepath.Join(dir, "curves.png")
	if err := WritePlot(r, path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1152 || b.Dy() != 432 {
		t.Fatalf("image is %dx%d, want 1152x432", b.Dx(), b.Dy())
	}
	// The curves are drawn: some pixels are neither white nor black-ish grey.
	colored := 0
	for y := 0; y < img.Bounds().Dy(); y += 2 {
		for x := 0; x < img.Bounds().Dx(); x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			if max(r, g, b)-min(r, g, b) > 0x4000 {
				colored++
			}
		}
	}
	if colored < 100 {
		t.Fatalf("only %d coloured pixels: curves missing", colored)
	}
	for _, ext := range []string{".svg", ".pdf"} {
		if err := WritePlot(r, filepath.Join(dir, "c"+ext)); err != nil {
			t.Fatalf("%s: %v", ext, err)
		}
	}
	if err := WritePlot(r, filepath.Join(dir, "c.gif")); err == nil {
		t.Fatal("unknown extension accepted")
	}
	if err := WritePlot(&Report{}, filepath.Join(dir, "e.png")); err == nil {
		t.Fatal("empty report accepted")
	}
}
