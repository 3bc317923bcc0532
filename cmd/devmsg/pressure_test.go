package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// probeClient asks /readyz with a short timeout: a node that cannot
// accept the probe's connection fails it, as a load balancer sees it.
var probeClient = &http.Client{
	Timeout:   2 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}, // our own self-signed test server
}

// ready reports whether p's /readyz answers 200.
func (p *proc) ready() bool {
	resp, err := probeClient.Get(p.base + "/readyz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == 200
}

// metric returns the value of the sample of p's /metrics that starts
// with series (name and labels as printed), or -1.
func (p *proc) metric(t *testing.T, series string) float64 {
	t.Helper()
	st, b := p.call(t, "", "", "GET", "/metrics", "")
	if st != 200 {
		t.Fatalf("metrics: %d", st)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// flood opens n TCP connections to addr that send nothing.
func flood(t *testing.T, addr string, n int) (closeAll func()) {
	t.Helper()
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < n; j += 20 {
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					continue
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	closed := false
	closeAll = func() {
		if closed {
			return
		}
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
	}
	t.Cleanup(closeAll)
	return closeAll
}

// closedAtOnce reports whether a new connection to addr is closed by the
// server before it sends anything.
func closedAtOnce(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err == io.EOF || isReset(err)
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }

var lastDeviceErr error

// tryDevice connects the device and reports whether it got in.
func tryDevice(addr string, app testApp, name, secret string) bool {
	opts := paho.NewClientOptions().AddBroker("tcp://" + addr).
		SetClientID(app.Key + "/" + name).SetUsername(app.Key + "/" + name).SetPassword(secret).
		SetAutoReconnect(false).SetConnectTimeout(2 * time.Second)
	c := paho.NewClient(opts)
	tok := c.Connect()
	ok := tok.WaitTimeout(3*time.Second) && tok.Error() == nil
	if !ok {
		lastDeviceErr = tok.Error()
	}
	if ok {
		c.Disconnect(0)
	}
	return ok
}

// A flood of connections past the process's descriptor limit, run under
// `ulimit -n 400`, does not take the device listener down: while the
// flood holds the descriptors /readyz fails and, once it ends, a device
// connects within seconds and /readyz passes. With the budget the flood
// is refused before the descriptors run out; with no reserve the
// accepts fail for want of descriptors and are retried.
func TestFloodPastLowFDLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"budget", nil},
		{"no reserve", []string{"--fd_reserve=0", "--mqtt.max_conns_per_source=0", "--http.max_conns_per_source=0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"-c", `ulimit -n 400 && exec "$0" "$@"`, devmsgBinary(t)},
				serveArgs(t.TempDir(), append([]string{"--mqtt.tcp_addr=127.0.0.1:0"}, tt.args...)...)...)
			p := runProc(t, exec.Command("sh", args...))
			app := p.createApp(t, "fd")
			names, secrets := createDevices(t, p, app, "flood-device-", 1)
			if !p.ready() {
				t.Fatal("/readyz fails before the flood")
			}
			if !tryDevice(p.mqtt, app, names[0], secrets[0]) {
				t.Fatalf("the device cannot connect before the flood: %v", lastDeviceErr)
			}
			closeFlood := flood(t, p.mqtt, 1000)
			waitFor(t, 10*time.Second, "/readyz to fail during the flood", func() bool { return !p.ready() })
			if tryDevice(p.mqtt, app, names[0], secrets[0]) {
				t.Fatal("a device connected while the flood held every descriptor")
			}
			closeFlood()
			start := time.Now()
			waitFor(t, 10*time.Second, "a device to connect after the flood", func() bool {
				return tryDevice(p.mqtt, app, names[0], secrets[0])
			})
			t.Logf("a device connected %s after the flood ended", time.Since(start).Round(time.Millisecond))
			waitFor(t, 5*time.Second, "/readyz to pass after the flood", p.ready)
			metric := `devmsg_accept_errors_total{listener="mqtt-tcp"}`
			if tt.args == nil {
				metric = `devmsg_connections_refused_total{listener="mqtt-tcp",reason="fd_budget"}`
			}
			if n := p.metric(t, metric); n < 1 {
				t.Errorf("%s = %v, want the flood's excess counted", metric, n)
			}
		})
	}
}

