package restapi_test

import (
	"strings"
	"testing"
)

// The metrics middleware caches each label set's series: repeated
// requests must land in their own series, and a new status code on the
// same route in a new one.
func TestMetricsCountEachLabelSet(t *testing.T) {
	e := newEnv(t)
	e.createDevices("dev-0001")
	for i := 0; i < 3; i++ {
		e.call("GET", "/device/v1/status?device_name=nobody", nil)
	}
	e.call("GET", "/device/v1/status?device_name=dev-0001", nil).wantOK(t)
	e.call("GET", "/device/v1/status?device_name=nobody", nil)
	r := e.do("GET", "/metrics", nil, nil)
	r.wantOK(t)
	for _, want := range []string{
		`devmsg_http_requests_total{code="400",method="GET",route="/device/v1/status"} 4`,
		`devmsg_http_requests_total{code="200",method="GET",route="/device/v1/status"} 1`,
		`devmsg_http_request_duration_seconds_count{code="400",method="GET",route="/device/v1/status"} 4`,
		`devmsg_http_request_duration_seconds_count{code="200",method="GET",route="/device/v1/status"} 1`,
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
