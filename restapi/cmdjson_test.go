package restapi

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
)

// TestEncodeCommandsMatchesEncodingJSON holds encodeCommands to the bytes
// json.Marshal writes for the views the API documents: one command, and
// a batch answer of commands and refused names.
func TestEncodeCommandsMatchesEncodingJSON(t *testing.T) {
	strs := []string{"", "ping", "dev-1", `quo"te`, "<b>&amp;", "tab\there", "ünï", "\u2028", "bad\xffutf8"}
	raws := []json.RawMessage{nil, json.RawMessage(`{"seq":1}`), json.RawMessage(`{ "a" : [1, 2] }`), json.RawMessage(`"<x>"`), json.RawMessage(`null`)}
	rng := rand.New(rand.NewPCG(5, 6))
	pick := func() string { return strs[rng.IntN(len(strs))] }
	n := func() int64 { return rng.Int64N(3) * rng.Int64N(1<<45) }
	for range 500 {
		rs := make([]command.Result, 1+rng.IntN(4))
		for i := range rs {
			if rng.IntN(4) == 0 {
				rs[i] = command.Result{DeviceName: pick(), Code: 1003, Message: pick()}
				continue
			}
			c := store.Command{ID: 1 + n(), DeviceName: pick(), Name: pick(), State: pick(), Code: int(n() % 7),
				Answered: rng.IntN(2) == 0, Result: raws[rng.IntN(len(raws))], Message: pick(), Progress: int(n() % 101),
				TimeCreate: n(), TimeSent: n(), TimeDelivered: n(), TimeDone: n()}
			rs[i] = command.Result{Command: c, DeviceName: c.DeviceName}
		}
		want, err := json.Marshal(viewCommand(rs[0].Command))
		if err != nil {
			t.Fatal(err)
		}
		if rs[0].Refused() {
			want, _ = json.Marshal(apitypes.CommandRefused{DeviceName: rs[0].DeviceName, Code: rs[0].Code, Message: rs[0].Message})
			got, _ := appendResult(nil, rs[0])
			if string(got) != string(want) {
				t.Fatalf("refused:\n got %s\nwant %s", got, want)
			}
		} else if got, err := encodeCommands(rs[:1], false); err != nil || string(got) != string(want) {
			t.Fatalf("one command:\n got %s, %v\nwant %s", got, err, want)
		}
		var ans apitypes.CommandBatchAnswer
		for _, r := range rs {
			var el []byte
			if r.Refused() {
				el, _ = json.Marshal(apitypes.CommandRefused{DeviceName: r.DeviceName, Code: r.Code, Message: r.Message})
			} else {
				el, _ = json.Marshal(viewCommand(r.Command))
			}
			ans.Resp = append(ans.Resp, el)
		}
		want, _ = json.Marshal(ans)
		if got, err := encodeCommands(rs, true); err != nil || string(got) != string(want) {
			t.Fatalf("batch:\n got %s, %v\nwant %s", got, err, want)
		}
	}
}

// TestAppendCommandViewCoversEveryField sets every field of the view: a
// field added to apitypes.Command and not to appendCommandView would be
// missing from answers, and fails here.
func TestAppendCommandViewCoversEveryField(t *testing.T) {
	var v apitypes.Command
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s")
		case reflect.Int, reflect.Int64:
			f.SetInt(7)
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			p.Elem().SetInt(7)
			f.Set(p)
		case reflect.Slice:
			f.SetBytes([]byte(`{"k":1}`))
		default:
			t.Fatalf("field %s of kind %s: teach this test to set it", rv.Type().Field(i).Name, f.Kind())
		}
	}
	want, _ := json.Marshal(v)
	got, err := appendCommandView(nil, &v)
	if err != nil || string(got) != string(want) {
		t.Fatalf("got %s, %v\nwant %s", got, err, want)
	}
}
