package main

import (
	"encoding/json"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestKill9CallbacksArrive kills the server while it is delivering
// callbacks to a slow receiver that also fails now and then, with sends
// still coming in, and expects every record of every acknowledged send to
// reach the receiver after the restart.
func TestKill9CallbacksArrive(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	rcv := newReceiver(t)
	rcv.delay.Store(int64(150 * time.Millisecond))
	args := []string{"--callback.allow_custom_ports=true", "--callback.allowed_networks=127.0.0.0/8", "--callback.batch_size", "20", "--callback.flush_interval", "200ms",
		"--callback.retry_interval", "300ms", "--callback.max_retries", "1000", "--callback.request_timeout", "2s"}
	dir := t.TempDir()
	p := startProc(t, dir, args...)
	app := p.createApp(t, "cbkill")
	call := func(p *proc, method, path, body string) (int, []byte) {
		t.Helper()
		return p.call(t, app.Key, app.MasterSecret, method, path, body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/device/v1/devices", `{"device":[{"name":"cbkill-1"}]}`},
		{"PATCH", "/admin/v1/apps/" + app.Key + "/devices/cbkill-1", `{"flag":1}`}, // one record (type 1) per send
		{"POST", "/admin/v1/apps/" + app.Key + "/callback/urls", fmt.Sprintf(`{"url":%q}`, rcv.url("/kill"))},
		{"PUT", "/admin/v1/apps/" + app.Key + "/callback", `{"enabled":true}`},
	} {
		if st, b := call(p, c.method, c.path, c.body); st != 200 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, st, b)
		}
	}

	// Sends keep coming until the kill; every 200 must end in a record.
	var mu sync.Mutex
	var acked []int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seq := 1; ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			st, b, err := p.tryCall(app.Key, app.MasterSecret, "POST", "/msg/v1/msg",
				fmt.Sprintf(`{"seq_no":%d,"device_name":"cbkill-1","msg_body":"m"}`, seq))
			if err != nil {
				return // the server is gone
			}
			var r struct{ Msgid int64 }
			if st == 200 && json.Unmarshal(b, &r) == nil {
				mu.Lock()
				acked = append(acked, r.Msgid)
				mu.Unlock()
			}
		}
	}()
	rcv.status.Store(500) // the first attempts fail and wait for their retry
	waitFor(t, 10*time.Second, "failed attempts", func() bool { return rcv.attempts.Load() >= 2 })
	rcv.status.Store(200)
	waitFor(t, 10*time.Second, "some deliveries", func() bool { return len(rcv.records()) >= 60 })
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	close(stop)
	<-done
	mu.Lock()
	want := append([]int64(nil), acked...)
	mu.Unlock()
	before := len(rcv.records())
	if before >= len(want) {
		t.Fatalf("the receiver had all %d records before the kill; the test must kill mid-delivery", len(want))
	}

	rcv.delay.Store(0)
	startProc(t, dir, args...)
	waitFor(t, 30*time.Second, "every acknowledged send's record", func() bool {
		seen := map[string]bool{}
		for _, r := range rcv.records() {
			seen[r.ID] = true
		}
		for _, id := range want {
			if !seen[fmt.Sprintf("%d-0", id)] {
				return false
			}
		}
		return true
	})
	t.Logf("%d sends acknowledged; %d records received before the kill, %d in all (duplicates allowed)", len(want), before, len(rcv.records()))
}
