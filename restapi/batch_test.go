package restapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/store"
)

type batchResult struct {
	DeviceName string `json:"device_name"`
	Code       int
	Msgid      int64
	Message    string
}

func (e *env) sendBatch(body string) []batchResult {
	e.t.Helper()
	r := e.call("POST", "/msg/v1/msgs", body)
	r.wantOK(e.t)
	var out struct{ Resp []batchResult }
	r.decode(e.t, &out)
	return out.Resp
}

// fillQueue gives the device MaxPending pending messages in one write.
func (e *env) fillQueue(device string) {
	e.t.Helper()
	var msgs []store.BatchMessage
	for i := range store.MaxPending {
		m := store.Message{ID: int64(1_000_000 + i), AppKey: e.app.Key, DeviceName: device, Body: "x", TTL: 3600,
			ExpireTime: 1 << 40, State: store.StatePending}
		msgs = append(msgs, store.BatchMessage{Message: m, Full: m})
	}
	if _, err := e.st.CreateMessages(context.Background(), e.app.Key, msgs, nil, nil); err != nil {
		e.t.Fatal(err)
	}
}

func TestSendBatch(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-a", "dev-b", "dev-off", "dev-full")
	c := adminCreds()
	e.do("PATCH", "/admin/v1/apps/"+e.app.Key+"/devices/dev-off", `{"flag":1}`, &c).wantOK(t)
	e.fillQueue("dev-full")
	const body = `{"seq_no":40,"device_names":["dev-a","nobody","dev-a","dev-off","dev-full","dev-b"],
		"msg_body":"refresh","ttl":600,"callback":{"params":{"job":"j1"}}}`
	res := e.sendBatch(body)
	want := []struct {
		name   string
		code   int
		msgid  bool
		says   string
		state  string
		record int // the last record's type
	}{
		{"dev-a", 0, true, "", "pending", store.RecordSubmitSuccess},
		{"nobody", 1003, false, `device "nobody" not found`, "", 0},
		{"dev-a", 1003, false, "device_names[2]", "", 0},
		{"dev-off", 3003, true, "disabled", "failed", store.RecordTargetInvalid},
		{"dev-full", 3004, true, "queue full", "failed", store.RecordSubmitFailure},
		{"dev-b", 0, true, "", "pending", store.RecordSubmitSuccess},
	}
	if len(res) != len(want) {
		t.Fatalf("%d results: %+v", len(res), res)
	}
	for i, w := range want {
		r := res[i]
		if r.DeviceName != w.name || r.Code != w.code || (r.Msgid != 0) != w.msgid || !strings.Contains(r.Message, w.says) {
			t.Errorf("result %d: %+v, want %+v", i, r, w)
			continue
		}
		if !w.msgid {
			continue
		}
		m := e.message(r.Msgid)
		last := m.Records[len(m.Records)-1]
		if m.State != w.state || m.DeviceName != w.name || last.Type != w.record || last.Params["job"] != "j1" || m.TTL != 600 {
			t.Errorf("message of %s: %+v", w.name, m)
		}
	}
	if res[0].Msgid == res[5].Msgid {
		t.Error("two devices share a msgid")
	}

	t.Run("replay", func(t *testing.T) {
		r := e.call("POST", "/msg/v1/msgs", body)
		r.wantOK(t)
		if r.header.Get("X-Devmsg-Replayed") != "true" {
			t.Error("not marked as a replay")
		}
		var out struct{ Resp []batchResult }
		r.decode(t, &out)
		if fmt.Sprint(out.Resp) != fmt.Sprint(res) {
			t.Fatalf("replay %+v, want %+v", out.Resp, res)
		}
		ms, err := e.st.PendingMessages(context.Background(), e.app.Key, "dev-a", 10)
		if err != nil || len(ms) != 1 {
			t.Fatalf("dev-a has %d pending after the replay (%v)", len(ms), err)
		}
		e.call("POST", "/msg/v1/msgs", strings.Replace(body, "refresh", "other", 1)).wantError(t, 400, 1003, "seq_no 40")
		// A single send cannot take the batch's seq_no either.
		e.call("POST", "/msg/v1/msg", `{"seq_no":40,"device_name":"dev-a","msg_body":"x"}`).wantError(t, 400, 1003, "seq_no 40")
	})
	t.Run("only unknown names", func(t *testing.T) {
		res := e.sendBatch(`{"seq_no":41,"device_names":["nobody"],"msg_body":"x"}`)
		if len(res) != 1 || res[0].Code != 1003 {
			t.Fatalf("results %+v", res)
		}
		r := e.call("POST", "/msg/v1/msgs", `{"seq_no":41,"device_names":["nobody"],"msg_body":"x"}`)
		if r.header.Get("X-Devmsg-Replayed") != "true" {
			t.Error("an answer without messages is not recorded")
		}
		// Unknown names before, between and after the messages.
		const mixed = `{"seq_no":42,"device_names":["nobody","dev-b","no-2","no-3","dev-a","no-4"],"msg_body":"x"}`
		first := e.call("POST", "/msg/v1/msgs", mixed)
		first.wantOK(t)
		again := e.call("POST", "/msg/v1/msgs", mixed)
		if again.header.Get("X-Devmsg-Replayed") != "true" || string(again.body) != string(first.body) {
			t.Fatalf("replay %s\nwant %s", again.body, first.body)
		}
	})
	t.Run("bad requests", func(t *testing.T) {
		e.call("POST", "/msg/v1/msgs", `{"seq_no":50,"msg_body":"x"}`).wantError(t, 400, 1002, "device_names")
		e.call("POST", "/msg/v1/msgs", `{"device_names":["dev-a"],"msg_body":"x"}`).wantError(t, 400, 1002, "seq_no")
		e.call("POST", "/msg/v1/msgs", `{"seq_no":50,"device_names":["dev-a"]}`).wantError(t, 400, 1002, "msg_body")
		e.call("POST", "/msg/v1/msgs", `{"seq_no":50,"device_names":[],"msg_body":"x"}`).wantError(t, 400, 1003, "1 to 1000")
		e.call("POST", "/msg/v1/msgs", `{"seq_no":50,"device_names":"dev-a","msg_body":"x"}`).wantError(t, 400, 1003, "device_names")
		e.call("POST", "/msg/v1/msgs", `{"seq_no":50,"device_names":[1],"msg_body":"x"}`).wantError(t, 400, 1003, "device_names")
		// A null element is a type error, not a device named "" (which
		// would be answered 200 and use up the seq_no).
		e.call("POST", "/msg/v1/msgs", `{"seq_no":50,"device_names":["dev-a",null],"msg_body":"x"}`).wantError(t, 400, 1003, "device_names must be an array")
		many := `"dev-a"` + strings.Repeat(`,"dev-a"`, 1000)
		e.call("POST", "/msg/v1/msgs", `{"seq_no":50,"device_names":[`+many+`],"msg_body":"x"}`).wantError(t, 400, 1003, "got 1001")
		// A refused request leaves its seq_no free.
		if res := e.sendBatch(`{"seq_no":50,"device_names":["dev-b"],"msg_body":"x"}`); res[0].Code != 0 {
			t.Fatalf("seq_no 50 after refusals: %+v", res)
		}
	})
}

