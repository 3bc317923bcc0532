package openapitest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps errors instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

func TestCheck(t *testing.T) {
	v := Load(t, "../../docs/openapi.yaml")
	cases := []struct {
		name, method, path string
		status             int
		body               string
		ok                 bool
	}{
		{"valid status", "GET", "/device/v1/status?device_name=abcd", 200, `{"status":0,"client_ip":"","last_login_time":"","last_logout_time":""}`, true},
		{"extra field", "GET", "/device/v1/status?device_name=abcd", 200, `{"status":0,"client_ip":"","last_login_time":"","last_logout_time":"","x":1}`, false},
		{"wrong type", "GET", "/device/v1/status?device_name=abcd", 200, `{"status":"0","client_ip":"","last_login_time":"","last_logout_time":""}`, false},
		{"missing field", "POST", "/msg/v1/msg", 200, `{}`, false},
		{"documented error", "POST", "/msg/v1/msg", 400, `{"error":{"code":1003,"message":"bad"}}`, true},
		{"error with unknown code", "POST", "/msg/v1/msg", 400, `{"error":{"code":7,"message":"bad"}}`, false},
		{"undocumented status", "POST", "/msg/v1/msg", 418, `{}`, false},
		{"undocumented route answered 404", "GET", "/nope", 404, `{}`, true},
		{"undocumented route answered 200", "GET", "/nope", 200, `{}`, false},
		{"property value number or string", "GET", "/device/v1/property?device_name=abcd", 200,
			`{"properties":[{"name":"a","desired_value":1.5,"desired_stime":1},{"name":"b","reported_value":"x"}],"sdk_ver":"","app_ver":"","last_desired_stime":0,"last_reported_stime":0,"last_desired_version":1,"last_reported_version":0}`, true},
		{"property value bool", "GET", "/device/v1/property?device_name=abcd", 200,
			`{"properties":[{"name":"a","desired_value":true}],"sdk_ver":"","app_ver":"","last_desired_stime":0,"last_reported_stime":0,"last_desired_version":1,"last_reported_version":0}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "https://127.0.0.1:1234"+tc.path, nil)
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{"Content-Type": {"application/json"}}}
			rec := &recorder{TB: t}
			v.Check(rec, req, resp, []byte(tc.body))
			if tc.ok && len(rec.errs) > 0 {
				t.Fatalf("valid exchange rejected: %s", strings.Join(rec.errs, "\n"))
			}
			if !tc.ok && len(rec.errs) == 0 {
				t.Fatal("invalid exchange accepted")
			}
		})
	}
}
