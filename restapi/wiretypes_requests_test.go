package restapi_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/apitypes"
)

// TestAPITypesRequestsAreRead sends every request body of package
// apitypes that a client (the console) sends, and checks that the API
// read each field: a misspelt tag would be ignored as an unknown field
// or refused as a missing one. Each answer decodes as its apitypes type,
// and that type writes it back byte for byte.
func TestAPITypesRequestsAreRead(t *testing.T) {
	e := callbackEnv(t)
	f := &typedRequests{e: e, adm: adminCreds(), own: e.appCreds(), app: "/admin/v1/apps/" + e.app.Key}
	t.Run("apps", f.apps)
	t.Run("devices", f.devices)
	t.Run("properties", f.properties)
	t.Run("messages", f.messages)
	t.Run("callbacks", f.callbacks)
}

// typedRequests holds TestAPITypesRequestsAreRead's app; its subtests
// run in order on it.
type typedRequests struct {
	e        *env
	adm, own creds
	app      string
}

// answer checks r is a 200 that decodes as v's apitypes type.
func answer(t *testing.T, what string, r response, v any) {
	t.Helper()
	r.wantOK(t)
	sameAsAPIType(t, what, r.body, v)
}

func (f *typedRequests) apps(t *testing.T) {
	e := f.e
	var created apitypes.CreatedApp
	answer(t, "create app", e.do("POST", "/admin/v1/apps", apitypes.CreateAppRequest{Name: "typed"}, &f.adm), &created)
	if created.Name != "typed" || created.Key == "" || created.MasterSecret == "" {
		t.Fatalf("created %+v", created)
	}
	var rotated apitypes.MasterSecret
	answer(t, "rotate", e.do("POST", "/admin/v1/apps/"+created.Key+"/master_secret", apitypes.RotateSecretRequest{Confirm: created.Key}, &f.adm), &rotated)
	if rotated.Key != created.Key || rotated.MasterSecret == created.MasterSecret {
		t.Fatalf("rotated %+v, created %+v", rotated, created)
	}
	var limits apitypes.RateLimits
	answer(t, "rate limits", e.do("PUT", f.app+"/ratelimits", apitypes.RateLimitChanges{"query": 50}, &f.adm), &limits)
	if limits["query"] != 50 {
		t.Fatalf("rate limits %v", limits)
	}
	var model apitypes.PropertyModel
	want := []apitypes.PropertyDef{{Name: "temp", Type: "double", Min: "-40.5", Max: "125"}, {Name: "label", Type: "string", MaxLength: "16"}}
	answer(t, "model", e.do("PUT", f.app+"/properties", apitypes.PropertyModel{Properties: want}, &f.own), &model)
	if !slices.Equal(model.Properties, want) {
		t.Fatalf("model %+v, want %+v", model.Properties, want)
	}
}

func (f *typedRequests) devices(t *testing.T) {
	e := f.e
	var cd apitypes.CreateDevicesAnswer
	req := apitypes.CreateDevicesRequest{Device: []apitypes.NewDevice{{Name: "dev-t1", Mark: "kitchen", Tags: []string{"north"}}, {Name: "dev-t2"}}}
	answer(t, "create devices", e.call("POST", "/device/v1/devices", req), &cd)
	if len(cd.Resp) != 2 || cd.Resp[0].Code != 0 || cd.Resp[0].DeviceSecret == "" || cd.Resp[1].DeviceName != "dev-t2" {
		t.Fatalf("created %+v", cd)
	}
	var d apitypes.AdminDevice
	answer(t, "device", e.do("GET", f.app+"/devices/dev-t1", nil, &f.own), &d)
	if d.Device.Mark != "kitchen" || !slices.Equal(d.Device.Tags, []string{"north"}) {
		t.Fatalf("device %+v", d.Device)
	}
	flag, mark, tags := 1, "hall", []string{"south"}
	var s apitypes.DeviceSummary
	answer(t, "patch", e.do("PATCH", f.app+"/devices/dev-t2", apitypes.DevicePatch{Flag: &flag, Mark: &mark, Tags: &tags}, &f.own), &s)
	if s.Flag != 1 || s.Mark != "hall" || !slices.Equal(s.Tags, tags) {
		t.Fatalf("patched %+v", s)
	}
	tags = []string{}
	answer(t, "patch tags", e.do("PATCH", f.app+"/devices/dev-t2", apitypes.DevicePatch{Tags: &tags}, &f.own), &s)
	if s.Flag != 1 || s.Mark != "hall" || len(s.Tags) != 0 {
		t.Fatalf("patched tags %+v", s)
	}
}

