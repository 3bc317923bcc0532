package pebble

import (
	"bytes"
	"strconv"

	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// An ack write changes a stored message in two places: its state, and
// one record appended (pending -> delivered with its delivery success).
// Encoding the whole message again for that was an eighth of the ack
// write's CPU in fan-out. spliceMessage writes the new value from the
// old one instead: the bytes before the state, the new state, the bytes
// up to the end of the records, the new records, the rest. The result is
// appendMessage's byte for byte (msgsplice_test.go holds it to that): a
// value that was not appendMessage's own, or a change of anything else,
// gives ok false and the caller encodes the whole message.

// stateField opens the state's value in appendMessage's output. The
// fields before it are numbers and JSON strings, and a quote in a JSON
// string is escaped, so its first occurrence is the state's.
const stateField = `,"state":`

// spliceMessage returns appendMessage(next), given raw, which is
// appendMessage(old), when next is old with its state changed and
// records appended and nothing else changed; ok false otherwise.
func spliceMessage(raw []byte, old, next *store.Message) (out []byte, ok bool) {
	if !onlyStateAndRecords(old, next) {
		return nil, false
	}
	// Where the state's value is.
	i := bytes.Index(raw, []byte(stateField))
	if i < 0 {
		return nil, false
	}
	i += len(stateField)
	var sb [32]byte
	oldState := jsonfast.AppendString(sb[:0], old.State)
	if !bytes.HasPrefix(raw[i:], oldState) {
		return nil, false
	}
	j := i + len(oldState)
	// Where the records end: what follows them is fixed.
	var tb [32]byte
	tail := append(tb[:0], ']')
	if old.Broadcast != 0 {
		tail = append(tail, `,"broadcast":`...)
		tail = strconv.AppendInt(tail, old.Broadcast, 10)
	}
	tail = append(tail, '}')
	k := len(raw) - len(tail)
	if k < j || !bytes.Equal(raw[k:], tail) {
		return nil, false
	}
	out = make([]byte, 0, len(raw)+len(next.State)+64*(len(next.Records)-len(old.Records)))
	out = append(out, raw[:i]...)
	out = jsonfast.AppendString(out, next.State)
	out = append(out, raw[j:k]...)
	for n := len(old.Records); n < len(next.Records); n++ {
		if n > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = appendRecord(out, &next.Records[n], nil); err != nil {
			return nil, false // invalid params: appendMessage says why
		}
	}
	return append(out, raw[k:]...), true
}

// onlyStateAndRecords reports whether next is old with at most its state
// changed and records appended. Neither's records may be nil (stored as
// null, not as an array).
func onlyStateAndRecords(old, next *store.Message) bool {
	if old.Records == nil || next.Records == nil || len(next.Records) < len(old.Records) ||
		next.ID != old.ID || next.AppKey != old.AppKey || next.DeviceName != old.DeviceName ||
		next.Body != old.Body || next.TTL != old.TTL || next.TimeCreate != old.TimeCreate ||
		next.ExpireTime != old.ExpireTime || next.CallbackURL != old.CallbackURL ||
		next.Broadcast != old.Broadcast || !bytes.Equal(next.Params, old.Params) {
		return false
	}
	for i := range old.Records {
		if !sameRecord(&old.Records[i], &next.Records[i]) {
			return false
		}
	}
	return true
}

// sameRecord reports whether a and b encode the same.
func sameRecord(a, b *store.Record) bool {
	if a.Type != b.Type || a.ChannelKey != b.ChannelKey || a.MsgID != b.MsgID || a.UserID != b.UserID ||
		a.SenderID != b.SenderID || a.Sender != b.Sender || a.SentTime != b.SentTime ||
		!bytes.Equal(a.Params, b.Params) || (a.Error == nil) != (b.Error == nil) {
		return false
	}
	return a.Error == nil || *a.Error == *b.Error
}
