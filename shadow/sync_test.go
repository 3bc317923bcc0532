package shadow

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/store"
)

func TestParseReport(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		version int64
		props   string // compact JSON of the parsed properties
		wantErr string
	}{
		{"minimal", `{"properties":{"t":1}}`, 0, `{"t":1}`, ""},
		{"full", `{"version":7,"properties":{"t":21.5,"mode":"eco"},"sdk_ver":"1.2","app_ver":"3"}`, 7, `{"mode":"eco","t":21.5}`, ""},
		{"spaces compacted", `{"properties":{"t": 1 }}`, 0, `{"t":1}`, ""},
		{"not json", `temp=1`, 0, "", "JSON object"},
		{"array", `[1]`, 0, "", "JSON object"},
		{"no properties", `{"version":2}`, 2, "", "properties"},
		{"empty properties", `{"properties":{}}`, 0, "", "properties"},
		{"zero version", `{"version":0,"properties":{"t":1}}`, 0, "", "positive"},
		{"negative version", `{"version":-3,"properties":{"t":1}}`, 0, "", "positive"},
		{"fractional version", `{"version":1.5,"properties":{"t":1}}`, 0, "", "JSON object"},
		{"bool value", `{"properties":{"on":true}}`, 0, "", `"on"`},
		{"null value", `{"properties":{"on":null}}`, 0, "", `"on"`},
		{"object value", `{"version":4,"properties":{"o":{}}}`, 4, "", `"o"`},
		{"empty name", `{"properties":{"":1}}`, 0, "", "name"},
		{"long sdk_ver", `{"properties":{"t":1},"sdk_ver":"` + strings.Repeat("v", MaxVersionLen+1) + `"}`, 0, "", "sdk_ver"},
		{"sdk_ver not a string", `{"properties":{"t":1},"sdk_ver":1}`, 0, "", "JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseReport([]byte(tc.payload))
			if r.Version != tc.version {
				t.Errorf("version %d, want %d", r.Version, tc.version)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(r.Properties)
			if string(got) != tc.props {
				t.Errorf("properties %s, want %s", got, tc.props)
			}
		})
	}
	many := map[string]int{}
	for i := range MaxReportProperties + 1 {
		many[strings.Repeat("p", i+1)] = i
	}
	b, _ := json.Marshal(map[string]any{"properties": many})
	if _, err := ParseReport(b); err == nil {
		t.Errorf("a report of %d properties was accepted", len(many))
	}
}

func TestDesiredDocument(t *testing.T) {
	sh := store.NewShadow()
	if got := string(DesiredDocument(sh)); got != `{"version":0,"properties":{},"time":0}` {
		t.Errorf("never set: %s", got)
	}
	sh.LastDesiredVersion, sh.LastDesiredSTime = 3, 1700000000123
	sh.Properties["a"] = store.Property{DesiredValue: json.RawMessage(`1`), DesiredSTime: 1}
	sh.Properties["b"] = store.Property{ReportedValue: json.RawMessage(`"x"`)} // reported only
	if got := string(DesiredDocument(sh)); got != `{"version":2,"properties":{"a":1},"time":1700000000123}` {
		t.Errorf("after two sets: %s", got)
	}
}

// FuzzParseReport feeds arbitrary device payloads to the report parser:
// it must never panic, and what it accepts must be storable as is.
func FuzzParseReport(f *testing.F) {
	for _, s := range []string{`{"properties":{"t":1}}`, `{"version":9,"properties":{"s":"x"},"sdk_ver":"1"}`, `{}`, `[]`, `"`, `{"properties":{"\u0000":1}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := ParseReport(payload)
		if err != nil {
			return
		}
		if r.Version < 0 || len(r.Properties) == 0 || len(r.Properties) > MaxReportProperties {
			t.Fatalf("accepted %q as %+v", payload, r)
		}
		for name, v := range r.Properties {
			if ValidateName(name) != nil || !IsNumberOrString(v) {
				t.Fatalf("accepted property %q = %s", name, v)
			}
		}
	})
}
