package restapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

var plainArrayCases = []string{
	`[]`, `[ ]`, `["a"]`, `["a","b"]`, `[ "a" , "b" ]`, "[\n\t\"a\",\r\n\"b\"\n]",
	`["bench-000001","bench-000002"]`, `["a b","c:d@e.f"]`, `[""]`, `["",""]`,
	`["a\"b"]`, `["a\\b"]`, `["\u0041"]`, `["<a>"]`, `["a&b"]`, `["é"]`, `["\ud83d\ude00"]`,
	`["a",null]`, `[null]`, `[1]`, `["a",1]`, `[["a"]]`, `[{"a":"b"}]`, `["a",true]`,
	`["a","a"]`, `{"a":"b"}`, `"a"`, `null`,
}

// The fast reads of an array of plain strings give what the decoder's
// way gives: the same names, the same canonical bytes.
func TestPlainArrayMatchesDecoder(t *testing.T) {
	for _, c := range plainArrayCases {
		t.Run(c, func(t *testing.T) { checkPlainArray(t, []byte(c)) })
	}
}

func FuzzPlainArray(f *testing.F) {
	for _, c := range plainArrayCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) || len(raw) == 0 || raw[0] != '[' {
			return // values reach these functions from a decoded object, trimmed
		}
		checkPlainArray(t, raw)
	})
}

func checkPlainArray(t *testing.T, raw []byte) {
	t.Helper()
	got, gotOK := stringArray(raw)
	want, wantOK := decodeStringArray(raw)
	if gotOK != wantOK || !reflect.DeepEqual(got, want) {
		t.Errorf("stringArray(%s) = %q %v, decoder %q %v", raw, got, gotOK, want, wantOK)
	}
	if raw[0] == '[' {
		if got, want := canonicalValue(raw), canonicalComposite(raw); !bytes.Equal(got, want) {
			t.Errorf("canonicalValue(%s) = %s, decoder %s", raw, got, want)
		}
	}
}

// A batch send's 1000 names are read, and fingerprinted, without a
// decoder: a few allocations, not a few per name.
func TestBatchNamesReadWithoutDecoder(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates for itself")
	}
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("%q", fmt.Sprintf("bench-%06d", i))
	}
	body := `{"seq_no":1,"device_names":[` + strings.Join(names, ",") + `],"msg_body":"x","ttl":3600}`
	obj, err := parseObject([]byte(body), "request body")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := parseDeviceNames(obj); err != nil || len(got) != 1000 || got[999] != "bench-000999" {
		t.Fatalf("parseDeviceNames = %d names, %v", len(got), err)
	}
	reads := testing.AllocsPerRun(20, func() {
		if _, err := parseDeviceNames(obj); err != nil {
			t.Fatal(err)
		}
	})
	prints := testing.AllocsPerRun(20, func() { fingerprint("POST /msg/v1/msgs", obj) })
	if reads > 5 || prints > 12 {
		t.Errorf("reading the names took %.0f allocations, the fingerprint %.0f; want at most 5 and 12", reads, prints)
	}
}

// BenchmarkBatchNames is the REST work on a batch send's 1000 names: the
// body, the names and the seq_no fingerprint.
func BenchmarkBatchNames(b *testing.B) {
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("%q", fmt.Sprintf("bench-%06d", i))
	}
	body := []byte(`{"seq_no":1,"device_names":[` + strings.Join(names, ", ") + `],"msg_body":"x","ttl":3600}`)
	b.ReportAllocs()
	for b.Loop() {
		obj, err := parseObject(body, "request body")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := parseDeviceNames(obj); err != nil {
			b.Fatal(err)
		}
		_ = fingerprint("POST /msg/v1/msgs", obj)
	}
}

var flatObjectCases = []string{
	`{}`, `{"a":1}`, `{"seq":12}`, `{"a":"x","b":2,"c":true,"d":null,"e":false}`, `{"b":1,"a":2}`, `{"a":1,"a":2}`,
	`{ "a" : 1 }`, `{"a":1.0}`, `{"a":-0}`, `{"a":01}`, `{"a":1e2}`, `{"a":"<x>"}`, `{"a":"\u0041"}`, `{"a":"é"}`,
	`{"é":1}`, `{"a\"b":1}`, `{"a":[1]}`, `{"a":{"b":1}}`, `{"url":"https://x/fw.bin","sha256":"ab","size":1024,"version":"1.2"}`,
	`{"size":1024,"url":"https://x/fw.bin"}`, `{"a":-5,"b":9223372036854775807,"c":9223372036854775808}`, `{"A":1,"a":2,"_":3}`,
}

// The fast canonical form of a flat object is the decoder's way's, byte
// for byte, and whatever it does not take goes the decoder's way.
func TestFlatObjectMatchesDecoder(t *testing.T) {
	for _, c := range flatObjectCases {
		if got, want := canonicalValue(json.RawMessage(c)), canonicalComposite(json.RawMessage(c)); !bytes.Equal(got, want) {
			t.Errorf("canonicalValue(%s) = %s, decoder %s", c, got, want)
		}
	}
}

func FuzzFlatObject(f *testing.F) {
	for _, c := range flatObjectCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) || len(raw) == 0 || raw[0] != '{' {
			return // values reach canonicalValue from a decoded object, trimmed
		}
		if got, want := canonicalValue(raw), canonicalComposite(raw); !bytes.Equal(got, want) {
			t.Errorf("canonicalValue(%s) = %s, decoder %s", raw, got, want)
		}
	})
}
