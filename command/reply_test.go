package command

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// TestParseReplyFallbackStartsAfresh: a reply scanReply gives up on
// part way (here at a key it does not know) is decoded by encoding/json
// into an empty payload, not into what the scan had filled in. The
// scan's cmd_id is a slice of the payload: json.RawMessage decodes into
// the slice it holds, which wrote over the payload while the decoder
// read it; the decoder panicked ("data changing underfoot"), which took
// the server down, or read another cmd_id than encoding/json does.
func TestParseReplyFallbackStartsAfresh(t *testing.T) {
	for _, s := range []string{
		`{"cmd_id":"1","cmd_id":"246217382764544","x":1,"code":0}`,
		`{"cmd_id":"9","cmd_id":"8","x":1,"code":0}`,
		`{"cmd_id":"77","code":0,"cmd_id":"66","Message":"m"}`,
	} {
		var want replyPayload
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatal(err)
		}
		payload := []byte(s)
		r, err := parseReplyRecovering(t, payload)
		if err != nil {
			t.Errorf("ParseReply(%s): %v", s, err)
			continue
		}
		if got := strconv.FormatInt(r.ID, 10); got != string(bytes.Trim(want.CmdID, `"`)) {
			t.Errorf("ParseReply(%s) read cmd_id %d, encoding/json %s", s, r.ID, want.CmdID)
		}
		if !bytes.Equal(payload, []byte(s)) {
			t.Errorf("ParseReply(%s) changed the payload to %s", s, payload)
		}
	}
}

func parseReplyRecovering(t *testing.T, payload []byte) (r Reply, err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("ParseReply(%s) panicked: %v", payload, p)
		}
	}()
	return ParseReply(payload, nil)
}

// FuzzParseReply: whatever a device publishes, ParseReply neither panics
// nor changes the payload (the connection's buffer).
func FuzzParseReply(f *testing.F) {
	for _, c := range replyCases {
		f.Add([]byte(c))
	}
	f.Add([]byte(`{"cmd_id":"1","cmd_id":"2345","x":1,"code":0}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		orig := bytes.Clone(payload)
		_, _ = parseReplyRecovering(t, payload)
		if !bytes.Equal(payload, orig) {
			t.Fatalf("ParseReply(%q) changed the payload to %q", orig, payload)
		}
	})
}
