package jsonfast

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// seeds are the fuzz corpus and the inputs of the table tests: values of
// every kind, well formed and not, and the cases where devmsg's two
// former scanners followed different rules.
var seeds = []string{
	`"dev-1"`, `""`, `"a<b>&c"`, `"tab\tx"`, `"q\"x"`, `"\u0041\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`, `"é"`,
	"\"bad\xff\"", "\"del\x7f\"", "\"ctl\x01\"", `"\x"`, `"\u12"`, `"\u12g4"`, `"\/"`, `"x`, `"`, `"a\`,
	`0`, `-0`, `7`, `-7`, `01`, `-01`, `1.`, `1.5`, `.5`, `-`, `1e`, `1e+`, `2E-3`, `1.2.3`, `12x`, `+1`, `-0.5e+10`,
	`true`, `false`, `null`, `tru`, `nullx`, `nul`, `t`,
	`[]`, `[ ]`, `["a","b"]`, ` [ "a" , "b" ] `, `["a",1]`, `["a\"b"]`, `["a",]`, `[,]`, `["a"`, `[[[]]]`, `[1,[2,{"a":[3]}]]`,
	`{}`, ` { } `, `{"a":1}`, `{"a":1,"a":2}`, ` { "a" : "x" , "b" : null } `, `{"é":1}`, "{\"k\xff\":1}",
	"{\"k\x7f\":1}", `{"a\"b":1}`, `{"a":1,}`, `{,}`, `{"a" 1}`, `{"a":1}x`, `{"a":1}{}`, `{"a":1`, `{"a":tru}`,
	`{"a":{"b":[1,"}]\""]},"c":"d"}`, `{"x":"\u0041","y":"\q"}`, `{"tags":["a","b"],"flag":1}`,
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	``, ` `, `x`,
}

func TestScanAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		checkScan(t, []byte(s))
	}
}

// TestScanRules pins the rules where devmsg's two scanners differed and
// encoding/json decided: values end where the JSON grammar says (not at
// the next comma or brace), escapes are checked, a key is taken as it is
// only when its text is UTF-8.
func TestScanRules(t *testing.T) {
	for _, c := range []struct {
		name string
		fn   func([]byte, int) int
		in   string
		want int
	}{
		{"FlatValueEnd", FlatValueEnd, `tru,`, -1},
		{"FlatValueEnd", FlatValueEnd, `nullx`, 4},
		{"FlatValueEnd", FlatValueEnd, `1.2.3`, 3},
		{"FlatValueEnd", FlatValueEnd, `-}`, -1},
		{"FlatValueEnd", FlatValueEnd, `"a\"b"`, -1},
		{"FlatValueEnd", FlatValueEnd, "\"\xff\"", 3},
		{"ValueEnd", ValueEnd, `"a\"b"`, 6},
		{"ValueEnd", ValueEnd, `"a\xb"`, -1},
		{"ValueEnd", ValueEnd, `"\u00e9"`, 8},
		{"ValueEnd", ValueEnd, `"\u00g9"`, -1},
		{"ValueEnd", ValueEnd, `{"a":[tru]}`, -1},
		{"ValueEnd", ValueEnd, `{"a":[true]} `, 12},
		{"ValueEnd", ValueEnd, strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), 2 * MaxDepth},
		{"ValueEnd", ValueEnd, strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), -1},
		{"PlainStringEnd", PlainStringEnd, "\"a\xffb\" ", 5},
		{"PlainTextEnd", PlainTextEnd, "\"a\xffb\" ", -1},
		{"PlainTextEnd", PlainTextEnd, `"aé", `, 5},
		{"PlainTextEnd", PlainTextEnd, "\"del\x7f\"", 6},
		{"PlainArrayEnd", PlainArrayEnd, `[ "a" , "b" ]x`, 13},
		{"VerbatimStringEnd", VerbatimStringEnd, `"a b~", `, 6},
		{"VerbatimStringEnd", VerbatimStringEnd, `"a<b"`, -1},
		{"VerbatimStringEnd", VerbatimStringEnd, `"é"`, -1},
		{"LiteralEnd", LiteralEnd, `fals`, -1},
		{"LiteralEnd", LiteralEnd, ``, -1},
	} {
		if got := c.fn([]byte(c.in), 0); got != c.want {
			t.Errorf("%s(%q) = %d, want %d", c.name, c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in   string
		want bool
	}{
		{`{"é":1}`, true}, {"{\"k\x7f\":1}", true}, {"{\"k\xff\":1}", false}, {`{"a\u0041":1}`, false},
		{`{"a":tru}`, false}, {` {"a":1} `, true}, {`{"a":1} x`, false},
	} {
		if got := Object([]byte(c.in), FlatValueEnd, func(k, v []byte) bool { return true }); got != c.want {
			t.Errorf("Object(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in   string
		want bool
	}{
		{"dev-1", true}, {"", true}, {"a b~", true}, {"a<b", false}, {"a>b", false}, {"a&b", false}, {`a"b`, false},
		{`a\b`, false}, {"é", false}, {"del\x7f", false}, {"tab\t", false},
	} {
		if Verbatim(c.in) != c.want || Verbatim([]byte(c.in)) != c.want {
			t.Errorf("Verbatim(%q) = %v, want %v", c.in, !c.want, c.want)
		}
	}
}