func TestSendBatchRateLimit(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-a", "dev-b", "dev-c", "dev-d")
	c := adminCreds()
	e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/ratelimits", `{"message":3}`, &c).wantOK(t)
	// Four messages never fit in a bucket of three.
	r := e.call("POST", "/msg/v1/msgs", `{"seq_no":1,"device_names":["dev-a","dev-b","dev-c","dev-d"],"msg_body":"x"}`)
	r.wantError(t, 429, 2002, "smaller batches")
	// Two fit; two more do not, as only one token is left; nothing of it is sent.
	e.sendBatch(`{"seq_no":2,"device_names":["dev-a","dev-b"],"msg_body":"x"}`)
	r = e.call("POST", "/msg/v1/msgs", `{"seq_no":3,"device_names":["dev-c","dev-d"],"msg_body":"x"}`)
	r.wantError(t, 429, 2002, "needs 2 tokens")
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	ms, err := e.st.PendingMessages(context.Background(), e.app.Key, "dev-c", 10)
	if err != nil || len(ms) != 0 {
		t.Fatalf("a refused batch queued %d messages (%v)", len(ms), err)
	}
	// Unknown names take no token of their own beyond the request's one.
	r = e.call("POST", "/msg/v1/msgs", `{"seq_no":4,"device_names":["nobody","dev-c"],"msg_body":"x"}`)
	r.wantOK(t)
}

// TestSendBatchEmptyName: an empty name in device_names is answered as
// the single send answers an empty device_name, 1002 (missing), each
// time it appears, not 1003 as an unknown or repeated device. The plain
// array scanner and the encoding/json fallback (taken here for the
// \u escape) answer alike.
func TestSendBatchEmptyName(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-a")
	e.call("POST", "/msg/v1/msg", `{"seq_no":60,"device_name":"","msg_body":"x"}`).wantError(t, 400, 1002, "device_name is required")
	for i, names := range []string{`["","dev-a",""]`, `["","dev-\u0061",""]`} {
		res := e.sendBatch(fmt.Sprintf(`{"seq_no":%d,"device_names":%s,"msg_body":"x"}`, 61+i, names))
		want := []struct {
			name string
			code int
			says string
		}{{"", 1002, "device_names[0] is required"}, {"dev-a", 0, ""}, {"", 1002, "device_names[2] is required"}}
		if len(res) != len(want) {
			t.Fatalf("%s: %d results: %+v", names, len(res), res)
		}
		for j, w := range want {
			if r := res[j]; r.DeviceName != w.name || r.Code != w.code || r.Message != w.says || (r.Msgid != 0) != (w.code == 0) {
				t.Errorf("%s: result %d: %+v, want %+v", names, j, r, w)
			}
		}
	}
}
