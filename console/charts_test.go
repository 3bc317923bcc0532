package console

import (
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// polyline returns the points of the chart line of series name inside
// the figure id of body, "" when there is none.
func polyline(body, id, name string) string {
	fig := regexp.MustCompile(`(?s)<figure class="chart" id="` + id + `">.*?</figure>`).FindString(body)
	m := regexp.MustCompile(`<polyline class="chart-line series-\d" data-series="` + regexp.QuoteMeta(name) + `" points="([^"]*)"`).FindStringSubmatch(fig)
	if m == nil {
		return ""
	}
	return m[1]
}

// legendValue is the newest value the legend of figure id gives series name.
func legendValue(body, id, name string) string {
	fig := regexp.MustCompile(`(?s)<figure class="chart" id="` + id + `">.*?</figure>`).FindString(body)
	m := regexp.MustCompile(`data-series="` + regexp.QuoteMeta(name) + `"><span class="chart-key"></span>[^<]*<b class="chart-last">([^<]*)</b>`).FindStringSubmatch(fig)
	if m == nil {
		return ""
	}
	return m[1]
}

func TestOverviewCharts(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	other := e.createApp("orchard")
	records := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricRecords}, []string{"app", "type"})
	connected := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricConnected})
	backlog := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricBacklog}, []string{"app"})
	appended := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricEvents}, []string{"type"})
	e.reg.MustRegister(records, connected, backlog, appended)

	e.createDevices(a, "dev-1", "dev-2", "dev-3")
	e.createDevices(other, "tree-1")
	b := e.browser()
	p := b.loginAdmin()
	if got := p.text("overview-devices"); got != "4" {
		t.Errorf("the admin's overview shows %q devices, want 4", got)
	}
	if !regexp.MustCompile(`data-app="` + a.Key + `">(?s:.*?)class="app-devices num">3<`).MatchString(p.body) {
		t.Error("the app's device count is not in its row")
	}
	for _, id := range []string{"chart-messages", "chart-online", "chart-telemetry", "chart-backlog"} {
		if !p.has(`id="` + id + `"`) {
			t.Fatalf("the overview has no chart %s", id)
		}
	}
	if !p.has("The chart starts once this node has sampled") {
		t.Error("a chart with one sample does not say why it is empty")
	}

	// Five minutes: each minute greenhouse sends i+1 messages and two are
	// delivered; orchard sends 10; i devices are online; 3 telemetry
	// events a minute.
	for i := range 5 {
		records.WithLabelValues(a.Key, "0").Add(float64(i + 1))
		records.WithLabelValues(a.Key, "4").Add(2)
		records.WithLabelValues(other.Key, "0").Add(10)
		connected.Set(float64(i))
		appended.WithLabelValues("device.up").Add(3)
		appended.WithLabelValues("device.online").Add(1)
		backlog.WithLabelValues(a.Key).Set(float64(10 * i))
		e.c.metrics.sample(e.c.log)
	}
	p = b.get("/console/")
	// The samples taken at New and five more, plus the registry now:
	// six increases, the last (since the newest sample) 0.
	sent := polyline(p.body, "chart-messages", "sent")
	if n := len(strings.Fields(sent)); n != 6 {
		t.Fatalf("sent line has %d points, want 6: %q", n, sent)
	}
	if got := legendValue(p.body, "chart-messages", "sent"); got != "0/min" {
		t.Errorf("sent now %q", got)
	}
	if polyline(p.body, "chart-messages", "delivered") == "" || polyline(p.body, "chart-messages", "failed") == "" {
		t.Error("delivered or failed line missing")
	}
	if got := legendValue(p.body, "chart-online", "connected"); got != "4" {
		t.Errorf("devices online now %q, want 4", got)
	}
	if got := legendValue(p.body, "chart-backlog", "backlog"); got != "40" {
		t.Errorf("backlog now %q, want 40", got)
	}
	// The highest sent increase (10+5) is the top of the y axis.
	if !regexp.MustCompile(`(?s)id="chart-messages".*?<text class="chart-label"[^>]*>15</text>`).MatchString(p.body) {
		t.Error("the messages chart's axis does not reach 15/min")
	}
	if polyline(p.body, "chart-telemetry", "device.up") == "" {
		t.Error("no telemetry line")
	}

	// An app owner's overview: its own app's figures only.
	o := e.browser()
	o.loginApp(a)
	p = o.get("/console/")
	if got := p.text("overview-devices"); got != "3" {
		t.Errorf("owner's devices %q, want 3", got)
	}
	if got := p.text("overview-sent"); got != "15" {
		t.Errorf("owner's sent %q, want 15 (its own app's)", got)
	}
	if got := p.text("overview-delivered"); got != "10" {
		t.Errorf("owner's delivered %q, want 10", got)
	}
	if p.has(`id="chart-online"`) || p.has(`id="chart-telemetry"`) {
		t.Error("an app owner sees the service's charts")
	}
	if polyline(p.body, "chart-messages", "sent") == "" || legendValue(p.body, "chart-backlog", "backlog") != "40" {
		t.Errorf("owner's charts:\n%s", p.body)
	}
}

func TestChartSVG(t *testing.T) {
	c := Chart{ID: "c", Title: `<b>"x"</b>`, From: "5 min ago", To: "now", Series: []Series{
		{"a", []float64{1, 2, math.NaN(), 4}},
		{"<script>", []float64{3, 3}},
	}}
	out := string(c.SVG())
	if strings.Contains(out, "<script>") || strings.Contains(out, "<b>") {
		t.Fatalf("names are not escaped:\n%s", out)
	}
	// The gap splits a's line: the run 1,2 is a line; 4 alone is a dot.
	if n := strings.Count(out, `data-series="a" points=`); n != 1 {
		t.Errorf("a has %d polylines, want 1", n)
	}
	if n := strings.Count(out, `chart-dot`); n != 2 {
		t.Errorf("%d dots, want one per series", n)
	}
	if out := string((Chart{ID: "e", Title: "empty", Series: []Series{{"a", []float64{1}}}}).SVG()); !strings.Contains(out, "chart-empty") || strings.Contains(out, "<svg") {
		t.Errorf("one point drew a chart:\n%s", out)
	}
	s := string(Spark{Name: "temp", Values: []float64{20, 21.5, 19}}.SVG())
	if !strings.Contains(s, `data-points="3"`) || !strings.Contains(s, `<b class="spark-last">19</b>`) || !strings.Contains(s, "19–21.5") {
		t.Errorf("spark:\n%s", s)
	}
}
