package bench

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// WriteChart draws the matrix's ratios as a PNG (or SVG, PDF: by path's
// extension): one bar per workload on a log2 scale, so that 2x better and
// 2x worse are bars of the same length either side of the 1.0 line; the
// 0.8 floor is drawn dashed. Bars at or above their target are green,
// below it red; a workload without a ratio has no bar and "(n/a)" in its
// name.
func WriteChart(rows []MatrixRow, title, path string) error {
	if len(rows) == 0 {
		return fmt.Errorf("bench: no matrix rows to chart")
	}
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "nfsrdma-mount / kernel (above 1: nfsrdma-mount better)"
	good := make(plotter.Values, len(rows))
	bad := make(plotter.Values, len(rows))
	names := make([]string, len(rows))
	lo, hi := math.Log2(0.5), math.Log2(2)
	var labels plotter.XYLabels
	for i, x := range rows {
		names[i] = x.Group + ": " + x.Name
		if x.Ratio <= 0 {
			names[i] += " (n/a)"
			continue
		}
		v := math.Log2(x.Ratio)
		lo, hi = min(lo, v), max(hi, v)
		if x.Met {
			good[i] = v
		} else {
			bad[i] = v
		}
		y := v + 0.08
		if v < 0 {
			y = v - 0.3
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: float64(i), Y: y})
		labels.Labels = append(labels.Labels, fmt.Sprintf("%.2f", x.Ratio))
	}
	w := vg.Points(14)
	for _, s := range []struct {
		vals plotter.Values
		c    color.Color
	}{{good, color.RGBA{R: 60, G: 150, B: 80, A: 255}}, {bad, color.RGBA{R: 200, G: 60, B: 50, A: 255}}} {
		b, err := plotter.NewBarChart(s.vals, w)
		if err != nil {
			return err
		}
		b.Color = s.c
		b.LineStyle.Width = 0
		p.Add(b)
	}
	if len(labels.XYs) > 0 {
		l, err := plotter.NewLabels(labels)
		if err != nil {
			return err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].XAlign = draw.XCenter
			l.TextStyle[i].Font.Size = vg.Points(7)
		}
		p.Add(l)
	}
	hline := func(y float64, width vg.Length, dash []vg.Length, c color.Color) error {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: y}, {X: float64(len(rows)) - 0.5, Y: y}})
		if err != nil {
			return err
		}
		l.Width, l.Dashes, l.Color = width, dash, c
		p.Add(l)
		return nil
	}
	if err := hline(math.Log2(0.8), vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}, color.RGBA{R: 200, G: 60, B: 50, A: 255}); err != nil {
		return err
	}
	if err := hline(0, vg.Points(1.5), nil, color.Black); err != nil {
		return err
	}
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 2
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	p.Y.Min, p.Y.Max = math.Floor(lo)-0.3, math.Ceil(hi)+0.3
	p.Y.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick {
		var ts []plot.Tick
		for e := math.Ceil(min); e <= max; e++ {
			ts = append(ts, plot.Tick{Value: e, Label: ratioLabel(math.Exp2(e))})
		}
		if math.Log2(0.8) >= min {
			ts = append(ts, plot.Tick{Value: math.Log2(0.8), Label: "0.8"})
		}
		return ts
	})
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	p.Add(grid)
	width := vg.Length(max(len(rows), 12)) * vg.Points(26)
	return p.Save(width+vg.Inch, 9*vg.Inch, path)
}

func ratioLabel(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%gx", v)
	}
	return fmt.Sprintf("1/%gx", 1/v)
}
