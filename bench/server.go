package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// newClient returns a client with exactly one keep-alive HTTP/1.1
// connection. Each worker has its own, so connections equal workers and
// results compare with other HTTP/1.1 load tools.
func newClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			// The bench talks to the server it started, or to one the user
			// named; a self-signed certificate is expected (spec section 5.4
			// calls it the same way).
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
			ForceAttemptHTTP2:   false,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		},
	}
}

// do makes one request and reads the whole body, so the connection goes
// back to the pool for the next one.
func do(ctx context.Context, c *http.Client, method, url, user, pass string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// setup creates the bench app with unlimited rates and its devices, all
// through the public API, as a user would.
func (b *runner) setup(ctx context.Context) error {
	b.admin = newClient()
	name := "bench-" + time.Now().UTC().Format("20060102-150405")
	st, body, err := do(ctx, b.admin, http.MethodPost, b.target+"/admin/v1/apps", b.o.AdminUser, b.o.AdminPassword, fmt.Appendf(nil, `{"name":%q}`, name))
	if err != nil || st != http.StatusOK {
		return fmt.Errorf("create app: %s", failure(st, body, err))
	}
	var app struct {
		Key          string `json:"key"`
		MasterSecret string `json:"master_secret"`
	}
	if err := json.Unmarshal(body, &app); err != nil || app.Key == "" {
		return fmt.Errorf("create app: unexpected answer %.200s", body)
	}
	b.key, b.secret = app.Key, app.MasterSecret
	st, body, err = do(ctx, b.admin, http.MethodPut, b.target+"/admin/v1/apps/"+b.key+"/ratelimits", b.o.AdminUser, b.o.AdminPassword,
		[]byte(`{"create":0,"property":0,"message":0,"query":0}`))
	if err != nil || st != http.StatusOK {
		return fmt.Errorf("set rate limits: %s", failure(st, body, err))
	}
	devices := b.o.deviceCount()
	for from := 0; from < devices; from += 1000 {
		var sb strings.Builder
		sb.WriteString(`{"device":[`)
		for i := from; i < min(from+1000, devices); i++ {
			if i > from {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"name":%q}`, deviceName(i))
		}
		sb.WriteString(`]}`)
		st, body, err = do(ctx, b.admin, http.MethodPost, b.target+"/device/v1/devices", b.key, b.secret, []byte(sb.String()))
		if err != nil || st != http.StatusOK {
			return fmt.Errorf("create devices: %s", failure(st, body, err))
		}
		var created struct {
			Resp []struct {
				DeviceName   string `json:"device_name"`
				Code         int    `json:"code"`
				Message      string `json:"message"`
				DeviceSecret string `json:"device_secret"`
			} `json:"resp"`
		}
		if err := json.Unmarshal(body, &created); err != nil {
			return fmt.Errorf("create devices: %w", err)
		}
		for _, d := range created.Resp {
			if d.Code != 0 {
				return fmt.Errorf("create device %s: code %d %s", d.DeviceName, d.Code, d.Message)
			}
			b.secrets = append(b.secrets, d.DeviceSecret)
		}
	}
	b.versions = make([]deviceVersion, b.o.Devices)
	for i := range b.versions {
		b.versions[i].v = 1 // a new device's last_desired_version
	}
	return nil
}

// settle waits, up to a minute, until the server uses under a tenth of a
// core: a saturating workload leaves flushes and compactions behind, and
// a latency run should measure its own load, not the previous one's. It
// reports whether the server became idle.
func (b *runner) settle(ctx context.Context) bool {
	deadline := time.Now().Add(time.Minute)
	prev := b.serverCPU(ctx)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Second)
		cur := b.serverCPU(ctx)
		if prev < 0 || cur < 0 {
			return true // no metrics to judge by
		}
		if cur-prev < 0.1 {
			return true
		}
		prev = cur
	}
	return false
}

// serverCPU reads process_cpu_seconds_total from the server's /metrics;
// -1 when it cannot.
func (b *runner) serverCPU(ctx context.Context) float64 {
	st, body, err := do(ctx, b.admin, http.MethodGet, b.target+"/metrics", "", "", nil)
	if err != nil || st != http.StatusOK {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// server is a `devmsg serve` child process on a free loopback port, in a
// data dir of its own.
type server struct {
	cmd           *exec.Cmd
	dir           string
	base          string
	mqtt          string // MQTT TCP address
	adminPassword string
	exited        chan struct{}
}

func startServer(ctx context.Context, binary string) (*server, error) {
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		binary = exe
	}
	dir, err := os.MkdirTemp("", "devmsg-bench-")
	if err != nil {
		return nil, err
	}
	// Both ports are held until both are picked, so they differ.
	var addrs [2]string
	var lns []net.Listener
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	for _, ln := range lns {
		ln.Close()
	}
	addr := addrs[0]
	s := &server{dir: dir, base: "https://" + addr, mqtt: addrs[1], adminPassword: rand.Text(), exited: make(chan struct{})}
	s.cmd = exec.Command(binary, "serve")
	s.cmd.Env = append(os.Environ(),
		"DEVMSG_DATA_DIR="+dir, "DEVMSG_HTTP_ADDR="+addr, "DEVMSG_ADMIN_PASSWORD="+s.adminPassword,
		"DEVMSG_LOG_LEVEL=warn", "DEVMSG_MQTT_TCP_ADDR="+s.mqtt, "DEVMSG_MQTT_TLS_ADDR=", "DEVMSG_MQTT_WS_ADDR=",
		// The callback workloads' receiver listens on a loopback port, and
		// holds its first request while a backlog builds.
		"DEVMSG_CALLBACK_ALLOW_CUSTOM_PORTS=true", "DEVMSG_CALLBACK_REQUEST_TIMEOUT=5m")
	// Stdout carries the first-start app credentials, of no use here;
	// warnings and errors go to ours.
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, os.Stderr
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s serve: %w", binary, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	c := newClient()
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _, err := do(ctx, c, http.MethodGet, s.base+"/healthz", "", "", nil)
		if err == nil && st == http.StatusOK {
			return s, nil
		}
		select {
		case <-s.exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s serve exited: %s", binary, s.cmd.ProcessState)
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.Join(errors.New("server not healthy within 30s"), err)
		}
	}
}

// stop asks the server to shut down as an operator would, kills it if it
// does not within 30s, and removes its data dir.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.dir)
}
