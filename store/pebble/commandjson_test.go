package pebble

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestAppendCommandMatchesEncodingJSON holds appendCommand to
// json.Marshal's bytes, on plain commands and on strings, params and
// results that need encoding/json, and fails where json.Marshal fails.
func TestAppendCommandMatchesEncodingJSON(t *testing.T) {
	strs := []string{"", "ping", "dev-0001", `quo"te`, "<b>&amp;", "tab\there", "ünï", "\u2028", "bad\xffutf8"}
	raws := []json.RawMessage{nil, {}, json.RawMessage(`{"seq":12}`), json.RawMessage(`{ "a" : [1, 2] }`),
		json.RawMessage(`{"a":"<x>"}`), json.RawMessage(`"ü"`), json.RawMessage(`null`), json.RawMessage(`0`)}
	rng := rand.New(rand.NewPCG(3, 4))
	pick := func() string { return strs[rng.IntN(len(strs))] }
	n := func() int64 { return rng.Int64N(3) * rng.Int64N(1<<45) }
	for range 3000 {
		c := store.Command{
			ID: rng.Int64N(1 << 60), AppKey: pick(), DeviceName: pick(), Name: pick(), Params: raws[rng.IntN(len(raws))],
			TTL: n(), Timeout: n(), State: pick(), Code: int(n()) - 1, Result: raws[rng.IntN(len(raws))], Message: pick(),
			Answered: rng.IntN(2) == 0, Progress: int(n() % 101), TimeCreate: n(), TimeSent: n(), TimeDelivered: n(),
			TimeDone: n(), Deadline: n(), Job: n(), JobIndex: n(), Attempt: int(n() % 5),
			Emit: []store.Event{{Type: "x"}}, Lazy: rng.IntN(2) == 0,
		}
		check(t, c, func(b []byte) ([]byte, error) { return appendCommand(b, &c) })
	}
	bad := store.Command{Result: json.RawMessage(`{"a":`)}
	if _, err := appendCommand(nil, &bad); err == nil {
		t.Error("appendCommand took an invalid result")
	}
}

// TestAppendCommandCoversEveryField fills every field of a command: a
// field added to store.Command and not to appendCommand would be dropped
// from what is stored, and fails here.
func TestAppendCommandCoversEveryField(t *testing.T) {
	var c store.Command
	fill(reflect.ValueOf(&c).Elem())
	check(t, c, func(b []byte) ([]byte, error) { return appendCommand(b, &c) })
}