func (f *typedRequests) properties(t *testing.T) {
	e := f.e
	var set apitypes.PropertySetAnswer
	req := apitypes.SetPropertyRequest{SeqNo: 1, DeviceName: "dev-t1", Version: 1,
		Properties: []apitypes.PropertyValue{{Name: "temp", Value: json.RawMessage(`21.5`)}}}
	answer(t, "set property", e.call("POST", "/device/v1/property", req), &set)
	if set.OpCode != 0 || set.DeviceName != "dev-t1" || set.OpID == 0 {
		t.Fatalf("set %+v", set)
	}
	var sum apitypes.PropertySummary
	answer(t, "property", e.call("GET", "/device/v1/property?device_name=dev-t1", nil), &sum)
	if len(sum.Properties) != 1 || sum.Properties[0].Name != "temp" || string(sum.Properties[0].DesiredValue) != "21.5" {
		t.Fatalf("summary %+v", sum)
	}
}

func (f *typedRequests) messages(t *testing.T) {
	e := f.e
	ttl := int64(120)
	var sent apitypes.SendAnswer
	req := apitypes.SendRequest{SeqNo: 2, DeviceName: "dev-t1", MsgBody: "hi", TTL: &ttl,
		Callback: &apitypes.MessageCallback{Params: json.RawMessage(`{"job":"j1"}`)}}
	answer(t, "send", e.call("POST", "/msg/v1/msg", req), &sent)
	var m apitypes.Message
	answer(t, "message", e.call("GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", sent.MsgID), nil), &m)
	if m.MsgID != sent.MsgID || m.TTL != 120 || len(m.Records) == 0 || string(m.Records[0].Params) != `{"job":"j1"}` {
		t.Fatalf("message %+v", m)
	}
	var batch apitypes.BatchSendAnswer
	answer(t, "batch", e.call("POST", "/msg/v1/msgs", apitypes.BatchSendRequest{SeqNo: 3, DeviceNames: []string{"dev-t1", "nobody"}, MsgBody: "b", TTL: &ttl}), &batch)
	if len(batch.Resp) != 2 || batch.Resp[0].Code != 0 || batch.Resp[0].MsgID == 0 || batch.Resp[1].Code != 1003 {
		t.Fatalf("batch %+v", batch)
	}
	var bc apitypes.BroadcastCreated
	answer(t, "broadcast", e.call("POST", "/msg/v1/broadcast", apitypes.BroadcastRequest{SeqNo: 4, Target: apitypes.BroadcastTarget{Tag: "north"}, MsgBody: "b"}), &bc)
	if bc.BroadcastID == 0 || bc.Targets != 1 {
		t.Fatalf("broadcast %+v", bc)
	}
	var b apitypes.Broadcast
	answer(t, "broadcast state", e.call("GET", fmt.Sprintf("/msg/v1/broadcast?broadcast_id=%d", bc.BroadcastID), nil), &b)
	if b.BroadcastID != bc.BroadcastID || b.Targets != 1 {
		t.Fatalf("broadcast state %+v", b)
	}
}

func (f *typedRequests) callbacks(t *testing.T) {
	e := f.e
	on, types := true, []int{5, 4}
	var s apitypes.CallbackSettings
	answer(t, "callback", e.do("PUT", f.app+"/callback", apitypes.CallbackChange{Enabled: &on, Types: &types}, &f.own), &s)
	if !s.Enabled || !slices.Equal(s.Types, []int{4, 5}) || s.SigningSecret == "" {
		t.Fatalf("callback settings %+v", s)
	}
	types = []int{}
	answer(t, "callback types []", e.do("PUT", f.app+"/callback", apitypes.CallbackChange{Types: &types}, &f.own), &s)
	if !s.Enabled || s.Types == nil || len(s.Types) != 0 {
		t.Fatalf("callback settings after types [] %+v", s)
	}
	rcv := newReceiver(t)
	u := rcv.url("/typed")
	var urls apitypes.CallbackURLs
	answer(t, "add URL", e.do("POST", f.app+"/callback/urls", apitypes.URLRequest{URL: u}, &f.own), &urls)
	if len(urls.URLs) != 1 || urls.URLs[0].URL != u || !urls.URLs[0].Default {
		t.Fatalf("URLs %+v", urls)
	}
	var test apitypes.URLTest
	answer(t, "test URL", e.do("POST", f.app+"/callback/urls/test", apitypes.URLRequest{URL: u}, &f.own), &test)
	if !test.OK || test.URL != u {
		t.Fatalf("test %+v", test)
	}
}
