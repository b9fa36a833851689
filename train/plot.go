package train

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/strata-gnn/strata/internal/atomicfile"
)

// CheckPlotPath reports, before a run, whether WritePlot could write
// path: a format it draws and a destination atomicfile.Check accepts.
func CheckPlotPath(path string) error {
	if err := atomicfile.Check(path); err != nil {
		return err
	}
	_, err := plotFormat(path)
	return err
}

// plotFormat is path's image format (lower-case extension) if WritePlot
// draws it.
func plotFormat(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png", ".svg", ".pdf":
		return ext, nil
	default:
		return "", fmt.Errorf("train: plot %s: unknown image format %q (want .png, .svg or .pdf)", path, ext)
	}
}

// WritePlot draws the report's curves, training and validation loss on
// the left and train/validation/test accuracy on the right (of the
// evaluated epochs), to path. The format follows the extension: .png,
// .svg or .pdf.
func WritePlot(r *Report, path string) error {
	if len(r.Epochs) == 0 {
		return fmt.Errorf("train: plot: the report has no epochs")
	}
	ext, err := plotFormat(path)
	if err != nil {
		return err
	}
	const w, h = 12 * vg.Inch, 4.5 * vg.Inch
	var canvas vg.CanvasWriterTo
	switch ext {
	case ".png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(96))}
	case ".svg":
		canvas = vgsvg.New(w, h)
	case ".pdf":
		canvas = vgpdf.New(w, h)
	}

	title := fmt.Sprintf("%s %s on %s", r.Model, r.Mode, r.Dataset)
	loss := plot.New()
	loss.Title.Text = title + ": loss"
	loss.X.Label.Text = "epoch"
	loss.Y.Label.Text = "cross-entropy"
	acc := plot.New()
	acc.Title.Text = fmt.Sprintf("accuracy (test %.4f at epoch %d, %s)", r.TestAccuracy, r.SelectedEpoch, r.Selection)
	acc.X.Label.Text = "epoch"
	acc.Y.Label.Text = "accuracy"
	acc.Y.Min, acc.Y.Max = 0, 1

	series := func(get func(*EpochRecord) float64, evaluated bool) plotter.XYs {
		xy := make(plotter.XYs, 0, len(r.Epochs))
		for i := range r.Epochs {
			if e := &r.Epochs[i]; !evaluated || !e.EvalSkipped {
				xy = append(xy, plotter.XY{X: float64(e.Epoch), Y: get(e)})
			}
		}
		return xy
	}
	add := func(p *plot.Plot, name string, col color.Color, dashed bool, xy plotter.XYs) error {
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("train: plot %s: %w", name, err)
		}
		l.Color = col
		l.Width = vg.Points(1.5)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	blue := color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange := color.RGBA{R: 255, G: 127, B: 14, A: 255}
	green := color.RGBA{R: 44, G: 160, B: 44, A: 255}
	for _, s := range []struct {
		p      *plot.Plot
		name   string
		col    color.Color
		dashed bool
		get    func(*EpochRecord) float64
		eval   bool // of the evaluation: evaluated epochs only
	}{
		{loss, "train loss", blue, false, func(e *EpochRecord) float64 { return e.Loss }, false},
		{loss, "val loss", orange, true, func(e *EpochRecord) float64 { return e.ValLoss }, true},
		{acc, "train", blue, false, func(e *EpochRecord) float64 { return e.TrainAccuracy }, true},
		{acc, "val", orange, true, func(e *EpochRecord) float64 { return e.ValAccuracy }, true},
		{acc, "test", green, false, func(e *EpochRecord) float64 { return e.TestAccuracy }, true},
	} {
		if err := add(s.p, s.name, s.col, s.dashed, series(s.get, s.eval)); err != nil {
			return err
		}
	}
	loss.Legend.Top = true
	acc.Legend.Top, acc.Legend.Left = false, false
	acc.Legend.YOffs = vg.Points(45)
	acc.Legend.XOffs = -vg.Points(10)
	loss.Add(plotter.NewGrid())
	acc.Add(plotter.NewGrid())

	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}
	loss.Draw(tiles.At(dc, 0, 0))
	acc.Draw(tiles.At(dc, 1, 0))
	data := &bytesWriter{}
	if _, err := canvas.WriteTo(data); err != nil {
		return fmt.Errorf("train: plot: %w", err)
	}
	return writeFileAtomic(path, data.b)
}

type bytesWriter struct{ b []byte }

func (w *bytesWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
