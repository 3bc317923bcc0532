package delivery

import (
	"strconv"

	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// What a device receives on msg, written by hand: json.Marshal's
// reflection over the payload was part of the 3.5% of the server's CPU
// that JSON cost in the fanout bench (the payload of every publish). The
// appender writes exactly the bytes json.Marshal writes for the same
// value (payload_test.go checks it), so payloads read as before.

// payload is the JSON a device receives on msg, its fields as
// docs/device-protocol.md ("Messages") lists them.
type payload struct {
	MsgID      string `json:"msgid"`
	Body       string `json:"msg_body"`
	SentTime   int64  `json:"sent_time"`
	ExpireTime int64  `json:"expire_time"`
}

// devicePayload is what the device receives for m.
func devicePayload(m store.Message) []byte {
	return appendDevicePayload(make([]byte, 0, len(m.Body)+96), m)
}

// appendDevicePayload appends what the device receives for m, as
// json.Marshal writes its payload (the id a decimal string), without
// making the id's string.
func appendDevicePayload(b []byte, m store.Message) []byte {
	b = append(b, `{"msgid":"`...)
	b = strconv.AppendInt(b, m.ID, 10)
	b = append(b, `","msg_body":`...)
	b = jsonfast.AppendString(b, m.Body)
	b = append(b, `,"sent_time":`...)
	b = strconv.AppendInt(b, m.TimeCreate, 10)
	b = append(b, `,"expire_time":`...)
	b = strconv.AppendInt(b, m.ExpireTime, 10)
	return append(b, '}')
}

// devicePayloads is devicePayload for each of msgs, written into one
// buffer: one allocation per flush rather than one per message. Each
// payload is capped at its end, so nothing appended to one reaches the
// next.
func devicePayloads(msgs []store.Message) [][]byte {
	size := 0
	for _, m := range msgs {
		size += len(m.Body) + 96
	}
	buf := make([]byte, 0, size)
	payloads := make([][]byte, len(msgs))
	for i, m := range msgs {
		start := len(buf)
		buf = appendDevicePayload(buf, m)
		payloads[i] = buf[start:len(buf):len(buf)]
	}
	return payloads
}
