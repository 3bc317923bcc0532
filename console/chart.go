package console

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// The console draws its charts itself, as inline SVG written here, rather
// than with a charting library: the charts are a handful of lines and
// sparklines, the page's Content-Security-Policy allows no inline style
// or script, and the colours must follow the stylesheet (light and dark)
// through CSS classes. The Go charting libraries either render in the
// browser with JavaScript from a CDN (go-echarts), or draw text as glyph
// paths and fix colours and fonts in the SVG (gonum/plot, go-chart), and
// pull fonts and image packages in for a few hundred lines' worth of
// output. A page that needs a chart builds a Chart (or a Spark) and its
// template writes {{.SVG}}; console.css gives the series their colours
// (.series-0 to .series-3).

// Series is one line of a chart: values at equally spaced points, oldest
// first. A NaN value is a gap.
type Series struct {
	Name   string
	Values []float64
}

// Last is the series' newest value, NaN when it has none.
func (s Series) Last() float64 {
	for i := len(s.Values) - 1; i >= 0; i-- {
		if !math.IsNaN(s.Values[i]) {
			return s.Values[i]
		}
	}
	return math.NaN()
}

// Chart is a line chart of one or more series sharing an x axis of
// equally spaced points and a y axis from 0 (or the lowest value, when
// negative) to the highest.
type Chart struct {
	// ID names the figure (id attribute) for links and tests.
	ID string
	// Title is the chart's heading and its accessible name.
	Title string
	// From and To label the x axis's ends ("60 min ago", "now").
	From, To string
	// Unit follows the values in the legend ("/min").
	Unit   string
	Series []Series
	// Empty is said instead of the chart when no series has two points.
	Empty string
}

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartW, chartH = 480, 160
	chartLeft      = 52 // room for the y labels
	chartRight     = 8
	chartTop       = 12
	chartBottom    = 26 // room for the x labels
	sparkW, sparkH = 120, 28
)

// points is the most values of any series.
func (c Chart) points() int {
	n := 0
	for _, s := range c.Series {
		n = max(n, len(s.Values))
	}
	return n
}

// SVG renders the chart as a figure holding an inline SVG and a legend
// with each series' newest value.
func (c Chart) SVG() template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="chart" id="%s">`, esc(c.ID))
	fmt.Fprintf(&b, `<figcaption class="chart-title">%s</figcaption>`, esc(c.Title))
	n := c.points()
	if n < 2 {
		empty := c.Empty
		if empty == "" {
			empty = "Not enough data yet."
		}
		fmt.Fprintf(&b, `<p class="hint chart-empty">%s</p>`, esc(empty))
		c.legend(&b)
		b.WriteString(`</figure>`)
		return template.HTML(b.String())
	}
	lo, hi := valueRange(c.Series)
	fmt.Fprintf(&b, `<svg class="chart-svg" viewBox="0 0 %d %d" role="img" aria-label="%s">`, chartW, chartH, esc(c.Title+": "+c.summary()))
	plotW := float64(chartW - chartLeft - chartRight)
	plotH := float64(chartH - chartTop - chartBottom)
	y := func(v float64) float64 { return chartTop + plotH - (v-lo)/(hi-lo)*plotH }
	x := func(i int) float64 { return chartLeft + float64(i)*plotW/float64(n-1) }
	// Grid: the top, middle and bottom values.
	for _, v := range []float64{lo, (lo + hi) / 2, hi} {
		fmt.Fprintf(&b, `<line class="chart-grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, chartLeft, chartW-chartRight, y(v), y(v))
		fmt.Fprintf(&b, `<text class="chart-label" x="%d" y="%.1f" text-anchor="end">%s</text>`, chartLeft-6, y(v)+5, esc(short(v)))
	}
	fmt.Fprintf(&b, `<text class="chart-label" x="%d" y="%d">%s</text>`, chartLeft, chartH-6, esc(c.From))
	fmt.Fprintf(&b, `<text class="chart-label" x="%d" y="%d" text-anchor="end">%s</text>`, chartW-chartRight, chartH-6, esc(c.To))
	for i, s := range c.Series {
		// Series shorter than the chart end at its right edge.
		off := n - len(s.Values)
		writeLine(&b, fmt.Sprintf("chart-line series-%d", i%4), s, func(j int) float64 { return x(j + off) }, y)
	}
	b.WriteString(`</svg>`)
	c.legend(&b)
	b.WriteString(`</figure>`)
	return template.HTML(b.String())
}

