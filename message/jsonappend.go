package message

import (
	"strconv"

	"github.com/devmsg/devmsg/internal/jsonfast"
)

// The JSON that every message of a fan-out costs, written by hand:
// json.Marshal's reflection over these small structs was 3.5% of the
// server's CPU in the fanout bench (three answers per message of a batch
// send, and the payload of every publish: package delivery writes those).
// Each appender writes exactly the bytes json.Marshal writes for the same
// value (jsonappend_test.go checks it), so stored answers read as before.

// appendBatchResult appends r as json.Marshal(r) would.
func appendBatchResult(b []byte, r BatchResult) []byte {
	b = append(b, `{"device_name":`...)
	b = jsonfast.AppendString(b, r.DeviceName)
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(r.Code), 10)
	if r.MsgID != 0 {
		b = append(b, `,"msgid":`...)
		b = strconv.AppendInt(b, r.MsgID, 10)
	}
	if r.Message != "" {
		b = append(b, `,"message":`...)
		b = jsonfast.AppendString(b, r.Message)
	}
	return append(b, '}')
}

// appendDeviceResult appends BatchResult{DeviceName: name, Code: code,
// MsgID: msgid, Message: "device " + strconv.Quote(name) + after} as
// appendBatchResult would, without making the message: a batch send
// writes two such answers per message (its queue-full and device-gone
// answers, store.BatchMessage.Answers), rarely sent, and quoting and
// joining them was 2% of the server's CPU in fan-out.
func appendDeviceResult(b []byte, name string, code int, msgid int64, after string) []byte {
	if !plainJSON(name) || !plainJSON(after) {
		return appendBatchResult(b, BatchResult{DeviceName: name, Code: code, MsgID: msgid, Message: "device " + strconv.Quote(name) + after})
	}
	b = append(append(append(b, `{"device_name":"`...), name...), `","code":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	if msgid != 0 {
		b = append(b, `,"msgid":`...)
		b = strconv.AppendInt(b, msgid, 10)
	}
	b = append(append(append(b, `,"message":"device \"`...), name...), `\"`...)
	return append(append(b, after...), `"}`...)
}

// appendPlainAnswers appends the three answers batchMessage writes for
// a message to an enabled device whose name plainJSON takes: stored
// (appendBatchResult), queue-full and gone (appendDeviceResult), the
// same bytes with the name checked once and the msgid formatted once;
// n1 and n2 are where the second and third begin. Writing them the
// general way was a tenth of a batch send's CPU outside the store.
func appendPlainAnswers(b []byte, name string, msgid int64) (out []byte, n1, n2 int) {
	var idBuf [20]byte
	id := strconv.AppendInt(idBuf[:0], msgid, 10)
	b = append(append(append(b, `{"device_name":"`...), name...), `","code":0,"msgid":`...)
	b = append(append(b, id...), '}')
	n1 = len(b)
	b = append(append(append(b, `{"device_name":"`...), name...), fullCodeJSON...)
	b = append(append(b, id...), `,"message":"device \"`...)
	b = append(append(append(append(b, name...), `\"`...), queueFullAnswer...), `"}`...)
	n2 = len(b)
	b = append(append(append(b, `{"device_name":"`...), name...), goneCodeJSON...)
	b = append(append(b, name...), `\" not found"}`...)
	return b, n1, n2
}

// The code parts of appendPlainAnswers' queue-full and gone answers.
var (
	fullCodeJSON = `","code":` + strconv.Itoa(ErrCodeQueueFull) + `,"msgid":`
	goneCodeJSON = `","code":` + strconv.Itoa(CodeInvalidDevice) + `,"message":"device \"`
)

// plainJSON reports whether s is written as is between quotes by both
// strconv.Quote and json.Marshal: printable ASCII other than the quote,
// the backslash and the HTML characters.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
