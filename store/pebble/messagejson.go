package pebble

import (
	"encoding/json"
	"strconv"

	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// A fan-out chunk or a batch send encodes each message and the outbox
// entry of each of its records; with encoding/json that was a third of
// the fan-out's CPU. appendMessage and appendOutboxEntry write the same
// bytes json.Marshal does, field by field; a string that needs escaping
// and params that are not already compact go through encoding/json, so
// the output is always json.Marshal's (messagejson_test.go holds them to
// it).

// appendMessage appends json.Marshal(m) to b.
func appendMessage(b []byte, m *store.Message) ([]byte, error) {
	return appendMessageWith(b, m, nil)
}

// appendMessageWith is appendMessage checking raw params through memo
// (which may be nil).
func appendMessageWith(b []byte, m *store.Message, memo *rawMemo) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, m.ID, 10)
	b = append(b, `,"app_key":`...)
	b = jsonfast.AppendString(b, m.AppKey)
	b = append(b, `,"device_name":`...)
	b = jsonfast.AppendString(b, m.DeviceName)
	b = append(b, `,"body":`...)
	b = jsonfast.AppendString(b, m.Body)
	b = append(b, `,"ttl":`...)
	b = strconv.AppendInt(b, m.TTL, 10)
	b = append(b, `,"time_create":`...)
	b = strconv.AppendInt(b, m.TimeCreate, 10)
	b = append(b, `,"expire_time":`...)
	b = strconv.AppendInt(b, m.ExpireTime, 10)
	b = append(b, `,"state":`...)
	b = jsonfast.AppendString(b, m.State)
	if m.CallbackURL != "" {
		b = append(b, `,"callback_url":`...)
		b = jsonfast.AppendString(b, m.CallbackURL)
	}
	var err error
	if len(m.Params) > 0 {
		b = append(b, `,"params":`...)
		if b, err = memo.appendRaw(b, m.Params); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"records":`...)
	if m.Records == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range m.Records {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendRecord(b, &m.Records[i], memo); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if m.Broadcast != 0 {
		b = append(b, `,"broadcast":`...)
		b = strconv.AppendInt(b, m.Broadcast, 10)
	}
	return append(b, '}'), nil
}

// appendOutboxEntry appends json.Marshal(e) to b.
func appendOutboxEntry(b []byte, e *store.OutboxEntry) ([]byte, error) {
	return appendOutboxEntryWith(b, e, nil)
}

// appendOutboxEntryWith is appendOutboxEntry checking raw params through
// memo (which may be nil).
func appendOutboxEntryWith(b []byte, e *store.OutboxEntry, memo *rawMemo) ([]byte, error) {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"id":`...)
	b = jsonfast.AppendString(b, e.ID)
	b = append(b, `,"app_key":`...)
	b = jsonfast.AppendString(b, e.AppKey)
	if e.CallbackURL != "" {
		b = append(b, `,"callback_url":`...)
		b = jsonfast.AppendString(b, e.CallbackURL)
	}
	b = append(b, `,"time":`...)
	b = strconv.AppendInt(b, e.Time, 10)
	b = append(b, `,"record":`...)
	b, err := appendRecord(b, &e.Record, memo)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendRecord appends json.Marshal(r) to b, checking raw params through
// memo (which may be nil).
func appendRecord(b []byte, r *store.Record, memo *rawMemo) ([]byte, error) {
	b = append(b, `{"type":`...)
	b = strconv.AppendInt(b, int64(r.Type), 10)
	if r.ChannelKey != "" {
		b = append(b, `,"channelkey":`...)
		b = jsonfast.AppendString(b, r.ChannelKey)
	}
	if r.MsgID != "" {
		b = append(b, `,"msgid":`...)
		b = jsonfast.AppendString(b, r.MsgID)
	}
	if r.UserID != "" {
		b = append(b, `,"userid":`...)
		b = jsonfast.AppendString(b, r.UserID)
	}
	if r.SenderID != "" {
		b = append(b, `,"sender_id":`...)
		b = jsonfast.AppendString(b, r.SenderID)
	}
	b = append(b, `,"sender":`...)
	b = strconv.AppendInt(b, int64(r.Sender), 10)
	b = append(b, `,"sent_time":`...)
	b = strconv.AppendInt(b, r.SentTime, 10)
	if r.Error != nil {
		b = append(b, `,"error":{"code":`...)
		b = strconv.AppendInt(b, int64(r.Error.Code), 10)
		b = append(b, `,"message":`...)
		b = jsonfast.AppendString(b, r.Error.Message)
		b = append(b, '}')
	}
	if len(r.Params) > 0 {
		b = append(b, `,"params":`...)
		var err error
		if b, err = memo.appendRaw(b, r.Params); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// rawMemo remembers the raw JSON jsonfast.AppendRaw last encoded and what it gave.
// The messages of a batch mostly share their params (a broadcast's are
// one slice, in each message and each of its records), and checking them
// with json.Valid for every message took 0.07 s of a 100,000-device
// broadcast's write.
type rawMemo struct{ src, out []byte }

// appendRaw is jsonfast.AppendRaw(b, raw), or what it gave for this very slice
// (same start and length) before. A nil memo remembers nothing.
func (c *rawMemo) appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if c != nil && len(raw) > 0 && len(raw) == len(c.src) && &raw[0] == &c.src[0] {
		return append(b, c.out...), nil
	}
	start := len(b)
	b, err := jsonfast.AppendRaw(b, raw)
	if err == nil && c != nil && len(raw) > 0 {
		c.src, c.out = raw, b[start:len(b):len(b)]
	}
	return b, err
}
