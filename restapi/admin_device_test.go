package restapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/devmsg/devmsg/delivery"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// deletions stands in for mqttapi.API in device deletion: Deleted notes
// the device's flag at the time of the call, then fails its pending
// messages as mqttapi.API does, with a real Dispatcher on the test's
// store (the REST tests have no broker, so there is nothing to
// disconnect).
type deletions struct {
	mu   sync.Mutex
	e    *env
	got  []string // "device flag=N" per call
	fail error    // returned instead of failing the messages
}

func (d *deletions) DesiredChanged(context.Context, string, string, store.Shadow) {}
func (d *deletions) Disabled(context.Context, string, string)                     {}

func (d *deletions) Deleted(ctx context.Context, appKey, device string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := d.e.st.GetDevice(ctx, appKey, device)
	if err != nil {
		return err
	}
	d.got = append(d.got, fmt.Sprintf("%s flag=%d", device, dev.Flag))
	if d.fail != nil {
		return d.fail
	}
	disp := delivery.NewDispatcher(d.e.st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return disp.FailPending(ctx, appKey, device, message.ErrCodeDeviceDeleted, "device deleted")
}

func (d *deletions) set(f func(d *deletions)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d)
}

func (d *deletions) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.got...)
}

// deletionEnv is an env whose DeviceEvents are a deletions.
func deletionEnv(t *testing.T) (*env, *deletions) {
	ev := &deletions{}
	e := startEnv(&env{t: t, dir: t.TempDir(), deviceEvents: ev})
	ev.set(func(d *deletions) { d.e = e })
	return e, ev
}

type deviceDetail struct {
	Device struct {
		Name           string
		Mark           string
		Flag           int
		Status         int
		ClientIP       string `json:"client_ip"`
		LastLoginTime  string `json:"last_login_time"`
		LastLogoutTime string `json:"last_logout_time"`
		TimeCreate     int64  `json:"time_create"`
		TimeActive     int64  `json:"time_active"`
	}
	Properties json.RawMessage
}

