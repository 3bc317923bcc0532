package store

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// OutboxHead is what routing an outbox entry needs of it: everything but
// the record's fields after its type. The router reads only heads, so an
// entry that its app's settings drop is never decoded whole; an entry it
// routes moves into its queue as stored.
type OutboxHead struct {
	Seq         int64
	ID          string
	AppKey      string
	CallbackURL string
	Time        int64 // Unix ms, as OutboxEntry.Time
	Type        int   // Record.Type
}

// Head returns e's head.
func (e OutboxEntry) Head() OutboxHead {
	return OutboxHead{Seq: e.Seq, ID: e.ID, AppKey: e.AppKey, CallbackURL: e.CallbackURL, Time: e.Time, Type: e.Record.Type}
}

// DecodeOutboxHead reads the head of an outbox entry stored as the JSON
// of an OutboxEntry. The fields of the head come first in that JSON, in
// the order json.Marshal writes them, and are read from there without
// decoding the record; JSON in another shape (escaped strings, other
// field order) is decoded by encoding/json instead.
func DecodeOutboxHead(data []byte) (OutboxHead, error) {
	if h, ok := scanOutboxHead(data); ok {
		return h, nil
	}
	var e struct {
		Seq         int64  `json:"seq"`
		ID          string `json:"id"`
		AppKey      string `json:"app_key"`
		CallbackURL string `json:"callback_url"`
		Time        int64  `json:"time"`
		Record      struct {
			Type int `json:"type"`
		} `json:"record"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return OutboxHead{}, fmt.Errorf("decode outbox entry: %w", err)
	}
	return OutboxHead{Seq: e.Seq, ID: e.ID, AppKey: e.AppKey, CallbackURL: e.CallbackURL, Time: e.Time, Type: e.Record.Type}, nil
}

// scanOutboxHead reads a head from JSON that starts as json.Marshal
// writes an OutboxEntry:
//
//	{"seq":N,"id":"S","app_key":"S"[,"callback_url":"S"],"time":N,"record":{"type":N,
//
// ok is false for anything else, a string with an escape included.
func scanOutboxHead(data []byte) (h OutboxHead, ok bool) {
	sc := headScanner{b: data}
	ok = sc.lit(`{"seq":`) && sc.int(&h.Seq) &&
		sc.lit(`,"id":`) && sc.str(&h.ID) &&
		sc.lit(`,"app_key":`) && sc.str(&h.AppKey) &&
		(!sc.lit(`,"callback_url":`) || sc.str(&h.CallbackURL)) &&
		sc.lit(`,"time":`) && sc.int(&h.Time) &&
		sc.lit(`,"record":{"type":`)
	var typ int64
	if !ok || !sc.int(&typ) || len(sc.b) == 0 || (sc.b[0] != ',' && sc.b[0] != '}') {
		return OutboxHead{}, false
	}
	h.Type = int(typ)
	return h, true
}

// headScanner reads a JSON prefix token by token; each method reports
// whether the next token was what it reads, and consumes it if so.
type headScanner struct{ b []byte }

func (sc *headScanner) lit(s string) bool {
	if len(sc.b) < len(s) || string(sc.b[:len(s)]) != s {
		return false
	}
	sc.b = sc.b[len(s):]
	return true
}

// int reads an integer of at most 18 digits (no overflow possible).
func (sc *headScanner) int(v *int64) bool {
	b, neg := sc.b, false
	if len(b) > 0 && b[0] == '-' {
		b, neg = b[1:], true
	}
	var n int64
	i := 0
	for ; i < len(b) && i < 19 && b[i] >= '0' && b[i] <= '9'; i++ {
		n = n*10 + int64(b[i]-'0')
	}
	if i == 0 || i > 18 || (i < len(b) && b[i] >= '0' && b[i] <= '9') {
		return false
	}
	if neg {
		n = -n
	}
	*v, sc.b = n, b[i:]
	return true
}

// str reads a string without escapes or control characters.
func (sc *headScanner) str(v *string) bool {
	if len(sc.b) == 0 || sc.b[0] != '"' {
		return false
	}
	end := bytes.IndexByte(sc.b[1:], '"')
	if end < 0 {
		return false
	}
	s := sc.b[1 : 1+end]
	for _, c := range s {
		if c == '\\' || c < 0x20 {
			return false
		}
	}
	*v, sc.b = string(s), sc.b[2+end:]
	return true
}
