package console

import (
	"encoding/json"
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// timeLayout is how the console shows times: UTC, to the second.
const timeLayout = "2006-01-02 15:04:05 UTC"

var funcs = template.FuncMap{
	// join joins strings with sep (a device's tags in a form field).
	"join": strings.Join,
	// unix formats Unix seconds; 0 is "—".
	"unix": func(s int64) string {
		if s == 0 {
			return "—"
		}
		return time.Unix(s, 0).UTC().Format(timeLayout)
	},
	// unixISO is Unix seconds for a datetime attribute.
	"unixISO": func(s int64) string { return time.Unix(s, 0).UTC().Format(time.RFC3339) },
	// millis formats Unix milliseconds; 0 is "—".
	"millis": func(ms int64) string {
		if ms == 0 {
			return "—"
		}
		return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	// clock is Unix milliseconds as the time of day, for a one-line row.
	"clock":     func(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04:05.000") },
	"millisISO": func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) },
	// unixString formats the API's string seconds ("" when never).
	"unixString": func(s string) string {
		n, err := strconv.ParseInt(s, 10, 64)
		if s == "" || err != nil || n == 0 {
			return "never"
		}
		return time.Unix(n, 0).UTC().Format(timeLayout)
	},
	"recordName": recordName,
	// raw shows a JSON value as written: strings with their quotes, so
	// "5" and 5 look different.
	"raw": func(v json.RawMessage) string {
		if len(v) == 0 {
			return "—"
		}
		return string(v)
	},
	"clip": clip,
	// count formats a metric value.
	"count": func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) },
	"inc":   func(i int) int { return i + 1 },
	// execKind groups a job execution's state for its colour.
	"execKind": execKind,
	// recentJobs and executionsPerPage are the jobs pages' sizes.
	"recentJobs":        func() int { return recentJobs },
	"executionsPerPage": func() int { return executionsPerPage },
	// trendPoints is the most values a device page's sparkline shows.
	"trendPoints": func() int { return trendPoints },
}

// clip cuts s to at most n bytes, at a UTF-8 character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
