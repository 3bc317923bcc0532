package restapi_test

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/restapi"
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

// TestLongPollCaps: past an app's cap on waiting long-polls, or while the
// process has no file descriptors to spare, a pull with wait gets
// 429/2002 and Retry-After; one without wait is not counted.
func TestLongPollCaps(t *testing.T) {
	var room atomic.Bool
	room.Store(true)
	e := newEnv(t, func(c *restapi.Config) {
		c.MaxLongPollsPerApp = 1
		c.LongPollRoom = room.Load
	})
	e.createDevices("lp-0001") // its device.created is event 1: the polls wait after it
	waiting := make(chan response, 1)
	go func() { waiting <- e.call("GET", "/event/v1/events?after=1&wait=2", nil) }()
	time.Sleep(500 * time.Millisecond) // the first is waiting
	if r := e.call("GET", "/event/v1/events?after=1&wait=1", nil); r.status != 429 || !strings.Contains(string(r.body), `"code":2002`) || r.header.Get("Retry-After") == "" {
		t.Errorf("a second long-poll of the app: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/event/v1/events", nil); r.status != 200 {
		t.Errorf("a pull without wait: %d %s", r.status, r.body)
	}
	// A command call that waits is a long-poll too: refused before it
	// creates anything; without wait it goes through.
	if r := e.call("POST", "/cmd/v1/cmd", `{"seq_no":7,"device_name":"lp-0001","name":"ping","ttl":60,"wait":5}`); r.status != 429 || !strings.Contains(string(r.body), `"code":2002`) {
		t.Errorf("a waiting command over the app's cap: %d %s", r.status, r.body)
	}
	if r := e.call("POST", "/cmd/v1/cmd", `{"seq_no":7,"device_name":"lp-0001","name":"ping","ttl":60,"wait":0}`); r.status != 200 {
		t.Errorf("the same command without wait, after the refusal: %d %s", r.status, r.body)
	}
	if r := <-waiting; r.status != 200 {
		t.Errorf("the waiting long-poll: %d %s", r.status, r.body)
	}
	room.Store(false)
	if r := e.call("GET", "/event/v1/events?wait=1", nil); r.status != 429 || !strings.Contains(string(r.body), "no room") {
		t.Errorf("a long-poll with no descriptors to spare: %d %s", r.status, r.body)
	}
}
