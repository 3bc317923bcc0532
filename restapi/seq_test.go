package restapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

func TestSeqNoReplay(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	first := e.call("POST", "/device/v1/property", `{"seq_no":7,"device_name":"dev-0001","version":1,"properties":[{"name":"a","value":1}]}`)
	first.wantOK(t)

	t.Run("identical retry replays and applies nothing", func(t *testing.T) {
		// Same meaning, different key order and spacing.
		again := e.call("POST", "/device/v1/property", `{ "properties":[{"value":1,"name":"a"}], "version":1, "device_name":"dev-0001", "seq_no":7 }`)
		again.wantOK(t)
		if string(again.body) != string(first.body) {
			t.Fatalf("replay %s differs from %s", again.body, first.body)
		}
		if again.header.Get("X-Devmsg-Replayed") != "true" {
			t.Error("replay not marked")
		}
		if s := e.summary("dev-0001"); s.LastDesiredVersion != 2 {
			t.Fatalf("replay applied again: version %d", s.LastDesiredVersion)
		}
	})
	t.Run("different request with the same seq_no", func(t *testing.T) {
		e.call("POST", "/device/v1/property", `{"seq_no":7,"device_name":"dev-0001","version":2,"properties":[{"name":"a","value":2}]}`).
			wantError(t, 400, 1003, "seq_no 7 already used within 15 minutes")
	})
	t.Run("message send shares the seq_no space", func(t *testing.T) {
		e.call("POST", "/msg/v1/msg", `{"seq_no":7,"device_name":"dev-0001","msg_body":"x"}`).
			wantError(t, 400, 1003, "seq_no 7 already used")
	})
	t.Run("op_code responses are recorded too", func(t *testing.T) {
		stale := `{"seq_no":8,"device_name":"dev-0001","version":1,"properties":[{"name":"a","value":3}]}`
		r1 := e.call("POST", "/device/v1/property", stale)
		r2 := e.call("POST", "/device/v1/property", stale)
		if string(r1.body) != string(r2.body) || r2.header.Get("X-Devmsg-Replayed") != "true" {
			t.Fatalf("6003 not replayed: %s then %s", r1.body, r2.body)
		}
	})
	t.Run("message replay returns the same msgid and sends once", func(t *testing.T) {
		body := `{"seq_no":9,"device_name":"dev-0001","msg_body":"hello","ttl":60}`
		r1 := e.call("POST", "/msg/v1/msg", body)
		r2 := e.call("POST", "/msg/v1/msg", body)
		r1.wantOK(t)
		if string(r1.body) != string(r2.body) {
			t.Fatalf("msgids differ: %s vs %s", r1.body, r2.body)
		}
	})
	t.Run("null and absent optional fields are the same request", func(t *testing.T) {
		r1 := e.call("POST", "/msg/v1/msg", `{"seq_no":60,"device_name":"dev-0001","msg_body":"x"}`)
		r2 := e.call("POST", "/msg/v1/msg", `{"seq_no":60,"device_name":"dev-0001","msg_body":"x","ttl":null}`)
		if string(r1.body) != string(r2.body) || r2.header.Get("X-Devmsg-Replayed") != "true" {
			t.Fatalf("not replayed: %s then %d %s", r1.body, r2.status, r2.body)
		}
	})
	t.Run("apps have separate seq_no spaces", func(t *testing.T) {
		other := e.createApp("other")
		oc := credsOf(other)
		e.do("POST", "/device/v1/devices", `{"device":[{"name":"dev-0001"}]}`, &oc).wantOK(t)
		e.do("POST", "/msg/v1/msg", `{"seq_no":7,"device_name":"dev-0001","msg_body":"x"}`, &oc).wantOK(t)
	})
	t.Run("survives a restart", func(t *testing.T) {
		// An id from a clock an hour ahead, as if the clock then stepped back.
		ahead := e.send(`{"seq_no":90,"device_name":"dev-0001","msg_body":"before restart"}`) + int64(time.Hour/time.Millisecond)<<12 // 7 node + 5 sequence bits
		if err := e.st.CreateMessage(context.Background(), store.Message{ID: ahead, AppKey: e.app.Key, DeviceName: "dev-0001", Body: "x", State: store.StateFailed}, 0, nil); err != nil {
			t.Fatal(err)
		}
		e.restart()
		if after := e.send(`{"seq_no":91,"device_name":"dev-0001","msg_body":"after restart"}`); after <= ahead {
			t.Errorf("msgid %d after restart is not above the stored %d", after, ahead)
		}
		again := e.call("POST", "/device/v1/property", `{"seq_no":7,"device_name":"dev-0001","version":1,"properties":[{"name":"a","value":1}]}`)
		if string(again.body) != string(first.body) {
			t.Fatalf("after restart replay %s differs from %s", again.body, first.body)
		}
		e.call("POST", "/device/v1/property", `{"seq_no":7,"device_name":"dev-0001","version":2,"properties":[]}`).
			wantError(t, 400, 1003) // properties invalid: checked before seq_no
		e.call("POST", "/device/v1/property", `{"seq_no":7,"device_name":"dev-0001","version":2,"properties":[{"name":"b","value":1}]}`).
			wantError(t, 400, 1003, "already used")
	})
	t.Run("concurrent identical requests apply once", func(t *testing.T) {
		done := make(chan response, 10)
		for i := 0; i < 10; i++ {
			go func() {
				done <- e.call("POST", "/msg/v1/msg", `{"seq_no":50,"device_name":"dev-0001","msg_body":"once"}`)
			}()
		}
		var bodies = map[string]int{}
		for i := 0; i < 10; i++ {
			r := <-done
			bodies[fmt.Sprintf("%d %s", r.status, r.body)]++
		}
		if len(bodies) != 1 {
			t.Fatalf("concurrent identical sends got different answers: %v", bodies)
		}
	})
}

// A request that names no device is looked up under its seq_no first, like
// one that names an unknown device: a seq_no already used by another
// request is the answer, on both endpoints.
func TestSeqNoUsedBeforeMissingDevice(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	e.call("POST", "/msg/v1/msg", `{"seq_no":11,"device_name":"dev-0001","msg_body":"x"}`).wantOK(t)
	for _, tc := range []struct{ name, path, body string }{
		{"send", "/msg/v1/msg", `{"seq_no":11,"device_name":"","msg_body":"x"}`},
		{"property", "/device/v1/property", `{"seq_no":11,"device_name":"","version":1,"properties":[{"name":"a","value":1}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.call("POST", tc.path, tc.body).wantError(t, 400, 1003, "seq_no 11 already used within 15 minutes")
		})
	}
}
