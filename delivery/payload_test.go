package delivery

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/store"
)

var jsonStrings = []string{
	"", "dev-1", "a b", `quote " and \ backslash`, "<tag>&amp;", "tab\tnewline\n", "\x00\x1f\x7f",
	"ünïcödé", "日本語", "line\u2028sep\u2029", "bad \xff utf-8", `device "x" not found`,
}

// TestPayloadMatchesMarshal checks that the hand-written payload encoder
// writes exactly what json.Marshal writes: device payloads must not
// change with it.
func TestPayloadMatchesMarshal(t *testing.T) {
	for _, s := range jsonStrings {
		for _, id := range []int64{1, 123, 1234567890123} {
			m := store.Message{ID: id, Body: s, TimeCreate: 1764000000, ExpireTime: -5}
			want, _ := json.Marshal(payload{MsgID: strconv.FormatInt(id, 10), Body: s, SentTime: m.TimeCreate, ExpireTime: m.ExpireTime})
			if got := appendDevicePayload(nil, m); !bytes.Equal(got, want) {
				t.Errorf("payload %+v: got %s, want %s", m, got, want)
			}
		}
	}
}

// TestPayloadDoesNotAllocate checks what the appender is for: with room
// in the buffer, encoding a payload of plain ASCII allocates nothing
// (json.Marshal allocates several times per value).
func TestPayloadDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 512)
	m := store.Message{ID: 1234567890123, Body: "1764000000123456789", TimeCreate: 1764000000, ExpireTime: 1764003600}
	if n := testing.AllocsPerRun(100, func() { buf = appendDevicePayload(buf[:0], m) }); n != 0 {
		t.Errorf("appendDevicePayload: %v allocations", n)
	}
}

// TestDevicePayloadsShareOneBuffer checks the batch publish's payloads:
// each is exactly devicePayload's, even when escaping outgrows the
// estimated buffer, none can be appended into the next, and a flush of
// several plain messages costs two allocations, not one per message.
func TestDevicePayloadsShareOneBuffer(t *testing.T) {
	msgs := []store.Message{
		{ID: 7, Body: "plain", TimeCreate: 1764000000, ExpireTime: 1764003600},
		{ID: 8, Body: strings.Repeat("<\u2028", 200), TimeCreate: 1764000001, ExpireTime: 1764003601},
		{ID: 1234567890123, Body: `"quoted"\`, TimeCreate: 1764000002, ExpireTime: 1764003602},
	}
	payloads := devicePayloads(msgs)
	for i, m := range msgs {
		if want := devicePayload(m); !bytes.Equal(payloads[i], want) {
			t.Errorf("payload %d: got %s, want %s", i, payloads[i], want)
		}
		if cap(payloads[i]) != len(payloads[i]) {
			t.Errorf("payload %d: cap %d beyond its length %d", i, cap(payloads[i]), len(payloads[i]))
		}
	}
	plain := []store.Message{msgs[0], msgs[0], msgs[0], msgs[0]}
	if n := testing.AllocsPerRun(100, func() { devicePayloads(plain) }); n > 2 {
		t.Errorf("devicePayloads of 4: %v allocations", n)
	}
}
