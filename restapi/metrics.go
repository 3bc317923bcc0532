package restapi

import (
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec

	// series caches each label set's counter and histogram, so a request
	// costs no WithLabelValues (a hash of its labels and a lookup under a
	// lock). Nothing ever deletes a series from the vectors, so an entry
	// never goes stale; the label sets are bounded by routes, methods
	// and status codes.
	series sync.Map // seriesKey → *series
}

type seriesKey struct {
	method, route string
	code          int
}

type series struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// seriesOf returns the metrics of one label set.
func (m *metrics) seriesOf(method, route string, code int) *series {
	k := seriesKey{method, route, code}
	if s, ok := m.series.Load(k); ok {
		return s.(*series)
	}
	c := strconv.Itoa(code)
	s, _ := m.series.LoadOrStore(k, &series{
		requests: m.requests.WithLabelValues(method, route, c),
		latency:  m.latency.WithLabelValues(method, route, c),
	})
	return s.(*series)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "devmsg_http_requests_total",
			Help: "HTTP requests served, by method, route and status code.",
		}, []string{"method", "route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "devmsg_http_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by method, route and status code.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"method", "route", "code"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) middleware(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched" // keeps label cardinality bounded
	}
	s := m.seriesOf(c.Request.Method, route, c.Writer.Status())
	s.requests.Inc()
	s.latency.Observe(time.Since(start).Seconds())
}
