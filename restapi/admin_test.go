package restapi_test

import (
	"fmt"
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
		for _, ep := range []string{"GET /properties", "PUT /properties", "GET /ratelimits", "GET /devices", "PATCH /devices/dev-0001"} {
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
