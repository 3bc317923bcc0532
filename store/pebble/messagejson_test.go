package pebble

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// TestAppendMessageMatchesEncodingJSON holds appendMessage and
// appendOutboxEntry to json.Marshal's bytes, on plain messages (the fast
// path) and on strings and params that need encoding/json.
func TestAppendMessageMatchesEncodingJSON(t *testing.T) {
	strs := []string{"", "plain", "dev-0001", `quo"te`, `back\slash`, "<b>&amp;", "tab\there", "ünï", "\u2028", "bad\xffutf8", "ctl\x01", "del\x7f"}
	params := []json.RawMessage{nil, {}, json.RawMessage(`{"broadcast_id":"12"}`), json.RawMessage(`{ "a" : [1, 2] }`),
		json.RawMessage(`{"a":"<x>"}`), json.RawMessage(`{"a":"ü"}`), json.RawMessage(`"s p"`), json.RawMessage(`{"a":1}`)}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return strs[rng.IntN(len(strs))] }
	for i := range 2000 {
		m := store.Message{
			ID: rng.Int64N(1 << 60), AppKey: pick(), DeviceName: pick(), Body: pick(), TTL: rng.Int64N(100000) - 5,
			TimeCreate: rng.Int64N(1 << 40), ExpireTime: -rng.Int64N(1 << 40), State: pick(), CallbackURL: pick(),
			Params: params[rng.IntN(len(params))], Broadcast: rng.Int64N(3),
		}
		if i%7 != 0 {
			m.Records = []store.Record{}
		}
		for range rng.IntN(4) {
			r := store.Record{Type: rng.IntN(9), ChannelKey: pick(), MsgID: pick(), UserID: pick(), SenderID: pick(),
				Sender: rng.IntN(3) - 1, SentTime: rng.Int64N(1 << 40), Params: params[rng.IntN(len(params))]}
			if rng.IntN(2) == 0 {
				r.Error = &store.RecordError{Code: rng.IntN(4000), Message: pick()}
			}
			m.Records = append(m.Records, r)
		}
		check(t, m, func(b []byte) ([]byte, error) { return appendMessage(b, &m) })
		for _, r := range m.Records {
			e := store.OutboxEntry{Seq: rng.Int64N(1 << 50), ID: pick(), AppKey: pick(), CallbackURL: pick(), Time: rng.Int64N(1 << 45), Record: r}
			check(t, e, func(b []byte) ([]byte, error) { return appendOutboxEntry(b, &e) })
		}
	}
	// Params that are not JSON fail as they do with encoding/json.
	bad := store.Message{Params: json.RawMessage(`{"a":`)}
	if _, err := appendMessage(nil, &bad); err == nil {
		t.Error("appendMessage took invalid params")
	}
}

func check(t *testing.T, v any, appendFn func([]byte) ([]byte, error)) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, gotErr := appendFn([]byte("prefix"))
	if (wantErr != nil) != (gotErr != nil) {
		t.Fatalf("%+v: error %v, encoding/json's %v", v, gotErr, wantErr)
	}
	if wantErr == nil && string(got) != "prefix"+string(want) {
		t.Fatalf("%s:\n got %s\nwant prefix%s", fmt.Sprintf("%T", v), got, want)
	}
}

// fill sets every exported field of the value v points to to something
// not zero, recursively.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s")
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"k":1}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem())
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}

// TestAppendMessageCoversEveryField fills every field of a message and
// of an outbox entry: a field added to store.Message, store.Record,
// store.RecordError or store.OutboxEntry and not to the encoders would
// be dropped from what is stored, and fails here.
func TestAppendMessageCoversEveryField(t *testing.T) {
	var m store.Message
	fill(reflect.ValueOf(&m).Elem())
	check(t, m, func(b []byte) ([]byte, error) { return appendMessage(b, &m) })
	var e store.OutboxEntry
	fill(reflect.ValueOf(&e).Elem())
	check(t, e, func(b []byte) ([]byte, error) { return appendOutboxEntry(b, &e) })
}

// TestRawMemoGivesAppendRaw: the memo answers for the very slice it saw
// last, as jsonfast.AppendRaw would (escaped where encoding/json escapes), and
// checks anything else afresh: other bytes, a shorter slice of the same
// array, invalid JSON (an error every time).
func TestRawMemoGivesAppendRaw(t *testing.T) {
	var memo rawMemo
	shared := json.RawMessage(`{"a":"<b>","n":[1, 2]}`)
	other := json.RawMessage(`{"broadcast_id":"7"}`)
	bad := json.RawMessage(`{"a":`)
	for _, raw := range []json.RawMessage{shared, shared, other, shared, shared[:1], bad, bad, other, other} {
		want, wantErr := jsonfast.AppendRaw([]byte("x"), raw)
		got, err := memo.appendRaw([]byte("x"), raw)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("memo.appendRaw(%s) = %s, %v; appendRaw gives %s, %v", raw, got, err, want, wantErr)
		}
	}
}
