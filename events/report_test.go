package events

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseReportStrict: a report means one thing or is refused: keys in
// their exact case and each once, values of their type (null is none),
// no NUL or control characters in the name, no NUL in the content, a
// time within 2^53-1, at most 64 KiB in all.
func TestParseReportStrict(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct{ payload, why string }{
		{`{"Name":"n","TYPE":1}`, `"Name"`},
		{`{"name":"n","type":1,"Type":2}`, `"Type"`},
		{`{"name":"n","type":1,"type":2}`, `"type" appears twice`},
		{`{"name":"a","name":"b","type":0}`, `"name" appears twice`},
		{`{"name":"n","type":0,"content":null}`, "content"},
		{`{"name":null,"type":0}`, "name"},
		{`{"name":"n","type":null}`, "type"},
		{`{"name":"n","type":0,"time":null}`, "time"},
		{`{"name":"n","type":0,"content":5}`, "content"},
		{`{"name":"a\u0000b","type":0}`, "control"},
		{"{\"name\":\"a\x01b\",\"type\":0}", "not a JSON object"}, // raw control characters are not JSON
		{`{"name":"a\nb","type":0}`, "control"},
		{`{"name":"n","type":0,"content":"x\u0000y"}`, "NUL"},
		{`{"name":"n","type":0,"time":9007199254740992}`, "time"},
		{`{"name":"n","type":0,"time":1e3}`, "time"},
		{`{"name":"n","type":1.0}`, "type"},
		{`{"name":"n","type":0} {}`, "follows"},
		{`{"name":"n","type":0}` + strings.Repeat(" ", MaxPayload), "at most 65536 bytes"},
	} {
		if r, err := ParseReport([]byte(tc.payload), now); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseReport(%.80q) = %+v, %v; want ErrMalformed saying %q", tc.payload, r, err, tc.why)
		}
	}
	for _, tc := range []struct {
		payload string
		want    Report
	}{
		{`{"name":"n","type":2,"time":9007199254740991}`, Report{Name: "n", Type: 2, Time: 9007199254740991}},
		{`{"name":"n","type":0,"content":"line 1\nline 2\ttab","extra":{"a":[1]}}`, Report{Name: "n", Content: "line 1\nline 2\ttab", Time: now.UnixMilli()}},
		{` { "name" : "n" , "type" : 1 } `, Report{Name: "n", Type: 1, Time: now.UnixMilli()}},
	} {
		if r, err := ParseReport([]byte(tc.payload), now); err != nil || r != tc.want {
			t.Errorf("ParseReport(%q) = %+v, %v; want %+v", tc.payload, r, err, tc.want)
		}
	}
}
