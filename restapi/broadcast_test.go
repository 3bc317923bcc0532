package restapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

type broadcastView struct {
	BroadcastID int64 `json:"broadcast_id"`
	State       string
	Targets     int64
	Queued      int64
	Delivered   int64
	Expired     int64
	Failed      int64
	Retracted   int64
	TimeCreate  int64 `json:"time_create"`
}

func (e *env) broadcast(body string) (id, targets int64) {
	e.t.Helper()
	r := e.call("POST", "/msg/v1/broadcast", body)
	r.wantOK(e.t)
	var out struct {
		BroadcastID int64 `json:"broadcast_id"`
		Targets     int64
	}
	r.decode(e.t, &out)
	return out.BroadcastID, out.Targets
}

func (e *env) getBroadcast(id int64) broadcastView {
	e.t.Helper()
	r := e.call("GET", fmt.Sprintf("/msg/v1/broadcast?broadcast_id=%d", id), nil)
	r.wantOK(e.t)
	var v broadcastView
	r.decode(e.t, &v)
	return v
}

// waitBroadcast polls the broadcast until ok says it is as wanted.
func (e *env) waitBroadcast(id int64, ok func(broadcastView) bool) broadcastView {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := e.getBroadcast(id)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("broadcast %d stuck at %+v", id, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pending returns the device's pending messages.
func (e *env) pending(device string) []store.Message {
	e.t.Helper()
	ms, err := e.st.PendingMessages(context.Background(), e.app.Key, device, 10)
	if err != nil {
		e.t.Fatal(err)
	}
	return ms
}

func TestBroadcastToTag(t *testing.T) {
	e := newEnv(t)
	e.call("POST", "/device/v1/devices", `{"device":[
		{"name":"lamp-1","tags":["lamp"]},{"name":"lamp-2","tags":["lamp","x"]},{"name":"lamp-off","tags":["lamp"]},
		{"name":"other","tags":["x"]},{"name":"plain"}]}`).wantOK(t)
	c := adminCreds()
	e.do("PATCH", "/admin/v1/apps/"+e.app.Key+"/devices/lamp-off", `{"flag":1}`, &c).wantOK(t)
	const body = `{"seq_no":7,"target":{"tag":"lamp"},"msg_body":"refresh","ttl":600,"callback":{"params":{"job":"j1","broadcast_id":"mine"}}}`
	id, targets := e.broadcast(body)
	if targets != 2 || id <= 0 {
		t.Fatalf("broadcast %d with %d targets, want 2", id, targets)
	}
	v := e.waitBroadcast(id, func(v broadcastView) bool { return v.State == "done" })
	if v.Targets != 2 || v.Queued != 2 || v.Delivered+v.Expired+v.Failed+v.Retracted != 0 || v.TimeCreate == 0 {
		t.Fatalf("done broadcast %+v", v)
	}
	for _, d := range []string{"lamp-1", "lamp-2"} {
		ms := e.pending(d)
		if len(ms) != 1 || ms[0].Body != "refresh" || ms[0].TTL != 600 {
			t.Fatalf("%s pending %+v", d, ms)
		}
		m := e.message(ms[0].ID)
		for _, r := range m.Records {
			if r.Params["broadcast_id"] != fmt.Sprint(id) || r.Params["job"] != "j1" {
				t.Fatalf("record params %v", r.Params)
			}
		}
	}
	for _, d := range []string{"lamp-off", "other", "plain"} {
		if ms := e.pending(d); len(ms) != 0 {
			t.Fatalf("%s got %d messages", d, len(ms))
		}
	}
	t.Run("replay", func(t *testing.T) {
		r := e.call("POST", "/msg/v1/broadcast", body)
		r.wantOK(t)
		if r.header.Get("X-Devmsg-Replayed") != "true" || string(r.body) != fmt.Sprintf(`{"broadcast_id":%d,"targets":2}`, id) {
			t.Fatalf("replay %s", r.body)
		}
		time.Sleep(200 * time.Millisecond)
		if ms := e.pending("lamp-1"); len(ms) != 1 {
			t.Fatalf("a replay sent again: %d pending", len(ms))
		}
		e.call("POST", "/msg/v1/broadcast", strings.Replace(body, "refresh", "x", 1)).wantError(t, 400, 1003, "seq_no 7")
	})
	t.Run("all devices", func(t *testing.T) {
		id, targets := e.broadcast(`{"seq_no":8,"target":{"all":true},"msg_body":"all"}`)
		if targets != 4 {
			t.Fatalf("targets %d, want 4", targets)
		}
		e.waitBroadcast(id, func(v broadcastView) bool { return v.State == "done" && v.Queued == 4 })
		if ms := e.pending("plain"); len(ms) != 1 || ms[0].Body != "all" {
			t.Fatalf("plain pending %+v", ms)
		}
	})
	t.Run("a tag without devices", func(t *testing.T) {
		id, targets := e.broadcast(`{"seq_no":9,"target":{"tag":"none"},"msg_body":"x"}`)
		if targets != 0 {
			t.Fatalf("targets %d", targets)
		}
		e.waitBroadcast(id, func(v broadcastView) bool { return v.State == "done" && v.Queued == 0 })
	})
	t.Run("bad requests", func(t *testing.T) {
		e.call("POST", "/msg/v1/broadcast", `{"seq_no":10,"msg_body":"x"}`).wantError(t, 400, 1002, "target")
		e.call("POST", "/msg/v1/broadcast", `{"seq_no":10,"target":{},"msg_body":"x"}`).wantError(t, 400, 1003, "tag (a string) or all")
		e.call("POST", "/msg/v1/broadcast", `{"seq_no":10,"target":{"tag":"a","all":true},"msg_body":"x"}`).wantError(t, 400, 1003, "not both")
		e.call("POST", "/msg/v1/broadcast", `{"seq_no":10,"target":{"all":false},"msg_body":"x"}`).wantError(t, 400, 1003, "target.all")
		e.call("POST", "/msg/v1/broadcast", `{"seq_no":10,"target":{"tag":"a b"},"msg_body":"x"}`).wantError(t, 400, 1003, "target.tag")
		e.call("POST", "/msg/v1/broadcast", `{"seq_no":10,"target":"lamp","msg_body":"x"}`).wantError(t, 400, 1003, "target")
		e.call("POST", "/msg/v1/broadcast", `{"seq_no":10,"target":{"tag":"lamp"}}`).wantError(t, 400, 1002, "msg_body")
		e.call("GET", "/msg/v1/broadcast", nil).wantError(t, 400, 1002, "broadcast_id")
		e.call("GET", "/msg/v1/broadcast?broadcast_id=x", nil).wantError(t, 400, 1003, "broadcast_id")
		e.call("GET", "/msg/v1/broadcast?broadcast_id=12345", nil).wantError(t, 400, 1003, "broadcast 12345 not found")
		e.call("DELETE", "/msg/v1/broadcast?broadcast_id=12345", nil).wantError(t, 400, 1003, "not found")
	})
	t.Run("other apps see nothing", func(t *testing.T) {
		other := e.createApp("other")
		oc := credsOf(other)
		e.do("GET", fmt.Sprintf("/msg/v1/broadcast?broadcast_id=%d", id), nil, &oc).wantError(t, 400, 1003, "not found")
		e.do("DELETE", fmt.Sprintf("/msg/v1/broadcast?broadcast_id=%d", id), nil, &oc).wantError(t, 400, 1003, "not found")
	})
}

func TestBroadcastCancel(t *testing.T) {
	// One device a second: the test cancels midway.
	e := startEnv(&env{t: t, dir: t.TempDir(), fanout: &message.FanoutConfig{Rate: 1, Chunk: 1, Poll: 50 * time.Millisecond}})
	var devs []string
	for i := range 6 {
		devs = append(devs, fmt.Sprintf(`{"name":"dev-%d","tags":["t"]}`, i))
	}
	e.call("POST", "/device/v1/devices", `{"device":[`+strings.Join(devs, ",")+`]}`).wantOK(t)
	id, _ := e.broadcast(`{"seq_no":1,"target":{"tag":"t"},"msg_body":"x"}`)
	e.waitBroadcast(id, func(v broadcastView) bool { return v.Queued >= 1 })
	r := e.call("DELETE", fmt.Sprintf("/msg/v1/broadcast?broadcast_id=%d", id), nil)
	r.wantOK(t)
	v := e.waitBroadcast(id, func(v broadcastView) bool { return v.State == "cancelled" && v.Retracted == v.Queued })
	if v.Queued >= 6 {
		t.Fatalf("cancel reached every device: %+v", v)
	}
	time.Sleep(1500 * time.Millisecond) // a fan-out still running would reach another device by now
	after := e.getBroadcast(id)
	if after.Queued != v.Queued || after.Retracted != v.Queued {
		t.Fatalf("after the cancel: %+v, then %+v", v, after)
	}
	reached := 0
	for i := range 6 {
		if p := e.pending(fmt.Sprintf("dev-%d", i)); len(p) != 0 {
			t.Fatalf("dev-%d still has a pending message", i)
		}
	}
	ms, err := e.st.ListMessages(context.Background(), e.app.Key, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		reached++
		if m.State != store.StateRetracted || m.Records[len(m.Records)-1].Type != store.RecordRetractSuccess {
			t.Errorf("message %d: %s, records %+v", m.ID, m.State, m.Records)
		}
	}
	if int64(reached) != v.Queued {
		t.Fatalf("%d messages, queued %d", reached, v.Queued)
	}
}

// TestBroadcastTargetsTakenAtAcceptance checks a broadcast's targets
// (docs/api.md, "Broadcast"): the enabled devices that match when the broadcast is
// accepted, whatever changes before the fan-out reaches them.
func TestBroadcastTargetsTakenAtAcceptance(t *testing.T) {
	e := startEnv(&env{t: t, dir: t.TempDir(), fanout: &message.FanoutConfig{Chunk: 2, Poll: 50 * time.Millisecond}})
	e.call("POST", "/device/v1/devices", `{"device":[
		{"name":"kept","tags":["t"]},{"name":"untagged","tags":["t"]},{"name":"was-off","tags":["t"]},
		{"name":"tagged-late"},{"name":"deleted","tags":["t"]},{"name":"disabled-late","tags":["t"]}]}`).wantOK(t)
	c := adminCreds()
	admin := "/admin/v1/apps/" + e.app.Key + "/devices/"
	e.do("PATCH", admin+"was-off", `{"flag":1}`, &c).wantOK(t)
	// The fan-out waits until the devices have changed.
	e.broadcasts.Stop()
	id, targets := e.broadcast(`{"seq_no":1,"target":{"tag":"t"},"msg_body":"snap","ttl":600}`)
	if targets != 4 {
		t.Fatalf("targets %d, want 4 (kept, untagged, deleted, disabled-late)", targets)
	}
	e.call("POST", "/device/v1/tags", `{"device_name":"untagged","tags":[]}`).wantOK(t)
	e.call("POST", "/device/v1/tags", `{"device_name":"tagged-late","tags":["t"]}`).wantOK(t)
	e.do("PATCH", admin+"was-off", `{"flag":0}`, &c).wantOK(t)
	e.do("DELETE", admin+"deleted", nil, &c).wantOK(t)
	e.do("PATCH", admin+"disabled-late", `{"flag":1}`, &c).wantOK(t)
	if err := e.broadcasts.Start(); err != nil {
		t.Fatal(err)
	}
	v := e.waitBroadcast(id, func(v broadcastView) bool { return v.State == "done" })
	// The deleted target gets nothing and is not queued; the one
	// disabled since gets its message failed, as a disabled device's
	// pending messages are.
	if v.Targets != 4 || v.Queued != 3 || v.Failed != 1 {
		t.Fatalf("done broadcast %+v, want 4 targets, 3 queued, 1 failed", v)
	}
	for _, d := range []string{"kept", "untagged"} {
		if ms := e.pending(d); len(ms) != 1 || ms[0].Body != "snap" {
			t.Fatalf("%s pending %+v, want the broadcast's message", d, ms)
		}
	}
	for _, d := range []string{"tagged-late", "was-off", "disabled-late"} {
		if ms := e.pending(d); len(ms) != 0 {
			t.Fatalf("%s has %d pending messages, want none", d, len(ms))
		}
	}
	ms, err := e.st.ListMessages(context.Background(), e.app.Key, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range ms {
		got[m.DeviceName]++
		if m.DeviceName != "disabled-late" {
			continue
		}
		last := m.Records[len(m.Records)-1]
		if m.State != store.StateFailed || last.Type != store.RecordDeliveryFailure || last.Error == nil || last.Error.Code != message.ErrCodeDeviceDisabled {
			t.Fatalf("message of the device disabled after acceptance: %s, records %+v", m.State, m.Records)
		}
	}
	if len(got) != 3 || got["kept"] != 1 || got["untagged"] != 1 || got["disabled-late"] != 1 {
		t.Fatalf("messages per device %v, want one each for kept, untagged and disabled-late", got)
	}
}
