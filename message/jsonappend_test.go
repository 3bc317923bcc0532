package message

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/devmsg/devmsg/errdefs"
)

var jsonStrings = []string{
	"", "dev-1", "a b", `quote " and \ backslash`, "<tag>&amp;", "tab\tnewline\n", "\x00\x1f\x7f",
	"ünïcödé", "日本語", "line\u2028sep\u2029", "bad \xff utf-8", `device "x" not found`,
}

// TestAppendersMatchMarshal checks that the hand-written encoders write
// exactly what json.Marshal writes: stored batch answers and device
// payloads must not change with them.
func TestAppendersMatchMarshal(t *testing.T) {
	for _, s := range jsonStrings {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("string %q: got %s, want %s", s, got, want)
		}
		for _, r := range []BatchResult{
			{DeviceName: s, Code: 0, MsgID: 1234567890123},
			{DeviceName: s, Code: ErrCodeQueueFull, MsgID: 7, Message: s},
			{DeviceName: s, Code: CodeInvalidDevice, Message: "device " + s + " not found"},
			{DeviceName: s, Code: -1},
		} {
			want, _ := json.Marshal(r)
			if got := appendBatchResult(nil, r); !bytes.Equal(got, want) {
				t.Errorf("result %+v: got %s, want %s", r, got, want)
			}
		}
		if got, want := errdefs.NotFound("device", s).Error(), "device "+strconv.Quote(s)+" not found"; got != want {
			t.Errorf("device-gone message %q, appendDeviceResult writes %q", got, want)
		}
		for _, after := range []string{queueFullAnswer, " not found", " odd: \"<&>\"\n"} {
			for _, id := range []int64{0, 1234567890123} {
				r := BatchResult{DeviceName: s, Code: ErrCodeQueueFull, MsgID: id, Message: "device " + strconv.Quote(s) + after}
				want, _ := json.Marshal(r)
				if got := appendDeviceResult(nil, s, r.Code, id, after); !bytes.Equal(got, want) {
					t.Errorf("device result %+v: got %s, want %s", r, got, want)
				}
			}
		}
		p := payload{MsgID: "123", Body: s, SentTime: 1764000000, ExpireTime: -5}
		want, _ = json.Marshal(p)
		if got := appendPayload(nil, p); !bytes.Equal(got, want) {
			t.Errorf("payload %+v: got %s, want %s", p, got, want)
		}
	}
}

// TestAppendersDoNotAllocate checks what the appenders are for: with room
// in the buffer, encoding an answer or a payload of plain ASCII allocates
// nothing (json.Marshal allocates several times per value).
func TestAppendersDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 512)
	r := BatchResult{DeviceName: "dev-000123", Code: ErrCodeQueueFull, MsgID: 1234567890123, Message: "device \"dev-000123\" queue full: 1000 messages pending"}
	p := payload{MsgID: "1234567890123", Body: "1764000000123456789", SentTime: 1764000000, ExpireTime: 1764003600}
	if n := testing.AllocsPerRun(100, func() { buf = appendBatchResult(buf[:0], r) }); n != 0 {
		t.Errorf("appendBatchResult: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { buf = appendDeviceResult(buf[:0], r.DeviceName, r.Code, r.MsgID, queueFullAnswer) }); n != 0 {
		t.Errorf("appendDeviceResult: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { buf = appendPayload(buf[:0], p) }); n != 0 {
		t.Errorf("appendPayload: %v allocations", n)
	}
}