// legend writes each series' name and newest value.
func (c Chart) legend(b *strings.Builder) {
	b.WriteString(`<ul class="chart-legend">`)
	for i, s := range c.Series {
		last := "—"
		if v := s.Last(); !math.IsNaN(v) {
			last = short(v) + c.Unit
		}
		fmt.Fprintf(b, `<li class="series-%d" data-series="%s"><span class="chart-key"></span>%s <b class="chart-last">%s</b></li>`,
			i%4, esc(s.Name), esc(s.Name), esc(last))
	}
	b.WriteString(`</ul>`)
}

// summary says each series' newest value, for a screen reader.
func (c Chart) summary() string {
	var parts []string
	for _, s := range c.Series {
		if v := s.Last(); !math.IsNaN(v) {
			parts = append(parts, s.Name+" now "+short(v)+c.Unit)
		}
	}
	return strings.Join(parts, ", ")
}

// writeLine writes a series as a polyline (one per run without gaps), with
// a dot on its newest point so a one-point run still shows.
func writeLine(b *strings.Builder, class string, s Series, x func(int) float64, y func(float64) float64) {
	var run []string
	flush := func() {
		if len(run) > 1 {
			fmt.Fprintf(b, `<polyline class="%s" data-series="%s" points="%s"/>`, class, esc(s.Name), strings.Join(run, " "))
		}
		run = run[:0]
	}
	lastI := -1
	for i, v := range s.Values {
		if math.IsNaN(v) {
			flush()
			continue
		}
		run = append(run, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
		lastI = i
	}
	flush()
	if lastI >= 0 {
		fmt.Fprintf(b, `<circle class="%s chart-dot" cx="%.1f" cy="%.1f" r="2.5"/>`, class, x(lastI), y(s.Values[lastI]))
	}
}

// valueRange is the y axis: from min(0, lowest) to the highest value,
// never empty.
func valueRange(series []Series) (lo, hi float64) {
	hi = math.Inf(-1)
	for _, s := range series {
		for _, v := range s.Values {
			if !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(hi, -1) || hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// Spark is a sparkline: one series drawn small, scaled between its own
// lowest and highest values, beside its newest value.
type Spark struct {
	Name   string
	Values []float64
	// Times are the values' Unix milliseconds, for the tooltip's span.
	First, Last int64
}

// SVG renders the sparkline as a small inline SVG followed by the newest
// value and the range.
func (s Spark) SVG() template.HTML {
	var b strings.Builder
	vals := s.Values
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if len(vals) == 0 {
		return ""
	}
	label := fmt.Sprintf("%s: %d values from %s to %s, newest %s", s.Name, len(vals), short(lo), short(hi), short(vals[len(vals)-1]))
	fmt.Fprintf(&b, `<span class="spark" data-series="%s" data-points="%d">`, esc(s.Name), len(vals))
	fmt.Fprintf(&b, `<svg class="spark-svg" viewBox="0 0 %d %d" role="img" aria-label="%s">`, sparkW, sparkH, esc(label))
	span := hi - lo
	y := func(v float64) float64 {
		if span == 0 {
			return sparkH / 2
		}
		return 2 + (hi-v)/span*(sparkH-4)
	}
	x := func(i int) float64 {
		if len(vals) == 1 {
			return sparkW - 3
		}
		return 1 + float64(i)*(sparkW-4)/float64(len(vals)-1)
	}
	writeLine(&b, "spark-line", Series{Name: s.Name, Values: vals}, x, y)
	b.WriteString(`</svg>`)
	fmt.Fprintf(&b, ` <b class="spark-last">%s</b> <span class="hint spark-range">(%s–%s)</span></span>`, esc(short(vals[len(vals)-1])), esc(short(lo)), esc(short(hi)))
	return template.HTML(b.String())
}

// short formats a value for a label: whole numbers as they are, others to
// three significant digits, large ones with k or M.
func short(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// esc escapes text for an HTML attribute or element.
func esc(s string) string { return template.HTMLEscapeString(s) }
