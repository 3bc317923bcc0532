package restapi_test

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestChunkedOversizedBodyAnswered: a body over 1 MiB (12 MiB) sent chunked (no
// length to refuse it by) by a client that writes all of it before it
// reads gets its 400/1003, on every route that reads a body, instead of a
// connection reset while it was still sending.
func TestChunkedOversizedBodyAnswered(t *testing.T) {
	e := newEnv(t)
	c := e.appCreds()
	auth := base64.StdEncoding.EncodeToString([]byte(c.user + ":" + c.pass))
	chunk := strings.Repeat("a", 64<<10)
	for _, path := range []string{"/msg/v1/msg", "/device/v1/devices", "/device/v1/property"} {
		t.Run(path, func(t *testing.T) {
			conn, err := tls.Dial("tcp", e.srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true}) // the test server's own certificate
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			w := bufio.NewWriter(conn)
			fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: devmsg\r\nAuthorization: Basic %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", path, auth)
			for range 192 { // 12 MiB: more than loopback's socket buffers hold
				fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk)
			}
			fmt.Fprint(w, "0\r\n\r\n")
			if err := w.Flush(); err != nil {
				t.Fatalf("sending the body: %v (the server closed the connection before reading it)", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 400 || !strings.Contains(string(body), `"code":1003`) || !strings.Contains(string(body), "exceeds 1048576 bytes") {
				t.Errorf("got %d %s, want 400/1003 naming the limit", resp.StatusCode, body)
			}
		})
	}
}