// Per-source connection caps close the connections over them before
// anything is read; a per-app cap refuses long-polls 429/2002 while other
// apps' go on.
func TestConnectionAndLongPollCaps(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	p := startProc(t, t.TempDir(), "--mqtt.tcp_addr=127.0.0.1:0", "--mqtt.max_conns_per_source=5",
		"--http.max_conns_per_source=20", "--http.max_long_polls_per_app=3")
	a, b := p.createApp(t, "a"), p.createApp(t, "b")

	t.Run("mqtt per source", func(t *testing.T) {
		closeFlood := flood(t, p.mqtt, 5)
		if !closedAtOnce(p.mqtt) {
			t.Fatal("a sixth connection from one address was not closed at once")
		}
		if n := p.metric(t, `devmsg_connections_refused_total{listener="mqtt-tcp",reason="per_source"}`); n < 1 {
			t.Errorf("per_source refusals = %v", n)
		}
		closeFlood()
		waitFor(t, 5*time.Second, "a connection once the others closed", func() bool { return !closedAtOnce(p.mqtt) })
	})

	t.Run("long-polls per app", func(t *testing.T) {
		type answer struct {
			status int
			body   string
			retry  string
		}
		pull := func(app testApp) answer {
			req, _ := http.NewRequest("GET", p.base+"/event/v1/events?wait=3", nil)
			req.SetBasicAuth(app.Key, app.MasterSecret)
			resp, err := insecureClient.Do(req)
			if err != nil {
				return answer{body: err.Error()}
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return answer{resp.StatusCode, string(body), resp.Header.Get("Retry-After")}
		}
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() { defer wg.Done(); pull(a) }()
		}
		time.Sleep(time.Second) // the three are waiting (3 s each)
		got := pull(a)
		if got.status != 429 || !strings.Contains(got.body, `"code":2002`) || got.retry == "" {
			t.Errorf("a fourth long-poll of one app: %d %s (Retry-After %q), want 429/2002 with Retry-After", got.status, got.body, got.retry)
		}
		if other := pull(b); other.status != 200 {
			t.Errorf("another app's long-poll: %d %s", other.status, other.body)
		}
		wg.Wait()
		if n := p.metric(t, `devmsg_long_polls_refused_total{reason="app_cap"}`); n < 1 {
			t.Errorf("app_cap refusals = %v", n)
		}
		if got := pull(a); got.status != 200 {
			t.Errorf("a long-poll once the others ended: %d %s", got.status, got.body)
		}
	})

	t.Run("https per source", func(t *testing.T) {
		addr := strings.TrimPrefix(p.base, "https://")
		closeFlood := flood(t, addr, 20)
		if !closedAtOnce(addr) {
			t.Fatal("a connection over the HTTPS per-source cap was not closed at once")
		}
		closeFlood()
		waitFor(t, 5*time.Second, "HTTPS once the others closed", p.ready)
		if n := p.metric(t, `devmsg_connections_refused_total{listener="http",reason="per_source"}`); n < 1 {
			t.Errorf("per_source refusals = %v", n)
		}
	})
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, or skips
// the test when this process may not mount.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// freeOn returns the bytes free on dir's file system.
func freeOn(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fillTo allocates a file in dir that leaves free bytes free.
func fillTo(t *testing.T, dir, name string, free int64) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := freeOn(t, dir) - free; n > 0 {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	return path
}

// A data dir whose disk fills up: sends are refused 500/1000 saying so,
// reads answer, /readyz fails, every acknowledged message stays, and sends
// succeed again once space is freed, with no restart. A start on the full
// disk exits at once, naming the problem.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	mnt := mountTmpfs(t, 64<<20)
	data := filepath.Join(mnt, "data")
	t0 := time.Now()
	p := startProc(t, data, "--store.min_free_mb=16")
	t.Logf("started %s", time.Since(t0))
	app := p.createApp(t, "disk")
	names, _ := createDevices(t, p, app, "disk-device-", 1)
	filler := fillTo(t, mnt, "filler", 16<<20+512<<10) // half a MiB above the floor

	body := strings.Repeat("x", 1500)
	var acked []int64
	refused := ""
	for seq := 1; seq < 20000 && refused == ""; seq++ {
		st, b := p.call(t, app.Key, app.MasterSecret, "POST", "/msg/v1/msg",
			fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":%q,"ttl":3600}`, seq, names[0], body))
		switch st {
		case 200:
			var r struct{ Msgid int64 }
			if json.Unmarshal(b, &r) != nil || r.Msgid == 0 {
				t.Fatalf("send: %s", b)
			}
			acked = append(acked, r.Msgid)
		case 500:
			refused = string(b)
		default:
			t.Fatalf("send %d: %d %s", seq, st, b)
		}
	}
	if !strings.Contains(refused, `"code":1000`) || !strings.Contains(refused, "full") {
		t.Fatalf("a send on the full disk: %q, want 500/1000 saying the storage is full", refused)
	}
	t.Logf("%d messages acknowledged before the floor (%s)", len(acked), time.Since(t0))
	if p.ready() {
		t.Error("/readyz passes under the floor")
	}
	if n := p.metric(t, "devmsg_store_disk_full"); n != 1 {
		t.Errorf("devmsg_store_disk_full = %v", n)
	}
	allFound(t, p, app, acked, "on the full disk")
	if st, b := p.call(t, app.Key, app.MasterSecret, "GET", "/device/v1/status?device_name="+names[0], ""); st != 200 {
		t.Errorf("device status on the full disk: %d %s", st, b)
	}

	t.Logf("read %s", time.Since(t0))
	// A second service started on the full disk stops at once, saying why.
	start := time.Now()
	cmd := exec.Command(devmsgBinary(t), serveArgs(filepath.Join(mnt, "other"), "--store.min_free_mb=16")...)
	out, err := cmd.CombinedOutput()
	if err == nil || time.Since(start) > 10*time.Second || !regexp.MustCompile(`disk full.*min_free_mb`).Match(out) {
		t.Errorf("start on a full disk: err %v after %s, output:\n%s", err, time.Since(start), out)
	}

	t.Logf("second start %s", time.Since(t0))
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	seq := 100000
	waitFor(t, 5*time.Second, "sends to succeed once space is freed", func() bool {
		seq++
		st, _ := p.call(t, app.Key, app.MasterSecret, "POST", "/msg/v1/msg",
			fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":"again","ttl":3600}`, seq, names[0]))
		return st == 200
	})
	waitFor(t, 5*time.Second, "/readyz to pass once space is freed", p.ready)
}

// With no floor, a disk that fills up stops the process (Pebble cannot
// write its log) and loses nothing acknowledged; started again once space
// is freed, the service comes back with every acknowledged message.
func TestDiskFullWithoutFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the binary")
	}
	mnt := mountTmpfs(t, 48<<20)
	data := filepath.Join(mnt, "data")
	p := startProc(t, data, "--store.min_free_mb=0")
	app := p.createApp(t, "nofloor")
	names, _ := createDevices(t, p, app, "nofloor-device-", 1)
	filler := fillTo(t, mnt, "filler", 2<<20)
	begin := time.Now()

	body := strings.Repeat("y", 1500)
	var acked []int64
	for seq := 1; seq < 20000; seq++ {
		st, b, err := p.tryCall(app.Key, app.MasterSecret, "POST", "/msg/v1/msg",
			fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":%q,"ttl":3600}`, seq, names[0], body))
		if err != nil || st != 200 {
			t.Logf("send %d: %d %s %v", seq, st, b, err)
			break
		}
		var r struct{ Msgid int64 }
		if json.Unmarshal(b, &r) != nil || r.Msgid == 0 {
			t.Fatalf("send: %s", b)
		}
		acked = append(acked, r.Msgid)
	}
	t.Logf("%d messages acknowledged (%s)", len(acked), time.Since(begin))
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		t.Logf("the process exited: %v", err)
	case <-time.After(10 * time.Second):
		t.Log("the process still runs")
	}
	_ = p.cmd.Process.Kill()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart (%s)", time.Since(begin))
	q := startProc(t, data, "--store.min_free_mb=0")
	t.Logf("restarted (%s)", time.Since(begin))
	allFound(t, q, app, acked, "after the restart")
}

// allFound checks, eight at a time, that every message in ids is found.
func allFound(t *testing.T, p *proc, app testApp, ids []int64, when string) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var missing []string
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(ids); i += 8 {
				st, b, err := p.tryCall(app.Key, app.MasterSecret, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", ids[i]), "")
				if err != nil || st != 200 {
					mu.Lock()
					missing = append(missing, fmt.Sprintf("%d: %d %s %v", ids[i], st, b, err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged messages not found %s, e.g. %s", len(missing), len(ids), when, missing[0])
	}
}
