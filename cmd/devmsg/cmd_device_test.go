package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/devmsg/devmsg/sdk/device"
)

// cmdDoc is the command document of the /cmd/v1 answers.
type cmdDoc struct {
	CmdID    int64           `json:"cmd_id"`
	Device   string          `json:"device_name"`
	Name     string          `json:"name"`
	State    string          `json:"state"`
	Code     int             `json:"code"`
	Result   json.RawMessage `json:"result"`
	Message  string          `json:"message"`
	Progress int             `json:"progress"`
}

// sendCmd sends a command (params: JSON, "" for none) and returns the
// document the call answered with, after waiting up to wait seconds.
func (f *fleet) sendCmd(device, name, params string, wait int) cmdDoc {
	f.t.Helper()
	body := fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"name":%q,"timeout":30,"ttl":60,"wait":%d`, f.seq.Add(1), device, name, wait)
	if params != "" {
		body += `,"params":` + params
	}
	var v cmdDoc
	f.restOK("POST", "/cmd/v1/cmd", body+"}", &v)
	return v
}

// cmdState reads a command, waiting up to wait seconds for it to end.
func (f *fleet) cmdState(id int64, wait int) cmdDoc {
	f.t.Helper()
	var v cmdDoc
	f.restOK("GET", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d&wait=%d", id, wait), "", &v)
	return v
}

// TestCommandsSDK has Go SDK devices, over MQTT 3.1.1 and 5, answer
// commands sent through the REST API with wait: a round trip, a failure,
// progress reports, a cancel that ends the handler's context, and a
// command delivered twice (its PUBACK lost with the connection) that
// runs its handler once.
func TestCommandsSDK(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("mqtt%d", v), func(t *testing.T) {
			f := &fleet{t: t, s: f.s, seq: atomic.Int64{}}
			f.seq.Store(int64(v) * 1000)
			testCommandsSDK(t, f, v)
		})
	}
}

func testCommandsSDK(t *testing.T, f *fleet, version byte) {
	name := fmt.Sprintf("cmd-sdk-%d", version)
	secret := f.createDevice(name)
	var slowRuns atomic.Int32
	release := make(chan struct{})
	blocked := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	cfg := sdk.Config{DeviceName: name, DeviceSecret: secret, AppKey: demoKey, ProtocolVersion: version}
	cfg.OnCommand("ping", func(_ context.Context, cmd *sdk.Command) sdk.Answer { return sdk.Answer{Result: cmd.Params} })
	cfg.OnCommand("fail", func(context.Context, *sdk.Command) sdk.Answer { return sdk.Answer{Code: 1, Message: "failed as asked"} })
	cfg.OnCommand("ota", func(ctx context.Context, cmd *sdk.Command) sdk.Answer {
		for pct := 0; pct <= 100; pct += 50 {
			if err := cmd.Progress(ctx, pct, map[string]int{"step": pct / 50}); err != nil {
				return sdk.Answer{Code: 2, Message: err.Error()}
			}
		}
		return sdk.Answer{Result: "installed"}
	})
	cfg.OnCommand("block", func(ctx context.Context, cmd *sdk.Command) sdk.Answer {
		_ = cmd.Progress(ctx, 10, nil)
		blocked <- struct{}{}
		<-ctx.Done()
		cancelled <- struct{}{}
		return sdk.Answer{Code: 3}
	})
	cfg.OnCommand("slow", func(ctx context.Context, cmd *sdk.Command) sdk.Answer {
		slowRuns.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return sdk.Answer{Result: "once"}
	})

	// The device connects through a proxy that can cut its connection
	// between a command's arrival and the device's PUBACK of it.
	px := newCutProxy(t, f.s.mqtt["tcp"])
	cfg.Broker = "tcp://" + px.addr()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := sdk.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	if v := f.sendCmd(name, "ping", `{"n":[1,2,3]}`, 10); v.State != "succeeded" || v.Code != 0 || string(v.Result) != `{"n":[1,2,3]}` {
		t.Fatalf("ping: %+v", v)
	}
	if v := f.sendCmd(name, "fail", "", 10); v.State != "failed" || v.Code != 1 || v.Message != "failed as asked" {
		t.Fatalf("fail: %+v", v)
	}
	if v := f.sendCmd(name, "ota", `{"version":"2.0"}`, 10); v.State != "succeeded" || v.Progress != 100 || string(v.Result) != `"installed"` {
		t.Fatalf("ota: %+v", v)
	}
	if v := f.sendCmd(name, "no-such", "", 10); v.State != "failed" || v.Code != sdk.CodeUnknownCommand {
		t.Fatalf("unknown command: %+v", v)
	}

	// Cancel after delivery: the handler's context ends; its answer is
	// not taken.
	v := f.sendCmd(name, "block", "", 0)
	<-blocked
	var c cmdDoc
	f.restOK("DELETE", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d", v.CmdID), "", &c)
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("cmd/cancel did not end the handler's context")
	}
	if c = f.cmdState(v.CmdID, 0); c.State != "cancelled" {
		t.Fatalf("cancelled command: %+v", c)
	}

	// A duplicate: the connection is cut after the command reaches the
	// device and before its PUBACK reaches the service, so the service
	// sends it again, with the same cmd_id, after the reconnect.
	px.cutAfter([]byte(`"name":"slow"`), []byte(`"name":"slow"`))
	v = f.sendCmd(name, "slow", "", 0)
	waitFor(t, 30*time.Second, "the command delivered again after the reconnect", func() bool {
		return f.cmdState(v.CmdID, 0).State == "delivered"
	})
	if cut, n := px.state(); !cut || n != 2 {
		t.Fatalf("the proxy cut %v, and passed the command %d times; want a cut and 2", cut, n)
	}
	close(release)
	if c = f.cmdState(v.CmdID, 10); c.State != "succeeded" || string(c.Result) != `"once"` {
		t.Fatalf("duplicated command: %+v", c)
	}
	if n := slowRuns.Load(); n != 1 {
		t.Fatalf("the handler of a command delivered twice ran %d times", n)
	}
}

// cutProxy forwards one MQTT connection at a time to the server; armed
// with cutAfter, it ends the server side's sending half on the first
// server → device chunk holding a pattern (so nothing the device sends
// after it, its PUBACK included, reaches the server), forwards the chunk,
// and closes both sides. It counts the chunks holding seen.
type cutProxy struct {
	t       *testing.T
	ln      net.Listener
	target  string
	mu      sync.Mutex
	pattern []byte
	cut     bool
	seen    []byte
	count   int
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go p.accept()
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// cutAfter arms the cut on pattern and counts the chunks holding seen
// from now on.
func (p *cutProxy) cutAfter(pattern, seen []byte) {
	p.mu.Lock()
	p.pattern, p.seen, p.count = pattern, seen, 0
	p.mu.Unlock()
}

// state reports whether the cut happened, and how many chunks held seen.
func (p *cutProxy) state() (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut, p.count
}

func (p *cutProxy) accept() {
	for {
		dev, err := p.ln.Accept()
		if err != nil {
			return
		}
		srv, err := net.Dial("tcp", p.target)
		if err != nil {
			dev.Close()
			continue
		}
		go func() { // device → server
			_, _ = io.Copy(srv, dev)
			srv.Close()
		}()
		go p.down(srv.(*net.TCPConn), dev)
	}
}

// down forwards server → device.
func (p *cutProxy) down(srv *net.TCPConn, dev net.Conn) {
	defer dev.Close()
	defer srv.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := srv.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.seen != nil && bytes.Contains(buf[:n], p.seen) {
				p.count++
			}
			cut := p.pattern != nil && bytes.Contains(buf[:n], p.pattern)
			if cut {
				p.pattern, p.cut = nil, true
				_ = srv.CloseWrite() // nothing more from the device
			}
			p.mu.Unlock()
			if _, werr := dev.Write(buf[:n]); werr != nil {
				return
			}
			if cut {
				time.Sleep(200 * time.Millisecond) // the device reads it and acknowledges, in vain
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestCommandsSim has `devmsg sim` devices answer ping, fail, ota (one
// of two failing it, with --fail-rate 0.5) and reboot (offline, then
// answered once back).
func TestCommandsSim(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	out, stop := f.startSim(2, "csim-", "--fail-rate", "0.5", "--ota-time", "500ms", "--reboot-time", "1s", "--mqtt-version", "5")

	if v := f.sendCmd("csim-0001", "ping", `{"hello":"sim"}`, 10); v.State != "succeeded" || string(v.Result) != `{"hello":"sim"}` {
		t.Fatalf("ping: %+v\n%s", v, out)
	}
	if v := f.sendCmd("csim-0002", "fail", "", 10); v.State != "failed" || v.Code != 1 {
		t.Fatalf("fail: %+v", v)
	}
	states := map[string]int{}
	for _, dev := range []string{"csim-0001", "csim-0002"} {
		v := f.sendCmd(dev, "ota", `{"version":"1.1"}`, 15)
		states[v.State]++
		if v.State == "succeeded" && (v.Progress != 100 || string(v.Result) != `{"version":"1.1"}`) {
			t.Fatalf("ota: %+v", v)
		}
	}
	if states["succeeded"] != 1 || states["failed"] != 1 {
		t.Fatalf("ota with --fail-rate 0.5 over 2 devices: %v", states)
	}

	v := f.sendCmd("csim-0001", "reboot", "", 0)
	waitFor(t, 10*time.Second, "csim-0001 offline for its reboot", func() bool { return f.status("csim-0001").Status == 0 })
	if v = f.cmdState(v.CmdID, 15); v.State != "succeeded" || string(v.Result) != `{"rebooted":true}` {
		t.Fatalf("reboot: %+v\n%s", v, out)
	}
	if f.status("csim-0001").Status != 1 {
		t.Fatal("csim-0001 not back online after its reboot")
	}
	if err := stop(); err != nil {
		t.Fatalf("sim: %v\n%s", err, out)
	}
}

// TestCommandsShellDevice runs the shell-script device of
// docs/device-protocol.md, mosquitto_sub and mosquitto_pub over MQTT 5
// answering to the Response Topic with the Correlation Data, and sends
// it commands through the REST API.
func TestCommandsShellDevice(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"mosquitto_sub", "mosquitto_pub", "jq"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (Debian packages mosquitto-clients and jq; CI installs them)", bin)
		}
	}
	script := docScript(t, "../../docs/device-protocol.md", "### A device answering commands from a shell script")
	f := newFleet(t)
	secret := f.createDevice("shell-1")
	host, port, _ := net.SplitHostPort(f.s.mqtt["tcp"])
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "KEY="+demoKey, "DEVICE=shell-1", "SECRET="+secret, "HOST="+host, "PORT="+port)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: the script's loop and its mosquitto_sub
	// end together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	waitFor(t, 10*time.Second, "the shell device online", func() bool { return f.status("shell-1").Status == 1 })

	for i := range 3 { // each answer takes the device over; it comes back
		params := fmt.Sprintf(`{"hello":"shell","n":%d}`, i)
		if v := f.sendCmd("shell-1", "ping", params, 15); v.State != "succeeded" || string(v.Result) != params {
			t.Fatalf("ping %d: %+v\n%s", i, v, out)
		}
	}
	if v := f.sendCmd("shell-1", "uptime", "", 15); v.State != "succeeded" || !bytes.HasPrefix(v.Result, []byte(`{"uptime_s":`)) {
		t.Fatalf("uptime: %+v\n%s", v, out)
	}
	if v := f.sendCmd("shell-1", "reboot", "", 15); v.State != "failed" || v.Code != 501 || v.Message != "unknown command reboot" {
		t.Fatalf("unknown command: %+v\n%s", v, out)
	}
}

// docScript returns the first ```sh block after heading in a Markdown
// file: the test runs what the documentation shows.
func docScript(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no %q", path, heading)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatalf("%s: no sh block after %q", path, heading)
	}
	script, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("%s: unterminated sh block after %q", path, heading)
	}
	return script
}

// startSim runs `devmsg sim` with count devices named prefix0001...
// (created through the API) and more flags, until stop, which returns
// its error; it returns once every device is connected.
func (f *fleet) startSim(count int, prefix string, more ...string) (out *syncBuffer, stop func() error) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out = &syncBuffer{}
	done := make(chan error, 1)
	args := append([]string{"sim", "--broker", "tcp://" + f.s.mqtt["tcp"], "--app-key", demoKey, "--count", fmt.Sprint(count),
		"--prefix", prefix, "--create", "--api", "http://" + f.s.addr, "--master-secret", demoSecret, "--report-every", "0"}, more...)
	go func() { done <- run(ctx, args, out, out) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	f.t.Cleanup(func() { _ = stop() })
	want := fmt.Sprintf("sim: %d devices connected, 0 failed", count)
	waitFor(f.t, 15*time.Second, want, func() bool { return strings.Contains(out.String(), want) })
	return out, stop
}
