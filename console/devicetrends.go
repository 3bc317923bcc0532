package console

import (
	"encoding/json"
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/devmsg/devmsg/apitypes"
)

// A device page shows a sparkline per numeric field of the device's
// recent telemetry and reported properties, read from the app's event
// log through the pull API. The pull reads forward from a cursor, so the
// page looks back from the newest event over a growing span of ids until
// it has enough values (or has read from the oldest kept event), within
// a budget of pulls: each counts against the app's query rate limit.
const (
	// trendPoints is the most values a sparkline shows.
	trendPoints = 60
	// trendFields is the most sparklines of each kind.
	trendFields = 12
	// trendPulls is the most pulls one device page makes for them.
	trendPulls = 8
	// trendSpan is the first span of ids looked back over; each round
	// multiplies it by trendGrowth.
	trendSpan, trendGrowth = 2000, 16
)

// deviceTrends are a device's sparklines.
type deviceTrends struct {
	Telemetry  []Spark
	Properties []Spark
	// Note says why there are none or why they may be incomplete.
	Note string
}

// deviceTrends reads the device's recent device.up and
// property.reported events and draws their numeric fields. A failed read
// leaves a note, never fails the page.
func (c *Console) deviceTrends(q *req, name string) deviceTrends {
	var t deviceTrends
	evs, err := c.recentDeviceEvents(q, name)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			t.Note = "Recent values could not be read: " + ae.Message
		} else {
			c.log.Warn("console: device trends", "app", q.key, "device", name, "err", err)
			t.Note = "Recent values could not be read."
		}
		return t
	}
	up, props := newFieldSeries(), newFieldSeries()
	for _, e := range evs {
		switch e.Type {
		case "device.up":
			telemetryFields(e, up.add)
		case "property.reported":
			propertyFields(e, props.add)
		}
	}
	t.Telemetry, t.Properties = up.sparks(), props.sparks()
	return t
}

// recentDeviceEvents returns the device's newest telemetry and property
// reports (at least trendPoints of them when the log has them and the
// pull budget reaches), oldest first.
func (c *Console) recentDeviceEvents(q *req, name string) ([]apitypes.Event, error) {
	newest, err := c.newestEvent(q)
	if err != nil || newest == 0 {
		return nil, err
	}
	f := eventFilter{Types: []string{"device.up", "property.reported"}, Device: name}
	pulls := 1
	var best []apitypes.Event
	for span := int64(trendSpan); ; span *= trendGrowth {
		after := max(newest-span, 0)
		var got []apitypes.Event
		cursor, complete := after, false
		for pulls < trendPulls {
			page, err := f.pull(q, cursor, 1000, 0)
			pulls++
			if err != nil {
				var ae *apiError
				if errors.As(err, &ae) && ae.Status == 400 && after > 0 {
					// Trimmed past the cursor: read from the oldest.
					after, cursor, got = 0, 0, nil
					continue
				}
				return best, err
			}
			got = append(got, page.Events...)
			next := page.next(cursor)
			if next >= newest || next == cursor {
				complete = true
				break
			}
			cursor = next
		}
		if !complete {
			return best, nil // out of pulls: the last complete round
		}
		best = got
		if len(best) >= trendPoints || after == 0 || pulls >= trendPulls {
			return best, nil
		}
	}
}

// fieldSeries collects values by field name, in the order they come.
type fieldSeries struct {
	vals  map[string][]float64
	times map[string][2]int64
}

func newFieldSeries() *fieldSeries {
	return &fieldSeries{vals: map[string][]float64{}, times: map[string][2]int64{}}
}

func (fs *fieldSeries) add(field string, v float64, at int64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if _, ok := fs.vals[field]; !ok && len(fs.vals) >= trendFields {
		return
	}
	vs := append(fs.vals[field], v)
	if len(vs) > trendPoints {
		vs = vs[len(vs)-trendPoints:]
	}
	fs.vals[field] = vs
	t := fs.times[field]
	if t[0] == 0 {
		t[0] = at
	}
	t[1] = at
	fs.times[field] = t
}

// sparks draws each field, by name.
func (fs *fieldSeries) sparks() []Spark {
	names := make([]string, 0, len(fs.vals))
	for n := range fs.vals {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Spark, 0, len(names))
	for _, n := range names {
		out = append(out, Spark{Name: n, Values: fs.vals[n], First: fs.times[n][0], Last: fs.times[n][1]})
	}
	return out
}

// telemetryFields reads the numbers of a telemetry payload: a payload
// that is a number is the field named by the topic's last level ("temp"
// for up/temp, "up" for up); a JSON object gives each numeric member,
// nested members joined with dots, after the topic's level when the
// topic has one.
func telemetryFields(e apitypes.Event, add func(string, float64, int64)) {
	var up struct {
		Topic    string `json:"topic"`
		Payload  string `json:"payload"`
		Encoding string `json:"encoding"`
	}
	if json.Unmarshal(e.Data, &up) != nil || up.Encoding == "base64" {
		return
	}
	level := up.Topic[strings.LastIndex(up.Topic, "/")+1:]
	p := strings.TrimSpace(up.Payload)
	if v, err := strconv.ParseFloat(p, 64); err == nil {
		add(level, v, e.Time)
		return
	}
	var obj map[string]any
	if json.Unmarshal([]byte(p), &obj) != nil {
		return
	}
	prefix := ""
	if up.Topic != "up" {
		prefix = level + "."
	}
	numbers(prefix, obj, func(k string, v float64) { add(k, v, e.Time) }, 0)
}

// numbers calls fn for each numeric member of obj, nested ones (up to a
// few levels) with their path.
func numbers(prefix string, obj map[string]any, fn func(string, float64), depth int) {
	for k, v := range obj {
		switch v := v.(type) {
		case float64:
			fn(prefix+k, v)
		case map[string]any:
			if depth < 3 {
				numbers(prefix+k+".", v, fn, depth+1)
			}
		}
	}
}

// propertyFields reads the numeric properties of a property report.
func propertyFields(e apitypes.Event, add func(string, float64, int64)) {
	var r struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(e.Data, &r) != nil {
		return
	}
	for k, raw := range r.Properties {
		var v float64
		if json.Unmarshal(raw, &v) == nil {
			add(k, v, e.Time)
		}
	}
}
