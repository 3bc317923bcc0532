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
