package restapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// bodyless are the routes that change something but take no body; every
// other POST, PUT and PATCH route reads a JSON object.
var bodyless = []string{
	"POST /admin/v1/apps/:key/callback/deadletters/:id/redeliver",
}

// TestEveryBodyRefusesUnknownFields sends a field no endpoint knows to
// every route that takes a body, found from the API's own route list (so a
// route added later is held to it too), and wants 400/1003 naming the
// field: a typo is refused, never ignored with the default taken.
func TestEveryBodyRefusesUnknownFields(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-1")
	checked := 0
	for _, r := range e.api.Routes() {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
		default:
			continue
		}
		route := r.Method + " " + r.Path
		if slices.Contains(bodyless, route) || strings.HasPrefix(r.Path, "/debug/") {
			continue
		}
		checked++
		t.Run(route, func(t *testing.T) {
			path := strings.NewReplacer(":key", e.app.Key, ":name", "dev-1", ":id", "1").Replace(r.Path)
			c := e.appCreds()
			if strings.HasPrefix(r.Path, "/admin/") {
				c = adminCreds()
			}
			e.do(r.Method, path, `{"no_such_field":1}`, &c).wantError(t, 400, 1003, `unknown field "no_such_field"`)
		})
	}
	if checked < 10 {
		t.Fatalf("checked %d routes: the route list is not the API's", checked)
	}
}

// TestUnknownFields: the typo a user makes is named with its place in the
// body and what that place takes; a device element with one is refused
// alone, as any other fault of one element is; free-form values
// (callback.params, a property's value) hold any keys.
func TestUnknownFields(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-1")
	for _, c := range []struct {
		name, path, body string
		fragments        []string
	}{
		{"top level", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-1","msg_body":"hi","tll":5}`,
			[]string{`unknown field "tll" in the request body`, "seq_no, device_name, msg_body, ttl, callback"}},
		{"nested", "/msg/v1/msg", `{"seq_no":2,"device_name":"dev-1","msg_body":"hi","callback":{"urll":"https://example.com/"}}`,
			[]string{`unknown field "callback.urll" in callback`, "url, params"}},
		{"in an array", "/device/v1/property", `{"seq_no":3,"device_name":"dev-1","version":1,"properties":[{"name":"a","value":1},{"name":"b","valeu":2}]}`,
			[]string{`unknown field "properties[1].valeu" in properties[1]`}},
		{"broadcast target", "/msg/v1/broadcast", `{"seq_no":4,"target":{"tags":"x"},"msg_body":"hi"}`,
			[]string{`unknown field "target.tags"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call("POST", c.path, c.body).wantError(t, 400, 1003, c.fragments...)
		})
	}
	t.Run("free-form values", func(t *testing.T) {
		e.call("POST", "/msg/v1/msg", `{"seq_no":5,"device_name":"dev-1","msg_body":"hi","callback":{"params":{"anything":{"at":"all"}}}}`).wantOK(t)
	})
	t.Run("one device element", func(t *testing.T) {
		var got struct {
			Resp []struct {
				DeviceName string `json:"device_name"`
				Code       int    `json:"code"`
				Message    string `json:"message"`
			} `json:"resp"`
		}
		r := e.call("POST", "/device/v1/devices", `{"device":[{"name":"dev-2"},{"name":"dev-3","tag":["x"]}]}`)
		r.wantOK(t)
		r.decode(t, &got)
		if len(got.Resp) != 2 || got.Resp[0].Code != 0 || got.Resp[1].Code != 1003 || got.Resp[1].DeviceName != "dev-3" ||
			!strings.Contains(got.Resp[1].Message, `unknown field "device[1].tag"`) {
			t.Fatalf("answer %+v", got.Resp)
		}
	})
}
