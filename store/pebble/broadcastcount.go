package pebble

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// CountBroadcast walks the message keys from first to last with one
// iterator (msgids are the keys' order; the app's index would cost a
// point read per message) and reads of each message only its app, state
// and broadcast: a progress poll of a 100,000-message broadcast took a
// tenth of the server's CPU decoding whole messages.
func (s *Store) CountBroadcast(ctx context.Context, appKey string, id, first, last int64) (store.BroadcastCounts, error) {
	var c store.BroadcastCounts
	if last == 0 || last < first {
		return c, nil
	}
	if err := s.enter(ctx); err != nil {
		return c, err
	}
	defer s.exit()
	var upper []byte
	if last < 1<<63-1 {
		upper = msgKey(last + 1)
	}
	err := s.scan(msgKey(first), upper, func(k, v []byte) (bool, error) {
		app, state, bc, err := messageHead(v)
		if err != nil {
			return false, fmt.Errorf("decode %q: %w", k, err)
		}
		if bc == id && app == appKey {
			c.Add(state)
		}
		return true, nil
	})
	if err != nil {
		return c, fmt.Errorf("count broadcast %d: %w", id, err)
	}
	return c, nil
}

// messageHead returns a stored message's app_key, state and broadcast as
// json.Unmarshal would for well-formed JSON, which is what the store
// writes (broadcastcount_test.go holds it to that).
func messageHead(v []byte) (app, state string, broadcast int64, err error) {
	if app, state, broadcast, ok := broadcastHead(v); ok {
		return app, state, broadcast, nil
	}
	ok := eachFieldDeep(v, func(k, val []byte) bool {
		var ok bool
		switch string(k) {
		case "app_key":
			app, ok = plainString(val)
		case "state":
			state, ok = plainString(val)
		case "broadcast":
			broadcast, ok = parseInt(val)
		default:
			// Another case of a key above is left to encoding/json.
			return !equalFoldAny(k, "app_key", "state", "broadcast")
		}
		return ok
	})
	if ok {
		return app, state, broadcast, nil
	}
	var m struct {
		AppKey    string `json:"app_key"`
		State     string `json:"state"`
		Broadcast int64  `json:"broadcast"`
	}
	if err := json.Unmarshal(v, &m); err != nil {
		return "", "", 0, err
	}
	return m.AppKey, m.State, m.Broadcast, nil
}

// broadcastHead reads messageHead's fields from a broadcast message as
// the store writes it (appendMessage, or json.Marshal of store.Message:
// its fields in order, no spaces) without stepping through its records
// and params, which eachFieldDeep did byte by byte (a count of 100,000
// messages took 0.1 to 0.2 s): the fields up to state come first, each
// checked by name, and broadcast comes last, so it is read from the end,
// where the object's closing brace follows its value. ok is false for
// anything else (not a broadcast message, another layout, an escape in
// app_key or state), which messageHead reads field by field.
func broadcastHead(v []byte) (app, state string, broadcast int64, ok bool) {
	c := headCursor{v: v}
	if app, state, ok = c.head(); !ok {
		return "", "", 0, false
	}
	if broadcast, ok = broadcastTail(v, c.i); !ok {
		return "", "", 0, false
	}
	return app, state, broadcast, true
}

// headCursor reads a stored message from its start, the fields in the
// order and layout the store writes them.
type headCursor struct {
	v []byte
	i int // where the next field starts
}

// head reads the fields a stored message starts with, up to state, and
// returns its app_key and state; ok is false for another layout or an
// escape in either.
func (c *headCursor) head() (app, state string, ok bool) {
	if !c.field(`{"id":`) || !c.number() || !c.field(`,"app_key":`) {
		return "", "", false
	}
	if app, ok = c.plain(); !ok || !c.field(`,"device_name":`) || !c.str() || !c.field(`,"body":`) || !c.str() ||
		!c.field(`,"ttl":`) || !c.number() || !c.field(`,"time_create":`) || !c.number() ||
		!c.field(`,"expire_time":`) || !c.number() || !c.field(`,"state":`) {
		return "", "", false
	}
	if state, ok = c.plain(); !ok {
		return "", "", false
	}
	return app, state, true
}

// field steps over name (a key with its colon, and the comma before it)
// when the message goes on with it.
func (c *headCursor) field(name string) bool {
	if !bytes.HasPrefix(c.v[c.i:], []byte(name)) {
		return false
	}
	c.i += len(name)
	return true
}

// number steps over the digits and minus signs of an integer the store
// wrote.
func (c *headCursor) number() bool {
	j := c.i
	for j < len(c.v) && (c.v[j] >= '0' && c.v[j] <= '9' || c.v[j] == '-') {
		j++
	}
	ok := j > c.i
	c.i = j
	return ok
}

// str steps over a string, escapes and all.
func (c *headCursor) str() bool {
	if j := jsonfast.StringEnd(c.v, c.i); j > c.i {
		c.i = j
		return true
	}
	return false
}

// plain reads a string with no escapes whose text is UTF-8.
func (c *headCursor) plain() (string, bool) {
	j := jsonfast.PlainTextEnd(c.v, c.i)
	if j < 0 {
		return "", false
	}
	s := string(c.v[c.i+1 : j-1])
	c.i = j
	return s, true
}

// broadcastTail reads the broadcast that ends a stored message v, its
// digits right before the closing brace, from the end back to from (the
// end of the fields head read).
func broadcastTail(v []byte, from int) (int64, bool) {
	end := len(v) - 1
	if end < from || v[end] != '}' {
		return 0, false
	}
	start := end
	for start > from && v[start-1] >= '0' && v[start-1] <= '9' {
		start--
	}
	const key = `,"broadcast":`
	if start == end || !bytes.HasSuffix(v[:start], []byte(key)) || start-len(key) < from {
		return 0, false
	}
	return parseInt(v[start:end])
}

func equalFoldAny(k []byte, names ...string) bool {
	for _, n := range names {
		if bytes.EqualFold(k, []byte(n)) {
			return true
		}
	}
	return false
}

// eachFieldDeep is eachField for objects whose other fields may hold
// nested objects and arrays: those are stepped over, exactly (strings in
// them may hold escapes), and handed to fn as they are.
func eachFieldDeep(v []byte, fn func(k, val []byte) bool) bool {
	return jsonfast.Object(v, jsonfast.ValueEnd, fn)
}
