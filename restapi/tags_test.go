package restapi_test

import (
	"slices"
	"strings"
	"testing"
)

func TestTags(t *testing.T) {
	e := newEnv(t)
	r := e.call("POST", "/device/v1/devices", `{"device":[
		{"name":"dev-a","tags":["lamp","floor:1","lamp"]},
		{"name":"dev-b","tags":["bad tag"]},
		{"name":"dev-c","tags":"lamp"},
		{"name":"dev-d","tags":null},
		{"name":"dev-e","tags":["lamp"]}]}`)
	r.wantOK(t)
	var created struct {
		Resp []struct {
			Code    int
			Message string
		}
	}
	r.decode(t, &created)
	if c := created.Resp; c[0].Code != 0 || c[1].Code != 1003 || !strings.Contains(c[1].Message, "device[1].tags[0]") ||
		c[2].Code != 1003 || !strings.Contains(c[2].Message, "device[2].tags") || c[3].Code != 0 || c[4].Code != 0 {
		t.Fatalf("create results %s", r.body)
	}
	baseTags := func(name string) []string {
		t.Helper()
		var out struct{ Tags []string }
		r := e.call("GET", "/device/v1/baseinfo?device_name="+name, nil)
		r.wantOK(t)
		r.decode(t, &out)
		return out.Tags
	}
	if got := baseTags("dev-a"); !slices.Equal(got, []string{"floor:1", "lamp"}) {
		t.Fatalf("baseinfo tags %v", got)
	}
	if got := baseTags("dev-d"); got == nil || len(got) != 0 {
		t.Fatalf("untagged device's tags %#v, want []", got)
	}

	t.Run("set replaces the set", func(t *testing.T) {
		r := e.call("POST", "/device/v1/tags", `{"device_name":"dev-a","tags":["x@y","lamp"]}`)
		r.wantOK(t)
		if string(r.body) != `{"device_name":"dev-a","tags":["lamp","x@y"]}` {
			t.Fatalf("answer %s", r.body)
		}
		if got := baseTags("dev-a"); !slices.Equal(got, []string{"lamp", "x@y"}) {
			t.Fatalf("tags after set %v", got)
		}
		e.call("POST", "/device/v1/tags", `{"device_name":"dev-e","tags":[]}`).wantOK(t)
		if got := baseTags("dev-e"); len(got) != 0 {
			t.Fatalf("tags after clearing %v", got)
		}
	})
	t.Run("errors", func(t *testing.T) {
		e.call("POST", "/device/v1/tags", `{"tags":["a"]}`).wantError(t, 400, 1002, "device_name")
		e.call("POST", "/device/v1/tags", `{"device_name":"dev-a"}`).wantError(t, 400, 1002, "tags")
		e.call("POST", "/device/v1/tags", `{"device_name":"nobody","tags":["a"]}`).wantError(t, 400, 1003, `"nobody"`)
		e.call("POST", "/device/v1/tags", `{"device_name":"dev-a","tags":["ok","a/b"]}`).wantError(t, 400, 1003, "tags[1]")
		e.call("POST", "/device/v1/tags", `{"device_name":"dev-a","tags":[1]}`).wantError(t, 400, 1003, "tags must be an array of strings")
		e.call("POST", "/device/v1/tags", `{"device_name":"dev-a","tags":["ok",null]}`).wantError(t, 400, 1003, "tags must be an array of strings")
		many := `"t0","t1","t2","t3","t4","t5","t6","t7","t8","t9","t10","t11","t12","t13","t14","t15","t16","t17","t18","t19","t20"`
		e.call("POST", "/device/v1/tags", `{"device_name":"dev-a","tags":[`+many+`]}`).wantError(t, 400, 1003, "at most 20")
		e.call("POST", "/device/v1/tags", `{"device_name":"dev-a","tags":["`+strings.Repeat("a", 65)+`"]}`).wantError(t, 400, 1003, "tags[0]", "1 to 64")
		if got := baseTags("dev-a"); !slices.Equal(got, []string{"lamp", "x@y"}) {
			t.Fatalf("a refused set changed the tags: %v", got)
		}
	})
	t.Run("admin lists by tag and patches tags", func(t *testing.T) {
		c := adminCreds()
		list := func(tag string) []string {
			t.Helper()
			var out struct {
				Devices []struct {
					Name string
					Tags []string
				}
			}
			r := e.do("GET", "/admin/v1/apps/"+e.app.Key+"/devices?tag="+tag, nil, &c)
			r.wantOK(t)
			r.decode(t, &out)
			var names []string
			for _, d := range out.Devices {
				names = append(names, d.Name)
			}
			return names
		}
		if got := list("lamp"); !slices.Equal(got, []string{"dev-a"}) {
			t.Fatalf("lamp devices %v", got)
		}
		r := e.do("PATCH", "/admin/v1/apps/"+e.app.Key+"/devices/dev-d", `{"tags":["lamp"]}`, &c)
		r.wantOK(t)
		if !strings.Contains(string(r.body), `"tags":["lamp"]`) {
			t.Fatalf("patch answer %s", r.body)
		}
		if got := list("lamp"); !slices.Equal(got, []string{"dev-a", "dev-d"}) {
			t.Fatalf("lamp devices after patch %v", got)
		}
		e.do("GET", "/admin/v1/apps/"+e.app.Key+"/devices?tag=a%20b", nil, &c).wantError(t, 400, 1003, "tag")
		r = e.do("GET", "/admin/v1/apps/"+e.app.Key+"/devices/dev-d", nil, &c)
		r.wantOK(t)
		if !strings.Contains(string(r.body), `"tags":["lamp"]`) {
			t.Fatalf("device detail %s", r.body)
		}
	})
}
