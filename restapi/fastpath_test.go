package restapi

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"
)

// The send path skips encoding/json for plain string literals and for a
// body that decodes cleanly; these tests hold the fast paths to what
// encoding/json (and the decoder's error messages) give.

var stringLiterals = []string{
	`"dev-1"`, `""`, `"a b c ~ ! @ # $ % ^ * ( ) _ + = { } [ ] | : ; ' , . ? / 0"`,
	`"a<b"`, `"a>b"`, `"a&b"`, `"tab\tx"`, `"q\"x"`, `"back\\x"`, `"\u0041"`, `"é"`,
	"\"del\x7f\"", "\"ctl\x01\"", `"\ud800"`, `"line` + "\u2028" + `"`, `"x`, `x"`, `"`, `1`, `null`,
}

func TestPlainStringMatchesEncodingJSON(t *testing.T) {
	for _, lit := range stringLiterals {
		raw := json.RawMessage(lit)
		s, ok := plainString(raw)
		if !ok {
			continue
		}
		var want string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Errorf("plainString(%s) accepted what encoding/json refuses: %v", lit, err)
			continue
		}
		if s != want {
			t.Errorf("plainString(%s) = %q, encoding/json %q", lit, s, want)
		}
		if enc, _ := json.Marshal(want); !bytes.Equal(enc, raw) {
			t.Errorf("plainString accepted %s, which json.Marshal writes as %s", lit, enc)
		}
	}
	for _, lit := range []string{`"a<b"`, `"a>b"`, `"a&b"`, `"q\"x"`, `"back\\x"`, `"é"`, "\"del\x7f\"", `1`} {
		if _, ok := plainString(json.RawMessage(lit)); ok {
			t.Errorf("plainString(%s) took the fast path", lit)
		}
	}
}

func TestCanonicalStringUnchangedByFastPath(t *testing.T) {
	for _, lit := range stringLiterals {
		raw := json.RawMessage(lit)
		want := raw
		var s string
		if lit[0] == '"' && json.Unmarshal(raw, &s) == nil {
			want, _ = json.Marshal(s)
		}
		if got := canonicalValue(raw); !bytes.Equal(got, want) {
			t.Errorf("canonicalValue(%s) = %s, want %s", lit, got, want)
		}
	}
}

func TestStringFieldFastPathAgrees(t *testing.T) {
	for _, lit := range stringLiterals {
		o := object{"f": json.RawMessage(lit)}
		got, _, gotErr := o.stringField("f", true)
		var want string
		wantErr := json.Unmarshal(o["f"], &want)
		if (gotErr == nil) != (wantErr == nil && validJSONText(o["f"]) && lit != "null") {
			t.Errorf("stringField(%s): err %v, encoding/json err %v", lit, gotErr, wantErr)
		}
		if gotErr == nil && got != want {
			t.Errorf("stringField(%s) = %q, want %q", lit, got, want)
		}
	}
}

