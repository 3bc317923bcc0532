package openapitest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

const docPath = "../../docs/openapi.yaml"

// recorder is a testing.TB that keeps errors instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) Helper() {}

func TestDocumentIsValid(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(docPath)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi %q, want 3.0.3", doc.OpenAPI)
	}
	if s := doc.Components.SecuritySchemes["basic"]; s == nil || s.Value.Type != "http" || s.Value.Scheme != "basic" {
		t.Error("components.securitySchemes.basic is not HTTP Basic")
	}
}

// TestEveryRouteDocumented pins the routes the server serves and the error
// answers each may give.
func TestEveryRouteDocumented(t *testing.T) {
	doc := Load(t, docPath).Doc()
	api := []string{
		"POST /device/v1/devices", "POST /device/v1/property", "GET /device/v1/property",
		"GET /device/v1/baseinfo", "GET /device/v1/status", "POST /msg/v1/msg", "GET /msg/v1/msg", "DELETE /msg/v1/msg",
		"GET /event/v1/events",
		"POST /device/v1/tags", "POST /msg/v1/msgs",
		"POST /msg/v1/broadcast", "GET /msg/v1/broadcast", "DELETE /msg/v1/broadcast",
		"POST /cmd/v1/cmd", "GET /cmd/v1/cmd", "DELETE /cmd/v1/cmd", "POST /cmd/v1/cmds",
		"POST /job/v1/jobs", "GET /job/v1/jobs", "GET /job/v1/job", "GET /job/v1/job/executions",
		"POST /job/v1/job/pause", "POST /job/v1/job/resume", "POST /job/v1/job/cancel",
	}
	admin := []string{
		"POST /admin/v1/apps", "GET /admin/v1/apps",
		"GET /admin/v1/apps/{key}", "POST /admin/v1/apps/{key}/master_secret",
		"GET /admin/v1/apps/{key}/properties", "PUT /admin/v1/apps/{key}/properties",
		"GET /admin/v1/apps/{key}/ratelimits", "PUT /admin/v1/apps/{key}/ratelimits",
		"GET /admin/v1/apps/{key}/devices", "GET /admin/v1/apps/{key}/devices/{name}",
		"PATCH /admin/v1/apps/{key}/devices/{name}", "DELETE /admin/v1/apps/{key}/devices/{name}",
		"GET /admin/v1/apps/{key}/callback", "PUT /admin/v1/apps/{key}/callback",
		"GET /admin/v1/apps/{key}/callback/urls", "POST /admin/v1/apps/{key}/callback/urls",
		"DELETE /admin/v1/apps/{key}/callback/urls", "POST /admin/v1/apps/{key}/callback/urls/default",
		"POST /admin/v1/apps/{key}/callback/urls/test", "GET /admin/v1/apps/{key}/callback/deliveries",
		"GET /admin/v1/apps/{key}/callback/deadletters",
		"POST /admin/v1/apps/{key}/callback/deadletters/{id}/redeliver",
		"GET /admin/v1/apps/{key}/messages",
		"GET /admin/v1/apps/{key}/events/webhooks", "POST /admin/v1/apps/{key}/events/webhooks",
		"DELETE /admin/v1/apps/{key}/events/webhooks",
	}
	ops := []string{"GET /healthz", "GET /readyz", "GET /metrics"}
	want := slices.Concat(api, admin, ops)
	var got []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			route := method + " " + path
			got = append(got, route)
			statuses := []string{"200"}
			switch {
			case slices.Contains(api, route):
				statuses = append(statuses, "400", "401", "429", "500")
			// Admin calls are not rate limited, but failed authentication
			// is throttled with 429 there too.
			case route == "GET /admin/v1/apps":
				statuses = append(statuses, "401", "429", "500")
			case slices.Contains(admin, route):
				statuses = append(statuses, "400", "401", "429", "500")
			case route == "GET /readyz":
				statuses = append(statuses, "400", "500") // 400: plain HTTP on the HTTPS port
			case slices.Contains(ops, route):
				statuses = append(statuses, "400")
			}
			var have []string
			for status := range op.Responses.Map() {
				have = append(have, status)
			}
			slices.Sort(statuses)
			slices.Sort(have)
			if !slices.Equal(have, statuses) {
				t.Errorf("%s documents statuses %v, want %v", route, have, statuses)
			}
			if r := op.Responses.Status(429); r != nil {
				if h := r.Value.Headers["Retry-After"]; h == nil || !h.Value.Required {
					t.Errorf("%s: 429 without a required Retry-After header", route)
				}
			}
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("documented routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

const (
	validStatus  = `{"status":0,"client_ip":"","last_login_time":"","last_logout_time":""}`
	validProps   = `{"properties":[{"name":"a","desired_value":1.5,"desired_stime":1},{"name":"b","reported_value":"x","reported_stime":2}],"sdk_ver":"","app_ver":"","last_desired_stime":0,"last_reported_stime":0,"last_desired_version":1,"last_reported_version":0}`
	validSecret  = "Zq3VhX0mK2pL8sNw1RtY6cB4dF7gH9jA"
	validMessage = `{"msgid":150552576000002,"device_name":"dev-0001","state":"failed","ttl":86400,"time_create":1767225600,"records":[` +
		`{"id":"150552576000002-0","type":0,"channelkey":"k","msgid":"150552576000002","userid":"dev-0001","sender_id":"dev-0001","sender":0,"sent_time":1767225600},` +
		`{"id":"150552576000002-1","type":3,"channelkey":"k","msgid":"150552576000002","userid":"dev-0001","sender_id":"dev-0001","sender":0,"sent_time":1767225600,"error":{"code":3004,"message":"device queue full"},"params":{"a":1}}]}`
)

func TestCheck(t *testing.T) {
	v := Load(t, docPath)
	if Load(t, docPath) != v {
		t.Error("a second Load of the same file built a new Validator")
	}
	json := http.Header{"Content-Type": {"application/json"}}
	cases := []struct {
		name, method, path, reqBody string
		status                      int
		header                      http.Header
		respBody                    string
		wantErr                     string // "" when the exchange is valid
	}{
		// GET /device/v1/status, the example of docs/api.md.
		{"status ok", "GET", "/device/v1/status?device_name=dev-0001", "", 200, json, validStatus, ""},
		{"status online", "GET", "/device/v1/status?device_name=dev-0001", "", 200, json,
			`{"status":1,"client_ip":"203.0.113.7","last_login_time":"1767225600","last_logout_time":""}`, ""},
		{"status extra field", "GET", "/device/v1/status?device_name=dev-0001", "", 200, json,
			`{"status":0,"client_ip":"","last_login_time":"","last_logout_time":"","x":1}`, "x"},
		{"status as string", "GET", "/device/v1/status?device_name=dev-0001", "", 200, json,
			`{"status":"0","client_ip":"","last_login_time":"","last_logout_time":""}`, "status"},
		{"status out of enum", "GET", "/device/v1/status?device_name=dev-0001", "", 200, json,
			`{"status":2,"client_ip":"","last_login_time":"","last_logout_time":""}`, "status"},
		{"login time as number", "GET", "/device/v1/status?device_name=dev-0001", "", 200, json,
			`{"status":0,"client_ip":"","last_login_time":1767225600,"last_logout_time":""}`, "last_login_time"},
		{"status field missing", "GET", "/device/v1/status?device_name=dev-0001", "", 200, json,
			`{"status":0,"client_ip":"","last_login_time":""}`, "last_logout_time"},
		{"no content type", "GET", "/device/v1/status?device_name=dev-0001", "", 200, http.Header{}, validStatus, "Content-Type"},
		{"any host matches", "GET", "https://127.0.0.1:54321/device/v1/status?device_name=dev-0001", "", 200, json, validStatus, ""},

		// Errors.
		{"documented error", "GET", "/device/v1/status?device_name=dev-9999", "", 400, json, `{"error":{"code":1003,"message":"device \"dev-9999\" not found"}}`, ""},
		{"400 with the 401 code", "GET", "/device/v1/status?device_name=dev-0001", "", 400, json, `{"error":{"code":1004,"message":"x"}}`, "code"},
		{"error without message", "GET", "/device/v1/status?device_name=dev-0001", "", 400, json, `{"error":{"code":1003}}`, "message"},
		{"undocumented status", "GET", "/device/v1/status?device_name=dev-0001", "", 418, json, `{}`, "status is not supported"},
		{"401 with header", "GET", "/device/v1/status?device_name=dev-0001", "", 401,
			http.Header{"Content-Type": {"application/json"}, "Www-Authenticate": {`Basic realm="devmsg"`}}, `{"error":{"code":1004,"message":"authentication failed"}}`, ""},
		{"401 without header", "GET", "/device/v1/status?device_name=dev-0001", "", 401, json, `{"error":{"code":1004,"message":"authentication failed"}}`, "WWW-Authenticate"},
		{"429 with Retry-After", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"hi"}`, 429,
			http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"}}, `{"error":{"code":2002,"message":"slow down"}}`, ""},
		{"429 without Retry-After", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"hi"}`, 429, json,
			`{"error":{"code":2002,"message":"slow down"}}`, "Retry-After"},
		{"undocumented status on admin", "GET", "/admin/v1/apps", "", 409,
			http.Header{"Content-Type": {"application/json"}}, `{"error":{"code":1003,"message":"conflict"}}`, "status is not supported"},

		// Requests: invalid ones may be refused, never accepted.
		{"invalid request refused", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"hi","ttl":604801}`, 400, json,
			`{"error":{"code":1003,"message":"ttl must be 0 to 604800 seconds, got 604801"}}`, ""},
		{"invalid request accepted", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"hi","ttl":604801}`, 200, json,
			`{"msgid":1}`, "ttl"},
		{"missing field accepted", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001"}`, 200, json, `{"msgid":1}`, "msg_body"},
		{"1002 for a valid request", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"hi"}`, 400, json,
			`{"error":{"code":1002,"message":"ttl is required"}}`, "required"},
		{"null optional fields", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"hi","ttl":null,"callback":{"url":null,"params":null}}`, 200, json,
			`{"msgid":1}`, ""},
		{"request without content type", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"hi"}`, 200, json, `{"msgid":1}`, ""},
		{"msgid as string", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"hi"}`, 200, json, `{"msgid":"1"}`, "msgid"},
		{"replayed header", "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dev-0001","msg_body":"hi"}`, 200,
			http.Header{"Content-Type": {"application/json"}, "X-Devmsg-Replayed": {"true"}}, `{"msgid":1}`, ""},
		{"missing query parameter refused", "GET", "/device/v1/status", "", 400, json, `{"error":{"code":1002,"message":"device_name is required"}}`, ""},
		{"bad device name refused", "GET", "/device/v1/status?device_name=a%20b", "", 400, json, `{"error":{"code":1003,"message":"device \"a b\" not found"}}`, ""},

		// Batch create answers bad elements inside a 200.
		{"batch create", "POST", "/device/v1/devices", `{"device":[{"name":"dev-0001"},{"name":"ab"},{"name":"dev-0001"}]}`, 200, json,
			`{"resp":[{"device_name":"dev-0001","code":0,"device_secret":"` + validSecret + `"},{"device_name":"ab","code":1003,"message":"too short"},{"device_name":"dev-0001","code":3001,"message":"exists"}]}`, ""},
		{"batch create unknown code", "POST", "/device/v1/devices", `{"device":[{"name":"dev-0001"}]}`, 200, json,
			`{"resp":[{"device_name":"dev-0001","code":7,"message":"?"}]}`, "code"},
		{"batch create short secret", "POST", "/device/v1/devices", `{"device":[{"name":"dev-0001"}]}`, 200, json,
			`{"resp":[{"device_name":"dev-0001","code":0,"device_secret":"abc"}]}`, "device_secret"},

		// Properties.
		{"property values number or string", "GET", "/device/v1/property?device_name=dev-0001", "", 200, json, validProps, ""},
		{"property value bool", "GET", "/device/v1/property?device_name=dev-0001", "", 200, json,
			`{"properties":[{"name":"a","desired_value":true}],"sdk_ver":"","app_ver":"","last_desired_stime":0,"last_reported_stime":0,"last_desired_version":1,"last_reported_version":0}`, "desired_value"},
		{"property version 0", "GET", "/device/v1/property?device_name=dev-0001", "", 200, json,
			strings.Replace(validProps, `"last_desired_version":1`, `"last_desired_version":0`, 1), "last_desired_version"},
		{"property set", "POST", "/device/v1/property", `{"seq_no":1,"device_name":"dev-0001","version":1,"properties":[{"name":"a","value":1},{"name":"b","value":"x"}]}`, 200, json,
			`{"device_name":"dev-0001","op_code":6003,"op_id":150552576000001,"op_status":"version invalid"}`, ""},
		{"property set unknown op_code", "POST", "/device/v1/property", `{"seq_no":1,"device_name":"dev-0001","version":1,"properties":[{"name":"a","value":1}]}`, 200, json,
			`{"device_name":"dev-0001","op_code":6004,"op_id":1,"op_status":"ok"}`, "op_code"},
		{"property set bool value accepted", "POST", "/device/v1/property", `{"seq_no":1,"device_name":"dev-0001","version":1,"properties":[{"name":"a","value":true}]}`, 200, json,
			`{"device_name":"dev-0001","op_code":0,"op_id":1,"op_status":"ok"}`, "value"},
		{"101 properties accepted", "POST", "/device/v1/property", propertySet(101), 200, json,
			`{"device_name":"dev-0001","op_code":0,"op_id":1,"op_status":"ok"}`, "properties"},

		// Messages and records.
		{"message with records", "GET", "/msg/v1/msg?msgid=150552576000002", "", 200, json, validMessage, ""},
		{"record type 9", "GET", "/msg/v1/msg?msgid=1", "", 200, json, strings.Replace(validMessage, `"type":0`, `"type":9`, 1), "type"},
		{"record failure without error", "GET", "/msg/v1/msg?msgid=1", "", 200, json,
			strings.Replace(validMessage, `,"error":{"code":3004,"message":"device queue full"}`, "", 1), "error"},
		{"record msgid as number", "GET", "/msg/v1/msg?msgid=1", "", 200, json,
			strings.Replace(validMessage, `"msgid":"150552576000002","userid"`, `"msgid":150552576000002,"userid"`, 1), "msgid"},
		{"unknown state", "GET", "/msg/v1/msg?msgid=1", "", 200, json, strings.Replace(validMessage, `"failed"`, `"lost"`, 1), "state"},

		// Admin.
		{"create app", "POST", "/admin/v1/apps", `{"name":"x"}`, 200, json,
			`{"name":"x","key":"k3Jd8Q2mZx7LpA9vTn4bWc1R","master_secret":"Vb8Nq2Lm5Xc7Rt1Zs4Hd9Kf3Jg6Pw0Ya"}`, ""},
		{"patch device", "PATCH", "/admin/v1/apps/k3Jd8Q2mZx7LpA9vTn4bWc1R/devices/dev-0001", `{"flag":1,"mark":null}`, 200, json,
			`{"name":"dev-0001","mark":"","flag":1,"status":0,"time_create":1,"time_active":0,"tags":[]}`, ""},
		{"rate limits null leaves a category unchanged", "PUT", "/admin/v1/apps/k/ratelimits", `{"create":null}`, 200, json,
			`{"create":1000,"property":1000,"message":1000,"query":1000,"command":1000}`, ""},
		{"rate limits missing category", "GET", "/admin/v1/apps/k/ratelimits", "", 200, json,
			`{"create":0,"property":1000,"message":1000}`, "query"},

		// Operations.
		{"healthz", "GET", "/healthz", "", 200, json, `{"status":"ok"}`, ""},
		{"metrics", "GET", "/metrics", "", 200, http.Header{"Content-Type": {"text/plain; version=0.0.4; charset=utf-8"}}, "# HELP x y\n", ""},
		{"readyz failing", "GET", "/readyz", "", 500, json, `{"error":{"code":1000,"message":"internal error; retry later"}}`, ""},

		// Routes the document does not describe.
		{"unknown path answered 404", "GET", "/nope", "", 404, json, `{"error":{"code":1003,"message":"no such endpoint: GET /nope"}}`, ""},
		{"unknown path answered 200", "GET", "/nope", "", 200, json, `{}`, "not documented"},
		{"unknown method answered 405", "PUT", "/msg/v1/msg?msgid=1", "", 405, json, `{"error":{"code":1003,"message":"method PUT not allowed"}}`, ""},
		{"unknown method answered 200", "PUT", "/msg/v1/msg?msgid=1", "", 200, json, `{}`, "method is not documented"},
		{"404 with a bad body", "GET", "/nope", "", 404, json, `not found`, "not JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.path
			if !strings.HasPrefix(url, "https://") {
				url = "https://127.0.0.1:1234" + url
			}
			var reqBody []byte
			if tc.reqBody != "" {
				reqBody = []byte(tc.reqBody)
			}
			req := httptest.NewRequest(tc.method, url, strings.NewReader(tc.reqBody))
			if tc.reqBody != "" && tc.name != "request without content type" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp := &http.Response{StatusCode: tc.status, Header: tc.header}
			rec := &recorder{TB: t}
			v.Check(rec, req, reqBody, resp, []byte(tc.respBody))
			all := strings.Join(rec.errs, "\n")
			if testing.Verbose() && all != "" {
				t.Log(all)
			}
			switch {
			case tc.wantErr == "" && len(rec.errs) > 0:
				t.Fatalf("valid exchange rejected:\n%s", all)
			case tc.wantErr != "" && len(rec.errs) == 0:
				t.Fatalf("invalid exchange accepted (want an error mentioning %q)", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(all, tc.wantErr):
				t.Fatalf("error does not mention %q:\n%s", tc.wantErr, all)
			}
		})
	}
}

// TestCheckReadsGetBody covers callers that pass a nil body for a request
// built with a body, as http.NewRequest does.
func TestCheckReadsGetBody(t *testing.T) {
	v := Load(t, docPath)
	req, err := http.NewRequest("POST", "https://127.0.0.1:1/msg/v1/msg", strings.NewReader(`{"seq_no":1,"device_name":"dev-0001"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	rec := &recorder{TB: t}
	v.Check(rec, req, nil, &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}, []byte(`{"msgid":1}`))
	if len(rec.errs) == 0 || !strings.Contains(strings.Join(rec.errs, "\n"), "msg_body") {
		t.Fatalf("request body from GetBody not checked: %q", rec.errs)
	}
}

func propertySet(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"name":"p%d","value":%d}`, i, i)
	}
	return `{"seq_no":1,"device_name":"dev-0001","version":1,"properties":[` + strings.Join(items, ",") + `]}`
}