// FuzzScan holds every function of the package to encoding/json: when
// one accepts the input and returns a value's end, json.Valid accepts the
// span, it is the whole value encoding/json's decoder reads there, and
// the text it hands back is what json.Unmarshal decodes.
func FuzzScan(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkScan(t, b) })
}

// checkScan fails t where a function of the package answers b
// differently from encoding/json.
func checkScan(t *testing.T, b []byte) {
	t.Helper()
	i := SkipSpace(b, 0)
	for _, f := range []struct {
		name string
		fn   func([]byte, int) int
	}{
		{"ValueEnd", ValueEnd}, {"FlatValueEnd", FlatValueEnd}, {"StringEnd", StringEnd},
		{"PlainStringEnd", PlainStringEnd}, {"PlainTextEnd", PlainTextEnd}, {"NumberEnd", NumberEnd},
		{"LiteralEnd", LiteralEnd}, {"PlainArrayEnd", PlainArrayEnd}, {"VerbatimStringEnd", VerbatimStringEnd},
	} {
		if end := f.fn(b, i); end >= 0 {
			checkSpan(t, f.name, b, i, end)
		}
	}
	checkStrings(t, b, i)
	checkPlainArray(t, b, i)
	checkObject(t, b, "FlatValueEnd", FlatValueEnd)
	checkObject(t, b, "ValueEnd", ValueEnd)
	// ValueEnd takes every valid value nested no deeper than MaxDepth
	// (counting every bracket overstates the depth).
	if json.Valid(b) && bytes.Count(b, []byte("{"))+bytes.Count(b, []byte("[")) <= MaxDepth {
		if end, want := ValueEnd(b, i), len(bytes.TrimRight(b, " \t\r\n")); end != want {
			t.Errorf("ValueEnd(%q) = %d; the valid value ends at %d", b, end, want)
		}
	}
}

// checkSpan fails t unless b[i:end] is valid JSON and the whole value
// encoding/json's decoder reads at b[i].
func checkSpan(t *testing.T, name string, b []byte, i, end int) {
	t.Helper()
	if end <= i || end > len(b) {
		t.Errorf("%s(%q, %d) = %d, out of the input", name, b, i, end)
		return
	}
	if !json.Valid(b[i:end]) {
		t.Errorf("%s(%q, %d) = %d: json.Valid refuses %q", name, b, i, end, b[i:end])
		return
	}
	var first json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(b[i:])).Decode(&first); err != nil || !bytes.Equal(first, b[i:end]) {
		t.Errorf("%s(%q, %d) = %d: the span %q is not the value encoding/json reads there (%q, %v)", name, b, i, end, b[i:end], first, err)
	}
}

// checkStrings holds the text PlainText and PlainTextEnd hand back to
// json.Unmarshal's, and Verbatim to json.Marshal's.
func checkStrings(t *testing.T, b []byte, i int) {
	t.Helper()
	if end := PlainTextEnd(b, i); end >= 0 {
		var want string
		if err := json.Unmarshal(b[i:end], &want); err != nil || want != string(b[i+1:end-1]) {
			t.Errorf("PlainTextEnd(%q) takes %q, which json.Unmarshal decodes to %q (%v)", b, b[i:end], want, err)
		}
	}
	if text, ok := PlainText(b); ok {
		var want string
		if err := json.Unmarshal(b, &want); err != nil || want != string(text) {
			t.Errorf("PlainText(%q) = %q, json.Unmarshal %q (%v)", b, text, want, err)
		}
	}
	if end := VerbatimStringEnd(b, i); end >= 0 {
		if enc, err := json.Marshal(string(b[i+1 : end-1])); err != nil || !bytes.Equal(enc, b[i:end]) {
			t.Errorf("VerbatimStringEnd(%q) takes %q, which json.Marshal writes as %s", b, b[i:end], enc)
		}
	}
	if Verbatim(b) {
		if enc, err := json.Marshal(string(b)); err != nil || string(enc) != `"`+string(b)+`"` {
			t.Errorf("Verbatim(%q), but json.Marshal writes %s", b, enc)
		}
	}
}

