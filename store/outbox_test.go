package store

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDecodeOutboxHead: the head read from the start of an entry's JSON
// is the entry's head, without encoding/json for JSON as json.Marshal
// writes it, and with it for escaped strings and other shapes.
func TestDecodeOutboxHead(t *testing.T) {
	full := OutboxEntry{Seq: 1 << 40, ID: "150552576000005-12", AppKey: "demo-app-key", CallbackURL: "https://hooks.example.com/cb/ü", Time: 1795380011123,
		Record: Record{Type: RecordDeliveryFailure, ChannelKey: "demo-app-key", MsgID: "150552576000005", Error: &RecordError{Code: 3005, Message: "ttl"}, Params: json.RawMessage(`{"order":"A-1009","seq":7}`)}}
	plain := []OutboxEntry{
		full,
		{Seq: 7, ID: "1-0", AppKey: "a", Time: 1},                                     // no URL, empty record
		{Seq: 0, ID: "", AppKey: "", Time: -5, Record: Record{Type: RecordClick}},     // zero values
		{Seq: 999999999999999999, ID: "x", AppKey: "y", Record: Record{Type: 100000}}, // 18 digits
	}
	for _, e := range plain {
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := scanOutboxHead(data); !ok || h != e.Head() {
			t.Errorf("scan %s: %+v %v, want %+v", data, h, ok, e.Head())
		}
		if h, err := DecodeOutboxHead(data); err != nil || h != e.Head() {
			t.Errorf("decode %s: %+v %v", data, h, err)
		}
	}
	escaped := full
	escaped.CallbackURL = "https://hooks.example.com/cb?a=1&b=<2>"
	other := full
	other.AppKey = `quote"back\slash`
	for _, e := range []OutboxEntry{escaped, other} {
		data, _ := json.Marshal(e)
		if _, ok := scanOutboxHead(data); ok {
			t.Errorf("scan took %s, which has escapes", data)
		}
		if h, err := DecodeOutboxHead(data); err != nil || h != e.Head() {
			t.Errorf("decode %s: %+v %v, want %+v", data, h, err, e.Head())
		}
	}
	for _, data := range []string{
		`{"id":"1-0","seq":3,"app_key":"a","time":1,"record":{"type":4}}`,            // another order
		`{"seq":3,"id":"1-0","app_key":"a","time":1,"record":{"type":4 }}`,           // a space
		`{"seq":12345678901234567890,"id":"1-0","app_key":"a","time":1,"record":{}}`, // too long for the scan
	} {
		if _, ok := scanOutboxHead([]byte(data)); ok {
			t.Errorf("scan took %s", data)
		}
	}
	if h, err := DecodeOutboxHead([]byte(`{"id":"1-0","seq":3,"app_key":"a","time":1,"record":{"type":4}}`)); err != nil || h != (OutboxHead{Seq: 3, ID: "1-0", AppKey: "a", Time: 1, Type: 4}) {
		t.Errorf("decode in another order: %+v %v", h, err)
	}
	for _, bad := range []string{``, `{"seq":3,"id":"1-0"`, strings.Repeat("[", 3)} {
		if _, err := DecodeOutboxHead([]byte(bad)); err == nil {
			t.Errorf("decoded %q", bad)
		}
	}
}

// FuzzDecodeOutboxHead: for any entry, the head read from its JSON is
// the head of the entry encoding/json reads back from it.
func FuzzDecodeOutboxHead(f *testing.F) {
	f.Add(int64(1), "1-0", "app", "", int64(1795380011123), 4, "")
	f.Add(int64(-1), "x\"y", "ü\x00", "https://h/?a=1&b=2", int64(0), -3, `{"k":[1,2]}`)
	f.Fuzz(func(t *testing.T, seq int64, id, app, url string, tm int64, typ int, params string) {
		e := OutboxEntry{Seq: seq, ID: id, AppKey: app, CallbackURL: url, Time: tm, Record: Record{Type: typ, MsgID: id}}
		if json.Valid([]byte(params)) {
			e.Record.Params = json.RawMessage(params)
		}
		data, err := json.Marshal(e)
		if err != nil {
			t.Skip(err) // params encoding/json will not write
		}
		var back OutboxEntry
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if h, err := DecodeOutboxHead(data); err != nil || h != back.Head() {
			t.Fatalf("%s: head %+v %v, want %+v", data, h, err, back.Head())
		}
	})
}
