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
// exactly what json.Marshal writes: stored batch answers must not change
// with them (package jsonfast and package delivery check the strings and
// the device payloads).
func TestAppendersMatchMarshal(t *testing.T) {
	for _, s := range jsonStrings {
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
	}
}

// TestAppendersDoNotAllocate checks what the appenders are for: with room
// in the buffer, encoding an answer of plain ASCII allocates nothing
// (json.Marshal allocates several times per value; package delivery
// checks the payloads).
func TestAppendersDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 512)
	r := BatchResult{DeviceName: "dev-000123", Code: ErrCodeQueueFull, MsgID: 1234567890123, Message: "device \"dev-000123\" queue full: 1000 messages pending"}
	if n := testing.AllocsPerRun(100, func() { buf = appendBatchResult(buf[:0], r) }); n != 0 {
		t.Errorf("appendBatchResult: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { buf = appendDeviceResult(buf[:0], r.DeviceName, r.Code, r.MsgID, queueFullAnswer) }); n != 0 {
		t.Errorf("appendDeviceResult: %v allocations", n)
	}
}

// TestPlainAnswersMatchGeneralWay: appendPlainAnswers writes what
// appendBatchResult and appendDeviceResult write for the same message.
func TestPlainAnswersMatchGeneralWay(t *testing.T) {
	for _, name := range []string{"d", "bench-000001", "a.b:c@d_e-f", ""} {
		for _, id := range []int64{1, 7392038203948032, 9223372036854775807} {
			want := appendBatchResult([]byte("x"), BatchResult{DeviceName: name, MsgID: id})
			w1 := len(want)
			want = appendDeviceResult(want, name, ErrCodeQueueFull, id, queueFullAnswer)
			w2 := len(want)
			want = appendDeviceResult(want, name, CodeInvalidDevice, 0, " not found")
			got, n1, n2 := appendPlainAnswers([]byte("x"), name, id)
			if string(got) != string(want) || n1 != w1 || n2 != w2 {
				t.Errorf("%q %d:\n got %s (%d %d)\nwant %s (%d %d)", name, id, got, n1, n2, want, w1, w2)
			}
		}
	}
}
