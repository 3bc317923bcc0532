package restapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

type opResult struct {
	DeviceName string `json:"device_name"`
	OpCode     int    `json:"op_code"`
	OpID       int64  `json:"op_id"`
	OpStatus   string `json:"op_status"`
}

type summary struct {
	Properties []struct {
		Name          string
		DesiredValue  json.RawMessage `json:"desired_value"`
		DesiredSTime  int64           `json:"desired_stime"`
		ReportedValue json.RawMessage `json:"reported_value"`
	}
	LastDesiredSTime    int64 `json:"last_desired_stime"`
	LastDesiredVersion  int64 `json:"last_desired_version"`
	LastReportedVersion int64 `json:"last_reported_version"`
}

func (e *env) summary(device string) summary {
	e.t.Helper()
	r := e.call("GET", "/device/v1/property?device_name="+device, nil)
	r.wantOK(e.t)
	var s summary
	r.decode(e.t, &s)
	return s
}

func (e *env) setProps(seq int64, device string, version int64, props string) opResult {
	e.t.Helper()
	r := e.call("POST", "/device/v1/property", fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"version":%d,"properties":%s}`, seq, device, version, props))
	r.wantOK(e.t)
	var out opResult
	r.decode(e.t, &out)
	return out
}

func TestSetPropertyVersions(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	before := time.Now().UnixMilli()
	r := e.setProps(1, "dev-0001", 1, `[{"name":"temp","value":21.5},{"name":"mode","value":"eco"}]`)
	if r.OpCode != 0 || r.OpStatus != "ok" || r.OpID == 0 || r.DeviceName != "dev-0001" {
		t.Fatalf("first set: %+v", r)
	}
	s := e.summary("dev-0001")
	if s.LastDesiredVersion != 2 || len(s.Properties) != 2 || s.LastDesiredSTime < before {
		t.Fatalf("after set: %+v", s)
	}
	if string(s.Properties[0].DesiredValue) != `"eco"` || string(s.Properties[1].DesiredValue) != `21.5` || s.Properties[1].DesiredSTime < before {
		t.Errorf("desired values: %+v", s.Properties)
	}

	t.Run("stale version", func(t *testing.T) {
		r := e.setProps(2, "dev-0001", 1, `[{"name":"temp","value":30}]`)
		if r.OpCode != 6003 || r.OpStatus != "version invalid" {
			t.Fatalf("got %+v", r)
		}
		if s := e.summary("dev-0001"); s.LastDesiredVersion != 2 || string(s.Properties[1].DesiredValue) != "21.5" {
			t.Fatalf("a rejected set changed the shadow: %+v", s)
		}
	})
	t.Run("negative version", func(t *testing.T) {
		if r := e.setProps(5, "dev-0001", -1, `[{"name":"temp","value":30}]`); r.OpCode != 6003 {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("future version", func(t *testing.T) {
		if r := e.setProps(3, "dev-0001", 7, `[{"name":"temp","value":30}]`); r.OpCode != 6003 {
			t.Fatalf("got %+v", r)
		}
	})
	t.Run("next version merges", func(t *testing.T) {
		r2 := e.setProps(4, "dev-0001", 2, `[{"name":"temp","value":19}]`)
		if r2.OpCode != 0 || r2.OpID == r.OpID {
			t.Fatalf("got %+v", r2)
		}
		s := e.summary("dev-0001")
		if s.LastDesiredVersion != 3 || len(s.Properties) != 2 || string(s.Properties[1].DesiredValue) != "19" {
			t.Fatalf("got %+v", s)
		}
	})
	t.Run("concurrent sets of one version", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				r := e.setProps(int64(100+i), "dev-0001", 3, fmt.Sprintf(`[{"name":"temp","value":%d}]`, i))
				mu.Lock()
				codes[r.OpCode]++
				mu.Unlock()
			}(i)
		}
		wg.Wait()
		if codes[0] != 1 || codes[6003] != 19 {
			t.Fatalf("op codes %v, want one 0 and nineteen 6003", codes)
		}
	})
}

func TestSetPropertyModel(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001", "dev-0002")
	long := strings.Repeat("a", 1024)
	t.Run("no model: any name, strings up to 1024 bytes", func(t *testing.T) {
		if r := e.setProps(1, "dev-0001", 1, `[{"name":"anything","value":"`+long+`"}]`); r.OpCode != 0 {
			t.Fatalf("1024 bytes: %+v", r)
		}
		if r := e.setProps(2, "dev-0001", 2, `[{"name":"anything","value":"`+long+`b"}]`); r.OpCode != 6009 || r.OpStatus != "value exceeds range" {
			t.Fatalf("1025 bytes: %+v", r)
		}
		// Multi-byte characters count in bytes: 512 × "é" is 1024 bytes.
		if r := e.setProps(3, "dev-0001", 2, `[{"name":"anything","value":"`+strings.Repeat("é", 512)+`"}]`); r.OpCode != 0 {
			t.Fatalf("1024 bytes of é: %+v", r)
		}
	})
	model := `{"properties":[
		{"name":"temp","type":"double","min":-10,"max":40.5},
		{"name":"count","type":"int","min":0,"max":100},
		{"name":"label","type":"string","max_length":8},
		{"name":"note","type":"string"}]}`
	adm := adminCreds()
	e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/properties", model, &adm).wantOK(t)
	cases := []struct {
		name, props string
		code        int
	}{
		{"double in range", `[{"name":"temp","value":40.5}]`, 0},
		{"double at min", `[{"name":"temp","value":-10}]`, 0},
		{"double over max", `[{"name":"temp","value":40.51}]`, 6009},
		{"double under min", `[{"name":"temp","value":-10.01}]`, 6009},
		{"double given a string", `[{"name":"temp","value":"20"}]`, 6008},
		{"int at max", `[{"name":"count","value":100}]`, 0},
		{"int over max", `[{"name":"count","value":101}]`, 6009},
		{"int given a fraction", `[{"name":"count","value":1.5}]`, 6008},
		{"int written as 5.0", `[{"name":"count","value":5.0}]`, 0},
		{"string at max_length", `[{"name":"label","value":"12345678"}]`, 0},
		{"string over max_length", `[{"name":"label","value":"123456789"}]`, 6009},
		{"string given a number", `[{"name":"label","value":5}]`, 6008},
		{"string default limit", `[{"name":"note","value":"` + long + `x"}]`, 6009},
		{"unknown property", `[{"name":"humidity","value":5}]`, 6007},
		{"one bad of two applies nothing", `[{"name":"count","value":1},{"name":"temp","value":99}]`, 6009},
	}
	version := int64(1)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.setProps(int64(1000+i), "dev-0002", version, tc.props)
			if r.OpCode != tc.code {
				t.Fatalf("op_code %d (%s), want %d", r.OpCode, r.OpStatus, tc.code)
			}
			s := e.summary("dev-0002")
			if tc.code == 0 {
				version++
			}
			if s.LastDesiredVersion != version {
				t.Fatalf("last_desired_version %d, want %d", s.LastDesiredVersion, version)
			}
		})
	}
	if s := e.summary("dev-0002"); len(s.Properties) != 3 {
		t.Errorf("want temp, count and label set, got %+v", s.Properties)
	}
}

func TestSetPropertyBadRequests(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	items := func(n int) string {
		var parts []string
		for i := 0; i < n; i++ {
			parts = append(parts, fmt.Sprintf(`{"name":"p%d","value":%d}`, i, i))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	body := func(props string) string {
		return `{"seq_no":1,"device_name":"dev-0001","version":1,"properties":` + props + `}`
	}
	cases := []struct {
		name, body string
		status     int
		code       int
		fragment   string
	}{
		{"missing seq_no", `{"device_name":"dev-0001","version":1,"properties":[{"name":"a","value":1}]}`, 400, 1002, "seq_no"},
		{"seq_no string", `{"seq_no":"1","device_name":"dev-0001","version":1,"properties":[{"name":"a","value":1}]}`, 400, 1003, "seq_no"},
		{"seq_no fraction", `{"seq_no":1.5,"device_name":"dev-0001","version":1,"properties":[{"name":"a","value":1}]}`, 400, 1003, "seq_no"},
		{"missing device_name", `{"seq_no":1,"version":1,"properties":[{"name":"a","value":1}]}`, 400, 1002, "device_name"},
		{"missing version", `{"seq_no":1,"device_name":"dev-0001","properties":[{"name":"a","value":1}]}`, 400, 1002, "version"},
		{"missing properties", `{"seq_no":1,"device_name":"dev-0001","version":1}`, 400, 1002, "properties"},
		{"empty properties", body(`[]`), 400, 1003, "1 to 100"},
		{"101 properties", body(items(101)), 400, 1003, "1 to 100"},
		{"property without name", body(`[{"value":1}]`), 400, 1002, "properties[0].name"},
		{"property without value", body(`[{"name":"a"}]`), 400, 1002, "properties[0].value"},
		{"boolean value", body(`[{"name":"a","value":true}]`), 400, 1003, "number or a string"},
		{"object value", body(`[{"name":"a","value":{"x":1}}]`), 400, 1003, "number or a string"},
		{"duplicate name", body(`[{"name":"a","value":1},{"name":"a","value":2}]`), 400, 1003, "twice"},
		{"empty property name", body(`[{"name":"","value":1}]`), 400, 1003, "properties[0].name"},
		{"property name over 128 bytes", body(`[{"name":"` + strings.Repeat("n", 129) + `","value":1}]`), 400, 1003, "properties[0].name"},
		{"unknown device", `{"seq_no":1,"device_name":"ghost","version":1,"properties":[{"name":"a","value":1}]}`, 400, 1003, "not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.call("POST", "/device/v1/property", tc.body).wantError(t, tc.status, tc.code, tc.fragment)
		})
	}
	t.Run("100 properties", func(t *testing.T) {
		if r := e.setProps(2, "dev-0001", 1, items(100)); r.OpCode != 0 {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("rejected requests did not use seq_no 1", func(t *testing.T) {
		if r := e.setProps(1, "dev-0001", 2, items(1)); r.OpCode != 0 {
			t.Fatalf("%+v", r)
		}
	})
}

func TestSetPropertyAnyNameWithoutModel(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	if r := e.setProps(1, "dev-0001", 1, `[{"name":"color/rgb 温度","value":"x"}]`); r.OpCode != 0 {
		t.Fatalf("got %+v", r)
	}
	adm := adminCreds()
	e.do("PUT", "/admin/v1/apps/"+e.app.Key+"/properties", `{"properties":[{"name":"temp","type":"int"}]}`, &adm).wantOK(t)
	if r := e.setProps(3, "dev-0001", 2, `[{"name":"foo bar","value":1}]`); r.OpCode != 6007 {
		t.Fatalf("name outside the model: got %+v", r)
	}
}
