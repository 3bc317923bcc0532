package events

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParseReport feeds ParseReport what a device may publish on its
// event topic: it never panics, refuses with ErrMalformed only, and what
// it accepts keeps the rules of an event report (docs/device-protocol.md,
// "Event reports") and survives a round trip through its JSON.
func FuzzParseReport(f *testing.F) {
	for _, seed := range []string{
		`{"name":"door","content":"opened","type":1,"time":1700000000000}`,
		`{"name":"door","type":0}`,
		`{"name":"","type":0}`,
		`{"name":"door","type":3}`,
		`{"name":"door"}`,
		`{"name":"door","type":1,"time":-5}`,
		`{"name":"door","type":1.5}`,
		`[]`, `null`, `not json`, "\xff",
		`{"Name":"n","TYPE":1}`, `{"name":"n","type":1,"type":2}`, `{"name":"n","type":0,"content":null}`,
		`{"name":"a\u0000b","type":0}`, `{"name":"n","type":0,"content":"\u0000"}`,
		`{"name":"n","type":0,"time":9007199254740992}`, `{"name":"n","type":0} x`, `{"name":"n","type":0,"x":{"name":1}}`,
	} {
		f.Add([]byte(seed))
	}
	now := time.UnixMilli(1_700_000_000_123)
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := ParseReport(payload, now)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseReport(%q): %v, not ErrMalformed", payload, err)
			}
			return
		}
		if len(payload) > MaxPayload || len(r.Name) < 1 || len(r.Name) > MaxNameLen || len(r.Content) > MaxContent || r.Type < 0 || r.Type > 2 ||
			r.Time < 0 || r.Time > MaxReportTime || strings.ContainsFunc(r.Name, isControl) || strings.ContainsRune(r.Content, 0) {
			t.Fatalf("ParseReport(%q) accepted %+v", payload, r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseReport(b, now)
		if err != nil || again != r {
			t.Fatalf("round trip of %+v: %+v %v", r, again, err)
		}
	})
}
