package pebble

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

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
	i := 0
	field := func(name string) bool {
		if !bytes.HasPrefix(v[i:], []byte(name)) {
			return false
		}
		i += len(name)
		return true
	}
	number := func() bool {
		j := i
		for j < len(v) && (v[j] >= '0' && v[j] <= '9' || v[j] == '-') {
			j++
		}
		ok := j > i
		i = j
		return ok
	}
	str := func() bool {
		if j := anyValueEnd(v, i, 0); j > i && v[i] == '"' {
			i = j
			return true
		}
		return false
	}
	plain := func() (string, bool) {
		j := plainStringEnd(v, i)
		if j < 0 {
			return "", false
		}
		s, ok := plainString(v[i:j])
		i = j
		return s, ok
	}
	if !field(`{"id":`) || !number() || !field(`,"app_key":`) {
		return "", "", 0, false
	}
	if app, ok = plain(); !ok || !field(`,"device_name":`) || !str() || !field(`,"body":`) || !str() ||
		!field(`,"ttl":`) || !number() || !field(`,"time_create":`) || !number() ||
		!field(`,"expire_time":`) || !number() || !field(`,"state":`) {
		return "", "", 0, false
	}
	if state, ok = plain(); !ok {
		return "", "", 0, false
	}
	end := len(v) - 1
	if end < i || v[end] != '}' {
		return "", "", 0, false
	}
	start := end
	for start > i && v[start-1] >= '0' && v[start-1] <= '9' {
		start--
	}
	const key = `,"broadcast":`
	if start == end || !bytes.HasSuffix(v[:start], []byte(key)) || start-len(key) < i {
		return "", "", 0, false
	}
	if broadcast, ok = parseInt(v[start:end]); !ok {
		return "", "", 0, false
	}
	return app, state, broadcast, true
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
	return scanObject(v, func(v []byte, i int) int { return anyValueEnd(v, i, 0) }, fn)
}

// anyValueEnd returns the index after the JSON value at v[i], stepping
// over nested objects and arrays and strings with escapes; -1 when it
// is not well formed (or nested deeper than 64), which encoding/json
// then decides.
func anyValueEnd(v []byte, i, depth int) int {
	if i >= len(v) || depth > 64 {
		return -1
	}
	switch c := v[i]; {
	case c == '"':
		for j := i + 1; j < len(v); j++ {
			switch v[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			default:
				if v[j] < 0x20 {
					return -1
				}
			}
		}
		return -1
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		j := skipSpace(v, i+1)
		if j < len(v) && v[j] == closing {
			return j + 1
		}
		for {
			if c == '{' {
				if j >= len(v) || v[j] != '"' {
					return -1
				}
				if j = anyValueEnd(v, j, depth+1); j < 0 {
					return -1
				}
				if j = skipSpace(v, j); j >= len(v) || v[j] != ':' {
					return -1
				}
				j = skipSpace(v, j+1)
			}
			if j = anyValueEnd(v, j, depth+1); j < 0 {
				return -1
			}
			if j = skipSpace(v, j); j >= len(v) {
				return -1
			}
			if v[j] == closing {
				return j + 1
			}
			if v[j] != ',' {
				return -1
			}
			j = skipSpace(v, j+1)
		}
	default:
		return valueEnd(v, i)
	}
}
