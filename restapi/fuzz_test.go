package restapi_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"github.com/devmsg/devmsg/restapi/restapitest"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/apps"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

// FuzzPostBodies feeds arbitrary bodies to every POST endpoint: the answer
// must never be a 5xx and the handler must never panic.
func FuzzPostBodies(f *testing.F) {
	seeds := []string{
		`{"device":[{"name":"abcd","mark":"m"}]}`,
		`{"seq_no":1,"device_name":"dev-0001","version":1,"properties":[{"name":"a","value":1}]}`,
		`{"seq_no":2,"device_name":"dev-0001","msg_body":"hi","ttl":5,"callback":{"url":"https://x.y/z","params":{"a":1}}}`,
		`{"seq_no":1e300,"version":-0,"properties":[{"name":"a","value":1e999}]}`,
		`{"device":[null,{},{"name":null}]}`,
		`{"name":"app"}`,
		`{"properties":[{"name":"t","type":"int","min":1e308,"max":-1e308}]}`,
		"{\"seq_no\":3,\"device_name\":\"dev-0001\",\"msg_body\":\"\xff\xfe\"}", // not UTF-8
		`{"seq_no":4,"device_name":"dev-0001","msg_body":"\ud800"}`,             // a lone surrogate
		`{"url":"ftp://x.y/z","types":["device.up",null,1],"format":"jiot"}`,
		`{"url":"http://127.0.0.1/h","types":[],"format":null}`,
		`[]`, `null`, `"x"`, ``, `{`, "\x00",
	}
	paths := []string{"/device/v1/devices", "/device/v1/property", "/msg/v1/msg", "/admin/v1/apps", "/admin/v1/apps/{key}/events/webhooks"}
	for _, s := range seeds {
		for i := range paths {
			f.Add(uint8(i), []byte(s))
		}
	}
	st, err := pebble.Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	app := apps.New("fuzz")
	if err := st.CreateApp(f.Context(), app); err != nil {
		f.Fatal(err)
	}
	if _, err := st.CreateDevices(f.Context(), app.Key, []store.Device{{AppKey: app.Key, Name: "dev-0001", Secret: "s"}}); err != nil {
		f.Fatal(err)
	}
	cfg, err := restapitest.Config(st, restapi.Config{AdminUsername: "admin", AdminPasswordSHA256: sha256.Sum256([]byte("pw"))})
	if err != nil {
		f.Fatal(err)
	}
	api, err := restapi.New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		f.Fatal(err)
	}
	h := api.Handler()
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		path := strings.Replace(paths[int(which)%len(paths)], "{key}", app.Key, 1)
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		if path == "/admin/v1/apps" {
			req.SetBasicAuth("admin", "pw")
		} else {
			req.SetBasicAuth(app.Key, app.MasterSecret)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("POST %s %q: %d %s", path, body, rec.Code, rec.Body)
		}
		if !bytes.HasPrefix(rec.Body.Bytes(), []byte("{")) {
			t.Fatalf("POST %s %q: body %q is not a JSON object", path, body, rec.Body)
		}
		// A message is sent only with the text it was given: never with
		// U+FFFD standing in for bytes that were not UTF-8.
		var sent map[string]json.RawMessage
		if path == "/msg/v1/msg" && rec.Code == http.StatusOK && json.Unmarshal(body, &sent) == nil && !utf8.Valid(sent["msg_body"]) {
			t.Fatalf("POST %s %q: accepted a msg_body that is not UTF-8", path, body)
		}
	})
}