func TestAdminGetDevice(t *testing.T) {
	e := newEnv(t)
	other := e.createApp("other")
	adm, own, foreign := adminCreds(), e.appCreds(), credsOf(other)
	e.createDevices("dev-0001")
	e.setProps(1, "dev-0001", 1, `[{"name":"temp","value":21.5},{"name":"mode","value":"eco"}]`)
	_, err := e.st.UpdateDevice(t.Context(), e.app.Key, "dev-0001", func(d *store.Device) error {
		d.Mark, d.Status, d.ClientIP, d.LastLoginTime, d.LastLogoutTime, d.TimeActive = "lab", 1, "203.0.113.7", 1767225700, 1767225650, 1767225600
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	path := "/admin/v1/apps/" + e.app.Key + "/devices/dev-0001"
	props := e.call("GET", "/device/v1/property?device_name=dev-0001", nil)
	props.wantOK(t)
	for name, c := range map[string]creds{"admin": adm, "own app": own} {
		t.Run(name, func(t *testing.T) {
			r := e.do("GET", path, nil, &c)
			r.wantOK(t)
			var got deviceDetail
			r.decode(t, &got)
			d := got.Device
			if d.Name != "dev-0001" || d.Mark != "lab" || d.Flag != 0 || d.Status != 1 || d.ClientIP != "203.0.113.7" ||
				d.LastLoginTime != "1767225700" || d.LastLogoutTime != "1767225650" || d.TimeCreate == 0 || d.TimeActive != 1767225600 {
				t.Errorf("device %+v", d)
			}
			if !jsonEqual(t, got.Properties, props.body) {
				t.Errorf("properties %s, want what GET /device/v1/property answers: %s", got.Properties, props.body)
			}
		})
	}
	t.Run("never connected", func(t *testing.T) {
		e.createDevices("dev-0002")
		r := e.do("GET", "/admin/v1/apps/"+e.app.Key+"/devices/dev-0002", nil, &own)
		r.wantOK(t)
		for _, want := range []string{`"last_login_time":""`, `"last_logout_time":""`, `"client_ip":""`, `"last_desired_version":1`, `"properties":[]`} {
			if !strings.Contains(string(r.body), want) {
				t.Errorf("%s lacks %s", r.body, want)
			}
		}
	})
	e.do("GET", path, nil, &foreign).wantError(t, 401, 1004, e.app.Key)
	e.do("GET", "/admin/v1/apps/"+e.app.Key+"/devices/ghost-1", nil, &own).wantError(t, 400, 1003, `"ghost-1" not found`)
	e.do("GET", "/admin/v1/apps/nope/devices/dev-0001", nil, &adm).wantError(t, 400, 1003, "nope")
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("decode %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func TestDeleteDevice(t *testing.T) {
	e, ev := deletionEnv(t)
	other := e.createApp("other")
	adm, own, foreign := adminCreds(), e.appCreds(), credsOf(other)
	base := "/admin/v1/apps/" + e.app.Key + "/devices/"
	oldSecret := e.createDevices("dev-0001", "dev-0002")[0]
	e.setProps(1, "dev-0001", 1, `[{"name":"temp","value":21.5}]`)
	pending := e.send(`{"seq_no":2,"device_name":"dev-0001","msg_body":"never delivered","ttl":3600}`)
	otherPending := e.send(`{"seq_no":3,"device_name":"dev-0002","msg_body":"for dev-0002","ttl":3600}`)

	t.Run("refused", func(t *testing.T) {
		e.do("DELETE", base+"dev-0001", nil, &foreign).wantError(t, 401, 1004, e.app.Key)
		e.do("DELETE", base+"ghost-1", nil, &own).wantError(t, 400, 1003, `"ghost-1" not found`)
		e.do("DELETE", "/admin/v1/apps/nope/devices/dev-0001", nil, &adm).wantError(t, 400, 1003, "nope")
		e.call("GET", "/device/v1/baseinfo?device_name=dev-0001", nil).wantOK(t)
		if got := ev.calls(); len(got) != 0 {
			t.Fatalf("Deleted called for refused deletions: %q", got)
		}
	})
	t.Run("a failure midway leaves the device disabled", func(t *testing.T) {
		ev.set(func(d *deletions) { d.fail = errors.New("broker unreachable") })
		defer ev.set(func(d *deletions) { d.fail = nil })
		e.do("DELETE", base+"dev-0001", nil, &own).wantError(t, 500, 1000)
		info := e.call("GET", "/device/v1/baseinfo?device_name=dev-0001", nil)
		if !strings.Contains(string(info.body), `"flag":1`) {
			t.Fatalf("after a failed deletion: %d %s", info.status, info.body)
		}
		if m := e.message(pending); m.State != store.StatePending {
			t.Fatalf("message after a failed deletion: %+v", m)
		}
	})

	r := e.do("DELETE", base+"dev-0001", nil, &own)
	r.wantOK(t)
	if string(r.body) != `{"deleted":true,"device_name":"dev-0001"}` {
		t.Fatalf("response %s", r.body)
	}
	// Deleted came after the device was disabled, on every try.
	if got, want := ev.calls(), []string{"dev-0001 flag=1", "dev-0001 flag=1"}; !slices.Equal(got, want) {
		t.Fatalf("Deleted calls %q, want %q", got, want)
	}

	t.Run("pending message failed with 3007 and stays readable", func(t *testing.T) { testDeletedDeviceMessages(t, e, pending, otherPending) })
	t.Run("the device is gone", func(t *testing.T) {
		for _, path := range []string{"/device/v1/baseinfo", "/device/v1/status", "/device/v1/property"} {
			e.call("GET", path+"?device_name=dev-0001", nil).wantError(t, 400, 1003, `"dev-0001" not found`)
		}
		e.call("POST", "/msg/v1/msg", `{"seq_no":4,"device_name":"dev-0001","msg_body":"x"}`).wantError(t, 400, 1003, `"dev-0001" not found`)
		e.call("POST", "/device/v1/property", `{"seq_no":5,"device_name":"dev-0001","version":2,"properties":[{"name":"temp","value":1}]}`).
			wantError(t, 400, 1003, `"dev-0001" not found`)
		e.do("GET", base+"dev-0001", nil, &own).wantError(t, 400, 1003, `"dev-0001" not found`)
		e.do("PATCH", base+"dev-0001", `{"flag":0}`, &own).wantError(t, 400, 1003, `"dev-0001" not found`)
		e.do("DELETE", base+"dev-0001", nil, &adm).wantError(t, 400, 1003, `"dev-0001" not found`)
		list := e.do("GET", "/admin/v1/apps/"+e.app.Key+"/devices", nil, &own)
		if strings.Contains(string(list.body), "dev-0001") || !strings.Contains(string(list.body), "dev-0002") {
			t.Fatalf("device list %s", list.body)
		}
	})
	t.Run("the name can be created again", func(t *testing.T) { testRecreateDeletedDevice(t, e, oldSecret, pending) })
	t.Run("admin deletes too", func(t *testing.T) {
		e.do("DELETE", base+"dev-0002", nil, &adm).wantOK(t)
		if m := e.message(otherPending); m.State != store.StateFailed || m.Records[len(m.Records)-1].Error.Code != 3007 {
			t.Fatalf("message %+v", m)
		}
	})
	t.Run("a disabled device is deleted too", func(t *testing.T) {
		e.createDevices("dev-0003")
		e.do("PATCH", base+"dev-0003", `{"flag":1}`, &own).wantOK(t)
		e.do("DELETE", base+"dev-0003", nil, &own).wantOK(t)
		e.call("GET", "/device/v1/baseinfo?device_name=dev-0003", nil).wantError(t, 400, 1003, "dev-0003")
	})
}

// testDeletedDeviceMessages is TestDeleteDevice's subtest of the
// deleted device's messages.
func testDeletedDeviceMessages(t *testing.T, e *env, pending, otherPending int64) {
	m := e.message(pending)
	if m.State != store.StateFailed || m.DeviceName != "dev-0001" || len(m.Records) != 3 {
		t.Fatalf("message %+v", m)
	}
	last := m.Records[2]
	if last.Type != store.RecordDeliveryFailure || last.Error == nil || last.Error.Code != 3007 || last.Error.Message != "device deleted" {
		t.Fatalf("last record %+v", last)
	}
	if m := e.message(otherPending); m.State != store.StatePending {
		t.Fatalf("another device's message: %+v", m)
	}
}

// testRecreateDeletedDevice is TestDeleteDevice's subtest of a device
// created again under the deleted one's name.
func testRecreateDeletedDevice(t *testing.T, e *env, oldSecret string, pending int64) {
	secret := e.createDevices("dev-0001")[0]
	if secret == oldSecret {
		t.Fatal("the re-created device has the old secret")
	}
	s := e.summary("dev-0001")
	if len(s.Properties) != 0 || s.LastDesiredVersion != 1 || s.LastReportedVersion != 0 {
		t.Fatalf("re-created device's properties %+v", s)
	}
	if m := e.message(e.send(`{"seq_no":6,"device_name":"dev-0001","msg_body":"again"}`)); m.State != store.StatePending {
		t.Fatalf("message to the re-created device: %+v", m)
	}
	// The old message is still there, unchanged.
	if m := e.message(pending); m.State != store.StateFailed || len(m.Records) != 3 {
		t.Fatalf("old message after re-creation: %+v", m)
	}
}
