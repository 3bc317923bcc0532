package main

import (
	"bufio"
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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain removes the binary devmsgBinary built, if any.
func TestMain(m *testing.M) {
	release := holdDefaultPorts()
	code := m.Run()
	release()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// holdDefaultPorts listens on the ports `devmsg serve` binds by default,
// where they are free, until release. A test that forgets to pass
// 127.0.0.1:0 then fails on every run, not only on a machine where a
// devmsg from the README is serving; tests must never need those ports.
func holdDefaultPorts() (release func()) {
	var held []net.Listener
	for _, addr := range []string{":8443", ":1883", ":8883", ":8083"} {
		if l, err := net.Listen("tcp", addr); err == nil {
			held = append(held, l)
		}
	}
	return func() {
		for _, l := range held {
			l.Close()
		}
	}
}

// envTestRace set builds the binary the tests run with -race.
const envTestRace = "DEVMSG_TEST_RACE"

// devmsgBinary builds the real binary once per test run.
func devmsgBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "devmsg-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "devmsg")
		args := []string{"build", "-o", binPath}
		if os.Getenv(envTestRace) != "" {
			// The race detector in the served binary: its reports go to
			// the files GORACE's log_path names, as the tests read only
			// the listening addresses from a server's stderr.
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a devmsg serve process.
type proc struct {
	cmd  *exec.Cmd
	base string
	mqtt string // the MQTT TCP address, when started with one
	out  *strings.Builder
	mu   *sync.Mutex
}

var (
	listenRE     = regexp.MustCompile(`msg="http listening" addr=(\S+)`)
	mqttListenRE = regexp.MustCompile(`msg="mqtt listening" addrs=map\[(?:\S+ )*tcp:([^\s\]]+)`)
)

// startProc runs `devmsg serve` on dataDir with a random port and waits
// until it listens. MQTT is off unless args turn a listener on.
func startProc(t *testing.T, dataDir string, args ...string) *proc {
	t.Helper()
	return runProc(t, exec.Command(devmsgBinary(t), serveArgs(dataDir, args...)...))
}

// serveArgs are the arguments of startProc's `devmsg serve`.
func serveArgs(dataDir string, args ...string) []string {
	return append([]string{"serve", "--data_dir", dataDir, "--http.addr", "127.0.0.1:0",
		"--mqtt.tcp_addr=", "--mqtt.tls_addr=", "--mqtt.ws_addr="}, args...)
}

// runProc starts cmd, a `devmsg serve`, and waits until it listens.
func runProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	cmd.Env = append(serveEnviron(), "DEVMSG_ADMIN_PASSWORD=durability-admin", "DEVMSG_RATE_LIMIT_DEFAULT=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: &strings.Builder{}, mu: &sync.Mutex{}}
	cmd.Stdout = &lockedWriter{p.out, p.mu}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := mqttListenRE.FindStringSubmatch(sc.Text()); m != nil {
				p.mu.Lock()
				p.mqtt = m[1] // logged before the HTTP address
				p.mu.Unlock()
			}
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		p.base = "https://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("devmsg serve did not report its listening address within 30s")
	}
	return p
}

type lockedWriter struct {
	b  *strings.Builder
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

var insecureClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // our own self-signed test server
}

func (p *proc) call(t *testing.T, user, pass, method, path, body string) (int, []byte) {
	t.Helper()
	st, b, err := p.tryCall(user, pass, method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return st, b
}

// tryCall is call for a server that may be gone.
// testApp is an app created through the admin API.
type testApp struct {
	Key          string `json:"key"`
	MasterSecret string `json:"master_secret"`
}

// createApp creates an app named name with the admin account the
// durability tests start with.
func (p *proc) createApp(t *testing.T, name string) testApp {
	t.Helper()
	st, body := p.call(t, "admin", "durability-admin", "POST", "/admin/v1/apps", fmt.Sprintf(`{"name":%q}`, name))
	var app testApp
	if st != 200 || json.Unmarshal(body, &app) != nil {
		t.Fatalf("create app: %d %s", st, body)
	}
	return app
}

func (p *proc) tryCall(user, pass, method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.SetBasicAuth(user, pass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := insecureClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// TestKill9LosesNothing acknowledges writes of every kind, kills the
// process with SIGKILL right after the last 200, restarts it on the same
// data dir and finds every acknowledged write.
func TestKill9LosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	p := startProc(t, dir)
	app := p.createApp(t, "durable")

	// Concurrent writers, so acknowledged writes share group commits the
	// way they do under load.
	const writers, perWriter = 8, 25
	type acked struct {
		device, secret string
		msgids         []int64
		version        int64
	}
	results := make([]acked, writers*perWriter)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				n := w*perWriter + i
				name := fmt.Sprintf("dur-%05d", n)
				st, b := p.call(t, app.Key, app.MasterSecret, "POST", "/device/v1/devices", `{"device":[{"name":"`+name+`"}]}`)
				var cr struct {
					Resp []struct {
						Code         int
						DeviceSecret string `json:"device_secret"`
					}
				}
				if st != 200 || json.Unmarshal(b, &cr) != nil || cr.Resp[0].Code != 0 {
					t.Errorf("create %s: %d %s", name, st, b)
					return
				}
				results[n] = acked{device: name, secret: cr.Resp[0].DeviceSecret, version: 1}
				st, b = p.call(t, app.Key, app.MasterSecret, "POST", "/device/v1/property",
					fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"version":1,"properties":[{"name":"n","value":%d}]}`, 2*n, name, n))
				if st != 200 || !strings.Contains(string(b), `"op_code":0`) {
					t.Errorf("set property %s: %d %s", name, st, b)
					return
				}
				results[n].version = 2
				st, b = p.call(t, app.Key, app.MasterSecret, "POST", "/msg/v1/msg",
					fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"msg_body":"m%d"}`, 2*n+1, name, n))
				var mr struct{ Msgid int64 }
				if st != 200 || json.Unmarshal(b, &mr) != nil {
					t.Errorf("send %s: %d %s", name, st, b)
					return
				}
				results[n].msgids = append(results[n].msgids, mr.Msgid)
			}
		}(w)
	}
	wg.Wait()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	if t.Failed() {
		return
	}

	q := startProc(t, dir)
	for _, r := range results {
		st, b := q.call(t, app.Key, app.MasterSecret, "GET", "/device/v1/baseinfo?device_name="+r.device, "")
		if st != 200 || !strings.Contains(string(b), r.secret) {
			t.Errorf("after kill -9, device %s: %d %s", r.device, st, b)
			continue
		}
		st, b = q.call(t, app.Key, app.MasterSecret, "GET", "/device/v1/property?device_name="+r.device, "")
		if st != 200 || !strings.Contains(string(b), `"last_desired_version":2`) {
			t.Errorf("after kill -9, property of %s: %d %s", r.device, st, b)
		}
		for _, id := range r.msgids {
			st, b = q.call(t, app.Key, app.MasterSecret, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "")
			if st != 200 || !strings.Contains(string(b), `"state":"pending"`) {
				t.Errorf("after kill -9, message %d: %d %s", id, st, b)
			}
		}
	}
	// The seq_no records survived too: a retry replays, it does not send again.
	st, b := q.call(t, app.Key, app.MasterSecret, "POST", "/msg/v1/msg", `{"seq_no":1,"device_name":"dur-00000","msg_body":"m0"}`)
	if want := fmt.Sprintf(`{"msgid":%d}`, results[0].msgids[0]); st != 200 || string(b) != want {
		t.Errorf("seq_no replay after kill -9: %d %s, want %s", st, b, want)
	}
}
