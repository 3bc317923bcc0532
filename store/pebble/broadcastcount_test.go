package pebble

import (
	"encoding/json"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestMessageHeadMatchesEncodingJSON holds messageHead to json.Unmarshal
// on stored messages (nested records and params, escapes in them) and on
// forms the fast path must leave to encoding/json.
func TestMessageHeadMatchesEncodingJSON(t *testing.T) {
	m := store.Message{
		ID: 9, AppKey: "app", DeviceName: "dev", Body: `b"o\dy<>`, State: store.StatePending, Broadcast: 77,
		Params:  json.RawMessage(`{"broadcast_id":"77","nested":{"a":[1,{"b":"}]\""}],"c":null}}`),
		Records: []store.Record{{Type: 0, SentTime: 1}, {Type: 5, SentTime: 2, Error: &store.RecordError{Code: 3003, Message: "x\ny"}}},
	}
	var inputs []string
	for _, mm := range []store.Message{m, {AppKey: "a"}, {AppKey: "ä", State: "failed"}, {AppKey: `q"`, State: "done"}} {
		b, err := appendMessage(nil, &mm)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(b))
	}
	// Broadcast messages as either writer lays them out, with the
	// names of the fields read in the strings and objects before and
	// after them.
	for _, mm := range []store.Message{
		m,
		{ID: 10, AppKey: "app", DeviceName: `d,"state":"x"`, Body: `,"state":"delivered","broadcast":5}`, State: store.StateFailed, CallbackURL: "https://h/x?a=1&b=\"", Broadcast: 12, TTL: 60, TimeCreate: 1, ExpireTime: 61},
		{ID: 11, AppKey: "app", DeviceName: "dev", Body: "fw", State: store.StatePending, Broadcast: 0,
			Records: []store.Record{{Type: 0, Params: json.RawMessage(`{"broadcast":4}`)}}},
		{ID: 12, AppKey: "app", DeviceName: "dev", Body: "fw", State: store.StateDelivered, Broadcast: 1 << 62, Records: nil},
	} {
		b, err := appendMessage(nil, &mm)
		if err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(mm)
		if err != nil {
			t.Fatal(err)
		}
		for _, enc := range [][]byte{b, j} {
			inputs = append(inputs, string(enc))
			if _, _, _, ok := broadcastHead(enc); ok != (mm.Broadcast != 0) {
				t.Errorf("broadcastHead(%s) ok = %v, want %v", enc, ok, mm.Broadcast != 0)
			}
		}
	}
	inputs = append(inputs, `{}`, `{"State":"x","state":"y"}`, `{"STATE":"x"}`, `{"broadcast":1.5}`, `{"broadcast":null}`,
		`{"records":[[[]]],"state":"s"}`, `{"x":{"y":{}},"app_key":"k"}`, ` { "state" : "s" } `,
		`{"x":tru,"state":"s"}`, `{"x":[1.2.3],"state":"s"}`, `{"x":"\q","state":"s"}`, `{"x":{"y":"\u12"},"state":"s"}`,
		`{"x":{"y":"\u00e9\n"},"state":"s"}`, "{\"k\xff\":1,\"state\":\"s\"}", "{\"state\":\"s\xff\"}",
		`{"id":1,"app_key":"a","device_name":"d","body":"b","ttl":1,"time_create":1,"expire_time":1,"state":"s","records":null,"broadcast":-3}`,
		`{"id":1,"app_key":"a","device_name":"d","body":"b","ttl":1,"time_create":1,"expire_time":1,"state":"s\u0041","broadcast":3}`,
		`{"id":1,"app_key":"a","device_name":"d","body":"b","ttl":1,"time_create":1,"expire_time":1,"state":"s","broadcast":3,"state":"t"}`)
	for _, in := range inputs {
		var want struct {
			AppKey    string `json:"app_key"`
			State     string `json:"state"`
			Broadcast int64  `json:"broadcast"`
		}
		wantErr := json.Unmarshal([]byte(in), &want)
		app, state, bc, err := messageHead([]byte(in))
		if (err != nil) != (wantErr != nil) || err == nil && (app != want.AppKey || state != want.State || bc != want.Broadcast) {
			t.Errorf("messageHead(%s) = %q %q %d %v; encoding/json gives %+v %v", in, app, state, bc, err, want, wantErr)
		}
	}
	// A stored message takes the fast path.
	b, _ := appendMessage(nil, &m)
	if !eachFieldDeep(b, func(k, v []byte) bool { return true }) {
		t.Errorf("the stored form %s does not take the fast path", b)
	}
}

// BenchmarkMessageHead reads the head of a stored broadcast message (the
// layout broadcastHead reads from both ends) and of a message that is no
// broadcast, which takes the field-by-field scan over its records and
// params.
func BenchmarkMessageHead(b *testing.B) {
	params := json.RawMessage(`{"broadcast_id":"77","firmware":{"url":"https://h/fw.bin","sha":"0123456789abcdef"},"tries":[1,2,3]}`)
	records := []store.Record{{Type: 0, SentTime: 1764000000, Params: params}, {Type: 5, SentTime: 1764000001, Error: &store.RecordError{Code: 3003, Message: "offline"}}}
	for name, m := range map[string]store.Message{
		"broadcast": {ID: 123456, AppKey: "app-key-0123456789abcdef", DeviceName: "bench-dev-000042", Body: "hello from the bench",
			TTL: 600, TimeCreate: 1764000000, ExpireTime: 1764000600, State: store.StatePending, Params: params, Records: records, Broadcast: 77},
		"single": {ID: 123457, AppKey: "app-key-0123456789abcdef", DeviceName: "bench-dev-000042", Body: "hello from the bench",
			TTL: 600, TimeCreate: 1764000000, ExpireTime: 1764000600, State: store.StateDelivered, Params: params, Records: records},
	} {
		v, err := appendMessage(nil, &m)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, _, err := messageHead(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
