package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPlainHTTPToHTTPSPort: plain HTTP sent to the HTTPS port gets the
// API's JSON error (400/1003, saying to use https), not Go's text answer,
// and HTTPS on the same port is unaffected.
func TestPlainHTTPToHTTPSPort(t *testing.T) {
	s := startServer(t, "--data_dir", t.TempDir())
	plain := &http.Client{}
	for _, c := range []struct{ method, body string }{
		{"GET", ""},
		{"POST", `{"seq_no":1,"device_name":"dev-0001","msg_body":"` + strings.Repeat("x", 2000) + `"}`},
	} {
		req, err := http.NewRequest(c.method, "http://"+s.addr+"/msg/v1/msg", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := plain.Do(req)
		if err != nil {
			t.Fatalf("plain %s: %v", c.method, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body struct {
			Error struct {
				Code    int
				Message string
			}
		}
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(raw, &body) != nil ||
			body.Error.Code != 1003 || !strings.Contains(body.Error.Message, "https://") {
			t.Errorf("plain %s: %d %q %s, want 400 application/json code 1003 naming https://", c.method, resp.StatusCode, resp.Header.Get("Content-Type"), raw)
		}
	}
	secure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := secure.Get("https://" + s.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("https after plain http: %d", resp.StatusCode)
	}
}