// parseObject tries json.Unmarshal first; whatever it answers must be what
// the decoder alone answered, objects and error messages alike.
func TestParseObjectMatchesDecoder(t *testing.T) {
	bodies := []string{
		`{"seq_no":1,"device_name":"d","msg_body":"x"}`, " {\"a\":[1,2]} \n\t", `{}`, `{"a":1}{"b":2}`,
		`{"a":1} x`, `{"a":1`, `[1,2]`, `"s"`, `1`, `null`, ``, `  `, `{"a":1,"a":2}`, "{\"a\":\"\xff\"}",
		`{"a":1}]`, `{"a":{"b":null}}`,
	}
	for _, b := range bodies {
		got, gotErr := parseObject([]byte(b), "request body")
		want, wantErr := decodeObject([]byte(b), "request body")
		if errString(gotErr) != errString(wantErr) {
			t.Errorf("parseObject(%q) error %q, decoder %q", b, errString(gotErr), errString(wantErr))
			continue
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if !bytes.Equal(gj, wj) {
			t.Errorf("parseObject(%q) = %s, decoder %s", b, gj, wj)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The throttle reuses its HMACs: a reused one must be reset, or a pair's
// key would depend on the request before it.
func TestPairOfReusesHMACCleanly(t *testing.T) {
	th := newAuthThrottle(AuthSourceFailures, AuthIdentityFailures, AuthWindow, time.Now)
	want := func(source, user string) [32]byte {
		m := hmac.New(sha256.New, th.key)
		m.Write([]byte(source + "\x00" + user))
		return [32]byte(m.Sum(nil))
	}
	for i := 0; i < 3; i++ {
		for _, p := range [][2]string{{"10.0.0.1", "app-a"}, {"10.0.0.2", "app-b"}, {"2001:db8::/64", "admin"}} {
			if got := th.pairOf(p[0], p[1]); got != want(p[0], p[1]) {
				t.Fatalf("pairOf(%q, %q) round %d = %x, want %x", p[0], p[1], i, got, want(p[0], p[1]))
			}
		}
	}
}

func TestCanonicalNumberUnchangedByFastPath(t *testing.T) {
	for _, lit := range []string{"0", "-0", "7", "-7", "007", "1.0", "1e3", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "1.5", "-0.0"} {
		if got, want := canonicalValue(json.RawMessage(lit)), normalizeNumber(lit); string(got) != want {
			t.Errorf("canonicalValue(%s) = %s, want %s", lit, got, want)
		}
	}
}

var objectBodies = []string{
	`{"seq_no":1,"device_name":"dev-1","msg_body":"hello","ttl":60}`, ` { "a" : 1 , "b" : "x" } `, `{}`, " {}\n",
	`{"a":1,"a":2}`, `{"a":null,"b":true,"c":false}`, `{"n":-0.5e+10,"m":0,"k":1E3}`, `{"a":01}`, `{"a":1.}`,
	`{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":nullx}`, `{"a":"x\"y"}`, `{"a\u0041":1}`, `{"a":"é"}`, "{\"a\":\"\xff\"}",
	"{\"a\":\"x\ty\"}", `{"a":{"b":1}}`, `{"a":[1]}`, `{"a":1,}`, `{,}`, `{"a" 1}`, `{"a":1}x`, `{"a":1}{}`, `{"a":1`,
	`{"a`, `{`, `[]`, `null`, ``, `"x"`, `{"":1}`, `{"a":"<&>"}`, "{\"a\":\"\x7f\"}", `{"a":-01}`, `{"a":2e-3}`,
	`{"é":1}`, "{\"k\x7f\":1}", "{\"k\xff\":1}", `{"a":1.2.3}`, `{"a":truex}`,
}

func TestScanFlatObjectMatchesUnmarshal(t *testing.T) {
	flat := 0
	for _, b := range objectBodies {
		if checkFlatScan(t, []byte(b)) {
			flat++
		}
	}
	if flat < 10 {
		t.Errorf("only %d bodies took the scanner", flat)
	}
}

func FuzzScanFlatObject(f *testing.F) {
	for _, b := range objectBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkFlatScan(t, b) })
}

// checkFlatScan fails t when scanFlatObject answers raw differently from
// json.Unmarshal; it reports whether the scanner answered.
func checkFlatScan(t *testing.T, raw []byte) bool {
	t.Helper()
	got, ok := scanFlatObject(raw)
	if !ok {
		return false
	}
	var want object
	if err := json.Unmarshal(raw, &want); err != nil || want == nil {
		t.Errorf("scanFlatObject(%q) accepted what json.Unmarshal refuses (%v)", raw, err)
		return true
	}
	if len(got) != len(want) {
		t.Errorf("scanFlatObject(%q) has %d fields, json.Unmarshal %d", raw, len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || string(g) != string(v) {
			t.Errorf("scanFlatObject(%q)[%q] = %q, json.Unmarshal %q", raw, k, g, v)
		}
	}
	return true
}
