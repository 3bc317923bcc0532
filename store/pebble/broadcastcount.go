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
