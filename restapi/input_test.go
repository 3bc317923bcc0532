package restapi_test

import (
	"io"
	"net/http"
	"testing"
)

// TestTextMustBeUTF8: a string field holding bytes that are not UTF-8, or
// an escaped half of a surrogate pair, is refused naming the field rather
// than stored with U+FFFD in place of what was sent.
func TestTextMustBeUTF8(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	for _, c := range []struct {
		name, body string
		ok         bool
	}{
		{"raw byte 0xff", "{\"seq_no\":1,\"device_name\":\"dev-0001\",\"msg_body\":\"a\xffb\"}", false},
		{"truncated sequence", "{\"seq_no\":2,\"device_name\":\"dev-0001\",\"msg_body\":\"\xe2\x82\"}", false},
		{"lone high surrogate", `{"seq_no":3,"device_name":"dev-0001","msg_body":"x\ud83dy"}`, false},
		{"lone low surrogate", `{"seq_no":4,"device_name":"dev-0001","msg_body":"\ude00"}`, false},
		{"reversed pair", `{"seq_no":5,"device_name":"dev-0001","msg_body":"\ude00\ud83d"}`, false},
		{"escaped pair", `{"seq_no":6,"device_name":"dev-0001","msg_body":"\ud83d\ude00 \\ud800"}`, true},
		{"multibyte text", `{"seq_no":7,"device_name":"dev-0001","msg_body":"Ventil öffnen ✓ 😀"}`, true},
		{"escaped U+FFFD itself", `{"seq_no":8,"device_name":"dev-0001","msg_body":"\ufffd"}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.call("POST", "/msg/v1/msg", c.body)
			if c.ok {
				r.wantOK(t)
				return
			}
			r.wantError(t, 400, 1003, "msg_body", "UTF-8")
		})
	}
}

// TestEveryTextMustBeUTF8: property names and values and callback params
// are held to UTF-8 like msg_body; they go back out in responses, desired
// documents and callbacks, where a strict client would choke on them.
func TestEveryTextMustBeUTF8(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	for _, c := range []struct{ name, path, body, field string }{
		{"property value", "/device/v1/property", "{\"seq_no\":1,\"device_name\":\"dev-0001\",\"version\":1,\"properties\":[{\"name\":\"s\",\"value\":\"\xff\"}]}", "properties[0].value"},
		{"property name", "/device/v1/property", "{\"seq_no\":2,\"device_name\":\"dev-0001\",\"version\":1,\"properties\":[{\"name\":\"n\xff\",\"value\":1}]}", "properties[0].name"},
		{"property value surrogate", "/device/v1/property", `{"seq_no":3,"device_name":"dev-0001","version":1,"properties":[{"name":"s","value":"\ud800"}]}`, "properties[0].value"},
		{"callback params", "/msg/v1/msg", "{\"seq_no\":4,\"device_name\":\"dev-0001\",\"msg_body\":\"ok\",\"callback\":{\"params\":{\"k\":\"\xff\"}}}", "callback.params"},
		{"callback params key", "/msg/v1/msg", `{"seq_no":5,"device_name":"dev-0001","msg_body":"ok","callback":{"params":{"\udc00":"v"}}}`, "callback.params"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call("POST", c.path, c.body).wantError(t, 400, 1003, c.field, "UTF-8")
		})
	}
}

// TestIntegerOutOfRange: an integral value beyond int64 says it is out of
// range and names the field; a fraction still says it must be an integer.
func TestIntegerOutOfRange(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	for _, c := range []struct{ name, seq, want string }{
		{"20 digits", "99999999999999999999", "seq_no is out of range"},
		{"negative 20 digits", "-99999999999999999999", "seq_no is out of range"},
		{"exponent", "1e19", "seq_no is out of range"},
		{"beyond float64", "1e999", "seq_no is out of range"},
		{"fraction", "1.5", "seq_no must be an integer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call("POST", "/msg/v1/msg", `{"seq_no":`+c.seq+`,"device_name":"dev-0001","msg_body":"x"}`).
				wantError(t, 400, 1003, c.want)
		})
	}
	e.call("POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"x","ttl":1e20}`).
		wantError(t, 400, 1003, "ttl is out of range")
}

// TestHeadLikeGet: HEAD on a GET endpoint gets GET's status and headers
// and no body; HEAD where GET is not served stays 405.
func TestHeadLikeGet(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	head := func(path string, c *creds) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodHead, e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c != nil {
			req.SetBasicAuth(c.user, c.pass)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if b, _ := io.ReadAll(resp.Body); len(b) != 0 {
			t.Errorf("HEAD %s: body %q", path, b)
		}
		return resp
	}
	app, admin := e.appCreds(), adminCreds()
	for _, c := range []struct {
		path   string
		creds  *creds
		status int
	}{
		{"/healthz", nil, 200},
		{"/device/v1/baseinfo?device_name=dev-0001", &app, 200},
		{"/device/v1/status?device_name=dev-0001", &app, 200},
		{"/device/v1/baseinfo?device_name=dev-0001", nil, 401},
		{"/device/v1/baseinfo?device_name=nope", &app, 400},
		{"/admin/v1/apps", &admin, 200},
		{"/msg/v1/msg?msgid=1", &app, 400},
		{"/device/v1/devices", &app, 405}, // POST only
	} {
		resp := head(c.path, c.creds)
		if resp.StatusCode != c.status {
			t.Errorf("HEAD %s: %d, want %d", c.path, resp.StatusCode, c.status)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" && c.path != "/metrics" {
			t.Errorf("HEAD %s: Content-Type %q", c.path, ct)
		}
	}
}
