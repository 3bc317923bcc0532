package restapi_test

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAdminAPI(t *testing.T) {
	e := newEnv(t)
	other := e.createApp("other")
	adm, own, foreign := adminCreds(), e.appCreds(), credsOf(other)
	base := "/admin/v1/apps/" + e.app.Key

	t.Run("create app needs the admin", func(t *testing.T) {
		e.do("POST", "/admin/v1/apps", `{"name":"x"}`, &own).wantError(t, 401, 1004, "admin")
		e.do("POST", "/admin/v1/apps", `{"name":"x"}`, nil).wantError(t, 401, 1004)
		e.do("POST", "/admin/v1/apps", `{"name":"x"}`, &creds{"admin", "wrong"}).wantError(t, 401, 1004)
		e.do("POST", "/admin/v1/apps", `{}`, &adm).wantError(t, 400, 1002, "name")
		e.do("POST", "/admin/v1/apps", `{"name":""}`, &adm).wantError(t, 400, 1003, "name")
	})
	t.Run("list apps", func(t *testing.T) {
		all := e.do("GET", "/admin/v1/apps", nil, &adm)
		all.wantOK(t)
		if !strings.Contains(string(all.body), e.app.Key) || !strings.Contains(string(all.body), other.Key) {
			t.Errorf("admin list %s", all.body)
		}
		mine := e.do("GET", "/admin/v1/apps", nil, &own)
		if !strings.Contains(string(mine.body), e.app.Key) || strings.Contains(string(mine.body), other.Key) {
			t.Errorf("app list %s", mine.body)
		}
		if strings.Contains(string(all.body), e.app.MasterSecret) {
			t.Error("app list shows a master secret")
		}
	})
	t.Run("cross-app access is denied", func(t *testing.T) {
		for _, ep := range []string{
			"GET ", "POST /master_secret", "GET /properties", "PUT /properties", "GET /ratelimits", "GET /devices",
			"GET /devices/dev-0001", "PATCH /devices/dev-0001", "DELETE /devices/dev-0001", "GET /callback/deliveries",
		} {
			method, path, _ := strings.Cut(ep, " ")
			e.do(method, base+path, `{"properties":[]}`, &foreign).wantError(t, 401, 1004, e.app.Key)
		}
	})
	t.Run("unknown app", func(t *testing.T) {
		e.do("GET", "/admin/v1/apps/nope/properties", nil, &adm).wantError(t, 400, 1003, "nope")
	})
	t.Run("property model", func(t *testing.T) {
		for _, c := range []creds{adm, own} {
			e.do("PUT", base+"/properties", `{"properties":[{"name":"temp","type":"double","min":0,"max":50}]}`, &c).wantOK(t)
		}
		r := e.do("GET", base+"/properties", nil, &own)
		if !strings.Contains(string(r.body), `"name":"temp"`) {
			t.Errorf("model %s", r.body)
		}
		bad := []struct{ name, body, fragment string }{
			{"unknown type", `{"properties":[{"name":"a","type":"bool"}]}`, "type"},
			{"min over max", `{"properties":[{"name":"a","type":"int","min":5,"max":1}]}`, "min"},
			{"duplicate", `{"properties":[{"name":"a","type":"int"},{"name":"a","type":"int"}]}`, "twice"},
			{"max_length on int", `{"properties":[{"name":"a","type":"int","max_length":3}]}`, "max_length"},
			{"empty name", `{"properties":[{"name":"","type":"int"}]}`, "name"},
			{"not an array", `{"properties":{}}`, "properties"},
		}
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				e.do("PUT", base+"/properties", tc.body, &adm).wantError(t, 400, 1003, tc.fragment)
			})
		}
		e.do("PUT", base+"/properties", `{}`, &adm).wantError(t, 400, 1002, "properties")
	})
	t.Run("devices list and patch", func(t *testing.T) {
		var names []string
		for i := 0; i < 25; i++ {
			names = append(names, fmt.Sprintf("dev-%04d", i))
		}
		e.createDevices(append(names, "other-1")...)
		seen := 0
		cursor := ""
		for {
			r := e.do("GET", base+"/devices?prefix=dev-&limit=10&cursor="+cursor, nil, &own)
			r.wantOK(t)
			var page struct {
				Devices    []struct{ Name string }
				NextCursor string `json:"next_cursor"`
			}
			r.decode(t, &page)
			for _, d := range page.Devices {
				if d.Name != names[seen] {
					t.Fatalf("device %d is %s, want %s", seen, d.Name, names[seen])
				}
				seen++
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		if seen != 25 {
			t.Fatalf("listed %d devices, want 25", seen)
		}
		e.do("GET", base+"/devices?limit=0", nil, &own).wantError(t, 400, 1003, "limit")
		e.do("PATCH", base+"/devices/dev-0001", `{"flag":2}`, &own).wantError(t, 400, 1003, "flag")
		e.do("PATCH", base+"/devices/ghost", `{"flag":1}`, &own).wantError(t, 400, 1003, "not found")
		r := e.do("PATCH", base+"/devices/dev-0001", `{"flag":1,"mark":"lab"}`, &own)
		r.wantOK(t)
		info := e.call("GET", "/device/v1/baseinfo?device_name=dev-0001", nil)
		if !strings.Contains(string(info.body), `"flag":1`) {
			t.Errorf("baseinfo after disable: %s", info.body)
		}
	})
}

type appDetail struct {
	Name         string
	Key          string
	MasterSecret string         `json:"master_secret"`
	CreatedAt    int64          `json:"created_at"`
	Devices      int64          `json:"devices"`
	RateLimits   map[string]int `json:"rate_limits"`
}

func TestAdminGetApp(t *testing.T) {
	e := newEnv(t)
	other := e.createApp("other")
	adm, own, foreign := adminCreds(), e.appCreds(), credsOf(other)
	path := "/admin/v1/apps/" + e.app.Key
	before := time.Now().Unix()
	e.do("PUT", path+"/ratelimits", `{"message":50,"query":0}`, &adm).wantOK(t)
	for name, c := range map[string]creds{"admin": adm, "own app": own} {
		t.Run(name, func(t *testing.T) {
			r := e.do("GET", path, nil, &c)
			r.wantOK(t)
			var got appDetail
			r.decode(t, &got)
			want := map[string]int{"create": 1000, "property": 1000, "message": 50, "query": 0, "command": 1000}
			if got.Name != "test-app" || got.Key != e.app.Key || got.MasterSecret != e.app.MasterSecret ||
				got.CreatedAt < before-60 || got.CreatedAt > time.Now().Unix() || !maps.Equal(got.RateLimits, want) {
				t.Errorf("app %+v", got)
			}
		})
	}
	t.Run("service defaults", func(t *testing.T) {
		var got appDetail
		c := credsOf(other)
		e.do("GET", "/admin/v1/apps/"+other.Key, nil, &c).decode(t, &got)
		if want := map[string]int{"create": 1000, "property": 1000, "message": 1000, "query": 1000, "command": 1000}; !maps.Equal(got.RateLimits, want) {
			t.Errorf("rate limits %v, want %v", got.RateLimits, want)
		}
	})
	e.do("GET", path, nil, &foreign).wantError(t, 401, 1004, e.app.Key)
	e.do("GET", "/admin/v1/apps/nope", nil, &adm).wantError(t, 400, 1003, "nope")

	t.Run("device counts", func(t *testing.T) {
		e.createDevices("dev-1", "dev-2", "dev-3")
		e.do("DELETE", "/admin/v1/apps/"+e.app.Key+"/devices/dev-2", nil, &adm).wantOK(t)
		var got appDetail
		e.do("GET", path, nil, &own).decode(t, &got)
		if got.Devices != 2 {
			t.Errorf("the app shows %d devices, want 2", got.Devices)
		}
		var list struct{ Apps []appDetail }
		e.do("GET", "/admin/v1/apps", nil, &adm).decode(t, &list)
		counts := map[string]int64{}
		for _, a := range list.Apps {
			counts[a.Key] = a.Devices
		}
		if counts[e.app.Key] != 2 || counts[other.Key] != 0 {
			t.Errorf("the list's device counts %v, want 2 for %s and 0 for %s", counts, e.app.Key, other.Key)
		}
	})
}

func TestRotateMasterSecret(t *testing.T) {
	e := newEnv(t)
	other := e.createApp("other")
	adm, foreign := adminCreds(), credsOf(other)
	e.createDevices("dev-0001")
	path := "/admin/v1/apps/" + e.app.Key + "/master_secret"
	confirm := `{"confirm":"` + e.app.Key + `"}`
	rotate := func(t *testing.T, c creds) string {
		t.Helper()
		r := e.do("POST", path, confirm, &c)
		r.wantOK(t)
		var out struct{ Key, Master_Secret string }
		r.decode(t, &out)
		if out.Key != e.app.Key || len(out.Master_Secret) != 32 || out.Master_Secret == c.pass {
			t.Fatalf("rotation answered %s", r.body)
		}
		return out.Master_Secret
	}
	// works reports whether the credentials reach the REST and admin APIs.
	works := func(t *testing.T, c creds) bool {
		t.Helper()
		rest := e.do("GET", "/device/v1/status?device_name=dev-0001", nil, &c)
		admin := e.do("GET", "/admin/v1/apps/"+e.app.Key, nil, &c)
		if rest.status != admin.status || rest.status != 200 && rest.status != 401 {
			t.Fatalf("REST %d, admin %d", rest.status, admin.status)
		}
		return rest.status == 200
	}

	t.Run("refused", func(t *testing.T) {
		own := e.appCreds()
		bad := []struct{ name, body, fragment string }{
			{"wrong app key", `{"confirm":"` + other.Key + `"}`, "confirm must equal the app key"},
			{"empty", `{"confirm":""}`, "confirm must equal the app key"},
			{"not a string", `{"confirm":1}`, "confirm"},
		}
		for _, tc := range bad {
			t.Run(tc.name, func(t *testing.T) {
				e.do("POST", path, tc.body, &own).wantError(t, 400, 1003, tc.fragment)
			})
		}
		e.do("POST", path, `{}`, &own).wantError(t, 400, 1002, "confirm")
		e.do("POST", path, `{"confirm":null}`, &own).wantError(t, 400, 1002, "confirm")
		e.do("POST", path, nil, &own).wantError(t, 400, 1003)
		e.do("POST", path, confirm, &foreign).wantError(t, 401, 1004, e.app.Key)
		e.do("POST", "/admin/v1/apps/nope/master_secret", `{"confirm":"nope"}`, &adm).wantError(t, 400, 1003, "nope")
		if !works(t, own) {
			t.Fatal("a refused rotation changed the secret")
		}
	})
	t.Run("by the app itself", func(t *testing.T) {
		old := e.appCreds()
		fresh := creds{e.app.Key, rotate(t, old)}
		if works(t, old) {
			t.Error("the old secret still works")
		}
		if !works(t, fresh) {
			t.Error("the new secret does not work")
		}
		e.app.MasterSecret = fresh.pass
	})
	t.Run("by the admin", func(t *testing.T) {
		old := e.appCreds()
		fresh := creds{e.app.Key, rotate(t, adm)}
		if works(t, old) {
			t.Error("the old secret still works")
		}
		if !works(t, fresh) {
			t.Error("the new secret does not work")
		}
		e.app.MasterSecret = fresh.pass
		e.do("GET", "/admin/v1/apps/"+other.Key, nil, &foreign).wantOK(t) // another app's secret is unchanged
	})
	t.Run("survives a restart", func(t *testing.T) {
		e.restart()
		if !works(t, e.appCreds()) {
			t.Error("the rotated secret was lost")
		}
	})
}

func TestRateLimit(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	adm := adminCreds()
	e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/ratelimits", `{"message":3}`, ptr(own(e))).wantError(t, 401, 1004)
	r := e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/ratelimits", `{"message":3,"query":0}`, &adm)
	r.wantOK(t)
	if !strings.Contains(string(r.body), `"message":3`) || !strings.Contains(string(r.body), `"create":1000`) {
		t.Fatalf("limits %s", r.body)
	}
	e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/ratelimits", `{"bogus":3}`, &adm).wantError(t, 400, 1003, "bogus")
	e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/ratelimits", `{"query":-1}`, &adm).wantError(t, 400, 1003, "query")
	if r := e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/ratelimits", `{"create":null}`, &adm); !strings.Contains(string(r.body), `"create":1000`) {
		t.Errorf("null must leave the limit unchanged: %d %s", r.status, r.body)
	}

	var limited response
	for i := 1; i <= 10; i++ {
		r := e.call("POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":"dev-0001","msg_body":"x"}`, i))
		if r.status == 429 {
			limited = r
			if i <= 3 {
				t.Fatalf("limited after %d requests with a burst of 3", i-1)
			}
			break
		}
		r.wantOK(t)
	}
	if limited.status != 429 {
		t.Fatal("10 sends at a limit of 3/s were all accepted")
	}
	limited.wantError(t, 429, 2002, "3 message requests per second")
	if s, err := strconv.Atoi(limited.header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q", limited.header.Get("Retry-After"))
	}
	// Other categories are separate; query is unlimited.
	for i := 0; i < 50; i++ {
		e.call("GET", "/device/v1/status?device_name=dev-0001", nil).wantOK(t)
	}
	time.Sleep(400 * time.Millisecond) // a token refills every 333 ms
	e.call("POST", "/msg/v1/msg", `{"seq_no":100,"device_name":"dev-0001","msg_body":"x"}`).wantOK(t)
}

func own(e *env) creds { return e.appCreds() }

func TestHealthAndMetrics(t *testing.T) {
	e := newEnv(t)
	e.do("GET", "/healthz", nil, nil).wantOK(t)
	e.do("GET", "/readyz", nil, nil).wantOK(t)
	e.call("GET", "/device/v1/status?device_name=nobody", nil)
	e.call("GET", "/debug/pprof/", nil).wantError(t, 401, 1004, "admin")
	adm := adminCreds()
	e.do("GET", "/debug/pprof/", nil, &adm).wantOK(t)
	r := e.do("GET", "/metrics", nil, nil)
	r.wantOK(t)
	for _, want := range []string{
		`devmsg_http_requests_total{code="400",method="GET",route="/device/v1/status"} 1`,
		`devmsg_http_request_duration_seconds_bucket{code="400",method="GET",route="/device/v1/status"`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func ptr(c creds) *creds { return &c }

// TestAdminAuthMessage: a failed authentication on the admin API names the
// admin account's credentials, not only an app's, and reads the same
// whether the username is the admin's, an app key or nothing known, so it
// tells no one which usernames exist. The app API's message is unchanged.
func TestAdminAuthMessage(t *testing.T) {
	e := newEnv(t, lenientAuth)
	message := func(r response) string {
		t.Helper()
		var body struct{ Error struct{ Message string } }
		r.decode(t, &body)
		return body.Error.Message
	}
	var first string
	for _, c := range []creds{{"admin", "wrong"}, {"no-such-user", "wrong"}, {e.app.Key, "wrong"}} {
		r := e.do("GET", "/admin/v1/apps", nil, &c)
		r.wantError(t, 401, 1004, "wrong admin username or password")
		if m := message(r); first == "" {
			first = m
		} else if m != first {
			t.Errorf("user %q got %q, user admin got %q: the messages tell the usernames apart", c.user, m, first)
		}
	}
	wrong := creds{e.app.Key, "wrong"}
	e.do("GET", "/device/v1/status?device_name=x", nil, &wrong).wantError(t, 401, 1004, "wrong app key or master secret")
}
