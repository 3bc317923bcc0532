package restapi_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestAuthentication(t *testing.T) {
	e := newEnv(t, lenientAuth) // more failures than the throttle allows from one address
	e.createDevices("dev-0001")
	const path = "/device/v1/status?device_name=dev-0001"
	cases := []struct {
		name  string
		creds *creds
	}{
		{"no credentials", nil},
		{"wrong secret", &creds{e.app.Key, "wrong"}},
		{"unknown key", &creds{"no-such-key", e.app.MasterSecret}},
		{"empty", &creds{"", ""}},
		{"admin account is not an app", &creds{"admin", adminPassword}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("GET", path, nil, tc.creds)
			r.wantError(t, 401, 1004, "authentication failed")
			if r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	t.Run("every endpoint", func(t *testing.T) {
		for _, ep := range []string{"POST /device/v1/devices", "POST /device/v1/property", "GET /device/v1/property", "GET /device/v1/baseinfo", "GET /device/v1/status", "POST /msg/v1/msg", "GET /msg/v1/msg"} {
			method, path, _ := strings.Cut(ep, " ")
			e.do(method, path, nil, &creds{e.app.Key, "wrong"}).wantError(t, 401, 1004)
		}
	})
	t.Run("right credentials", func(t *testing.T) {
		e.call("GET", path, nil).wantOK(t)
	})
}

func TestCreateDevices(t *testing.T) {
	e := newEnv(t)
	e.createDevices("existing")
	secretRE := regexp.MustCompile(`^[A-Za-z0-9]{32}$`)

	type el struct {
		DeviceName   string `json:"device_name"`
		Code         int
		DeviceSecret string `json:"device_secret"`
		Message      string
	}
	r := e.call("POST", "/device/v1/devices", `{"device":[
		{"name":"abcd"},
		{"name":"abc"},
		{"name":"`+strings.Repeat("x", 24)+`","mark":"`+strings.Repeat("m", 128)+`"},
		{"name":"`+strings.Repeat("y", 25)+`"},
		{"name":"Az09-_@.","mark":"`+strings.Repeat("é", 128)+`"},
		{"name":"bad name"},
		{"name":"okname","mark":"`+strings.Repeat("m", 129)+`"},
		{"mark":"no name"},
		{"name":"existing"},
		{"name":"twice"},
		{"name":"twice"},
		{"name":12345},
		"not an object",
		{"name":"okmark","mark":7}
	]}`)
	r.wantOK(t)
	var out struct{ Resp []el }
	r.decode(t, &out)
	want := []struct {
		name string
		code int
		msg  string
	}{
		{"abcd", 0, ""},
		{"abc", 1003, "4 to 24"},
		{strings.Repeat("x", 24), 0, ""},
		{strings.Repeat("y", 25), 1003, "4 to 24"},
		{"Az09-_@.", 0, ""},
		{"bad name", 1003, "digits, letters"},
		{"okname", 1003, "mark"},
		{"", 1002, "name is required"},
		{"existing", 3001, "already exists"},
		{"twice", 0, ""},
		{"twice", 3001, "already exists"},
		{"", 1003, "name must be a string"},
		{"", 1003, "JSON object"},
		{"okmark", 1003, "mark must be a string"},
	}
	if len(out.Resp) != len(want) {
		t.Fatalf("%d results for %d devices: %s", len(out.Resp), len(want), r.body)
	}
	for i, w := range want {
		got := out.Resp[i]
		if got.DeviceName != w.name || got.Code != w.code || !strings.Contains(got.Message, w.msg) {
			t.Errorf("resp[%d] = %+v, want name %q code %d message containing %q", i, got, w.name, w.code, w.msg)
		}
		if w.code == 0 && !secretRE.MatchString(got.DeviceSecret) {
			t.Errorf("resp[%d] secret %q is not 32 alphanumerics", i, got.DeviceSecret)
		}
		if w.code != 0 && got.DeviceSecret != "" {
			t.Errorf("resp[%d] failed but carries a secret", i)
		}
	}
	// The secret returned at creation is the one base info shows.
	info := e.call("GET", "/device/v1/baseinfo?device_name=abcd", nil)
	var bi struct {
		DeviceSecret string `json:"device_secret"`
		Flag         int
		TimeCreate   int64 `json:"time_create"`
		TimeActive   int64 `json:"time_active"`
	}
	info.decode(t, &bi)
	if bi.DeviceSecret != out.Resp[0].DeviceSecret || bi.Flag != 0 || bi.TimeCreate == 0 || bi.TimeActive != 0 {
		t.Errorf("baseinfo %s does not match the created device", info.body)
	}
}

func TestCreateDevicesBatchLimits(t *testing.T) {
	e := newEnv(t)
	batch := func(n, from int) string {
		var b strings.Builder
		b.WriteString(`{"device":[`)
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"name":"dev-%06d"}`, from+i)
		}
		b.WriteString("]}")
		return b.String()
	}
	t.Run("1000 devices", func(t *testing.T) {
		r := e.call("POST", "/device/v1/devices", batch(1000, 0))
		r.wantOK(t)
		var out struct{ Resp []struct{ Code int } }
		r.decode(t, &out)
		if len(out.Resp) != 1000 {
			t.Fatalf("%d results", len(out.Resp))
		}
		for i, el := range out.Resp {
			if el.Code != 0 {
				t.Fatalf("resp[%d] code %d", i, el.Code)
			}
		}
	})
	cases := []struct {
		name, body string
		code       int
		fragment   string
	}{
		{"1001 devices", batch(1001, 5000), 1003, "1 to 1000"},
		{"empty array", `{"device":[]}`, 1003, "1 to 1000"},
		{"missing device", `{}`, 1002, "device is required"},
		{"null device", `{"device":null}`, 1002, "device is required"},
		{"device not an array", `{"device":{"name":"abcd"}}`, 1003, "array"},
		{"malformed JSON", `{"device":[`, 1003, "JSON"},
		{"not an object", `[1,2]`, 1003, "JSON object"},
		{"trailing data", `{"device":[]} {}`, 1003, "after the JSON object"},
		{"empty body", ``, 1003, "JSON"},
		{"body of 1 MiB + 1 byte", sized(1<<20 + 1), 1003, "exceeds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.call("POST", "/device/v1/devices", tc.body).wantError(t, 400, tc.code, tc.fragment)
		})
	}
	t.Run("body of exactly 1 MiB", func(t *testing.T) {
		r := e.call("POST", "/device/v1/devices", sized(1<<20))
		r.wantOK(t) // the element fails (mark too long), the request is read
		if !strings.Contains(string(r.body), `"code":1003`) {
			t.Fatalf("got %.200s", r.body)
		}
	})
	// Nothing of the rejected 1001 was created.
	e.call("GET", "/device/v1/status?device_name=dev-005000", nil).wantError(t, 400, 1003, "not found")
}

func TestDeviceQueries(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	t.Run("status of a never-connected device", func(t *testing.T) {
		r := e.call("GET", "/device/v1/status?device_name=dev-0001", nil)
		r.wantOK(t)
		if got, want := string(r.body), `{"client_ip":"","last_login_time":"","last_logout_time":"","status":0}`; got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	})
	t.Run("property summary of a new device", func(t *testing.T) {
		r := e.call("GET", "/device/v1/property?device_name=dev-0001", nil)
		r.wantOK(t)
		want := `{"app_ver":"","last_desired_stime":0,"last_desired_version":1,"last_reported_stime":0,"last_reported_version":0,"properties":[],"sdk_ver":""}`
		if string(r.body) != want {
			t.Errorf("got %s, want %s", r.body, want)
		}
	})
	for _, ep := range []string{"status", "baseinfo", "property"} {
		t.Run(ep+" unknown device", func(t *testing.T) {
			e.call("GET", "/device/v1/"+ep+"?device_name=nobody", nil).wantError(t, 400, 1003, `"nobody"`, "not found")
		})
		t.Run(ep+" missing device_name", func(t *testing.T) {
			e.call("GET", "/device/v1/"+ep, nil).wantError(t, 400, 1002, "device_name")
			e.call("GET", "/device/v1/"+ep+"?device_name=", nil).wantError(t, 400, 1002, "device_name")
		})
	}
	t.Run("unknown route", func(t *testing.T) {
		r := e.call("GET", "/device/v1/nothing", nil)
		if r.status != 404 {
			t.Fatalf("status %d", r.status)
		}
	})
}

func TestTenantIsolation(t *testing.T) {
	e := newEnv(t)
	other := e.createApp("other-app")
	oc := credsOf(other)
	e.createDevices("shared-name", "only-in-a")
	// The same name may exist in both apps, with its own secret.
	r := e.do("POST", "/device/v1/devices", `{"device":[{"name":"shared-name"}]}`, &oc)
	r.wantOK(t)
	if !strings.Contains(string(r.body), `"code":0`) {
		t.Fatalf("app B could not create its own shared-name: %s", r.body)
	}
	a := e.call("GET", "/device/v1/baseinfo?device_name=shared-name", nil)
	b := e.do("GET", "/device/v1/baseinfo?device_name=shared-name", nil, &oc)
	if string(a.body) == string(b.body) {
		t.Fatal("two apps see the same device")
	}
	for _, ep := range []string{"status", "baseinfo", "property"} {
		e.do("GET", "/device/v1/"+ep+"?device_name=only-in-a", nil, &oc).wantError(t, 400, 1003, "not found")
	}
	e.do("POST", "/device/v1/property", `{"seq_no":1,"device_name":"only-in-a","version":1,"properties":[{"name":"p","value":1}]}`, &oc).wantError(t, 400, 1003, "not found")
	e.do("POST", "/msg/v1/msg", `{"seq_no":2,"device_name":"only-in-a","msg_body":"hi"}`, &oc).wantError(t, 400, 1003, "not found")

	sent := e.call("POST", "/msg/v1/msg", `{"seq_no":3,"device_name":"only-in-a","msg_body":"hi"}`)
	sent.wantOK(t)
	var m struct{ Msgid int64 }
	sent.decode(t, &m)
	e.do("GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", m.Msgid), nil, &oc).wantError(t, 400, 1003, "not found")
	e.call("GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", m.Msgid), nil).wantOK(t)

	// App B's property set did not touch app A's device.
	p := e.call("GET", "/device/v1/property?device_name=only-in-a", nil)
	if !strings.Contains(string(p.body), `"last_desired_version":1`) {
		t.Errorf("app A's device changed: %s", p.body)
	}
}

// sized returns a batch-create body of exactly n bytes.
func sized(n int) string {
	const head, tail = `{"device":[{"name":"abcd","mark":"`, `"}]}`
	return head + strings.Repeat("m", n-len(head)-len(tail)) + tail
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestOversizedBodyRefusedBeforeContinue: a client that sends
// "Expect: 100-continue" with a body declared over the limit gets the
// 400 without sending the body.
func TestOversizedBodyRefusedBeforeContinue(t *testing.T) {
	e := newEnv(t)
	body := &countingReader{r: strings.NewReader(strings.Repeat("a", 3<<20))}
	req, err := http.NewRequest("POST", e.srv.URL+"/msg/v1/msg", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 3 << 20
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Expect", "100-continue")
	c := e.appCreds()
	req.SetBasicAuth(c.user, c.pass)
	tr := e.client.Transport.(*http.Transport).Clone()
	tr.ExpectContinueTimeout = 10 * time.Second
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(out), "exceeds 1048576 bytes") {
		t.Fatalf("got %d %s", resp.StatusCode, out)
	}
	if body.n != 0 {
		t.Errorf("the client sent %d bytes of the body, want none", body.n)
	}
}