// checkPlainArray holds the elements StringArray hands out to the
// strings json.Unmarshal decodes, and its count and spaced to the array.
func checkPlainArray(t *testing.T, b []byte, i int) {
	t.Helper()
	for _, e := range []struct {
		name string
		fn   func([]byte, int) int
	}{{"PlainStringEnd", PlainStringEnd}, {"PlainTextEnd", PlainTextEnd}, {"VerbatimStringEnd", VerbatimStringEnd}} {
		var got []string
		end, n, spaced := StringArray(b, i, e.fn, func(start, end int) { got = append(got, string(b[start:end])) })
		if end < 0 {
			continue
		}
		checkSpan(t, "StringArray/"+e.name, b, i, end)
		if n != len(got) {
			t.Errorf("StringArray(%q, %s) counts %d elements, hands out %d", b, e.name, n, len(got))
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, b[i:end]); err == nil && spaced == bytes.Equal(compact.Bytes(), b[i:end]) {
			t.Errorf("StringArray(%q, %s): spaced %v, compact form %q", b, e.name, spaced, compact.Bytes())
		}
		if !utf8.Valid(b[i:end]) {
			continue
		}
		var want []string
		if err := json.Unmarshal(b[i:end], &want); err != nil || len(got) != len(want) {
			t.Errorf("StringArray(%q, %s) = %q, json.Unmarshal %q (%v)", b, e.name, got, want, err)
			continue
		}
		for k := range want {
			if got[k] != want[k] {
				t.Errorf("StringArray(%q, %s)[%d] = %q, json.Unmarshal %q", b, e.name, k, got[k], want[k])
			}
		}
	}
}

// checkObject holds what Object hands out to what json.Unmarshal decodes
// b to as an object of raw values (the last of duplicate keys winning).
func checkObject(t *testing.T, b []byte, name string, valueEnd func([]byte, int) int) {
	t.Helper()
	got := map[string]json.RawMessage{}
	if !Object(b, valueEnd, func(k, v []byte) bool {
		if cap(v) != len(v) {
			t.Errorf("Object(%q, %s) hands out %q with room after it", b, name, v)
		}
		got[string(k)] = v
		return true
	}) {
		return
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal(b, &want); err != nil || want == nil {
		t.Errorf("Object(%q, %s) accepted what json.Unmarshal refuses (%v)", b, name, err)
		return
	}
	if len(got) != len(want) {
		t.Errorf("Object(%q, %s) has %d keys, json.Unmarshal %d", b, name, len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || !bytes.Equal(g, v) {
			t.Errorf("Object(%q, %s)[%q] = %q, json.Unmarshal %q", b, name, k, g, v)
		}
	}
}

// TestByteTables checks each byte of the tables behind plain and Verbatim
// strings against encoding/json: a plain byte stands in a literal
// json.Unmarshal takes, a Verbatim byte is one json.Marshal writes as it
// is.
func TestByteTables(t *testing.T) {
	for c := 0; c < 256; c++ {
		lit := []byte{'"', byte(c), '"'}
		if wantPlain := c >= 0x20 && c != '"' && c != '\\'; plainByte[c] != wantPlain || plainByte[c] != json.Valid(lit) {
			t.Errorf("plainByte[%#x] = %v, json.Valid(%q) %v", c, plainByte[c], lit, json.Valid(lit))
		}
		if asciiPlainByte[c] != (plainByte[c] && c < 0x80) {
			t.Errorf("asciiPlainByte[%#x] = %v", c, asciiPlainByte[c])
		}
		if !verbatimByte[c] {
			continue
		}
		if enc, _ := json.Marshal(string(rune(c))); !bytes.Equal(enc, lit) {
			t.Errorf("verbatimByte[%#x], but json.Marshal writes %s", c, enc)
		}
	}
	for _, c := range []byte{'"', '\\', '<', '>', '&', 0x7f, 0x1f, 0x80} {
		if verbatimByte[c] {
			t.Errorf("verbatimByte[%#x] is true", c)
		}
	}
}
