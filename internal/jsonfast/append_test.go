package jsonfast

import (
	"bytes"
	"encoding/json"
	"testing"
)

var jsonStrings = []string{
	"", "dev-1", "a b", `quote " and \ backslash`, "<tag>&amp;", "tab\tnewline\n", "\x00\x1f\x7f",
	"ünïcödé", "日本語", "line\u2028sep\u2029", "bad \xff utf-8", `device "x" not found`,
}

// TestAppendStringMatchesMarshal checks that AppendString writes exactly
// what json.Marshal writes: stored batch answers and device payloads must
// not change with it.
func TestAppendStringMatchesMarshal(t *testing.T) {
	for _, s := range jsonStrings {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("string %q: got %s, want %s", s, got, want)
		}
	}
}

// TestAppendRawMatchesMarshal checks that AppendRaw writes what
// json.Marshal writes for a json.RawMessage, and fails where it fails.
func TestAppendRawMatchesMarshal(t *testing.T) {
	for _, raw := range []string{`{"a":1}`, `{ "a" : [1, 2] }`, `"<b>&"`, `"ü"`, `null`, `7`, `{"a":`, `nope`, "\t1"} {
		want, wantErr := json.Marshal(json.RawMessage(raw))
		got, err := AppendRaw([]byte("x"), json.RawMessage(raw))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("AppendRaw(%s): error %v, encoding/json's %v", raw, err, wantErr)
		}
		if err == nil && string(got) != "x"+string(want) {
			t.Errorf("AppendRaw(%s) = %s, want x%s", raw, got, want)
		}
	}
}
