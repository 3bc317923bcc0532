package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/devmsg/devmsg/sdk/device"
)

// TestDeviceSDK drives the Go device SDK against the real server: messages,
// desired properties, reports with their version rules, clicks, refused
// credentials, and resubscription after a reconnect.
func TestDeviceSDK(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("mqtt%d", v), func(t *testing.T) {
			ff := &fleet{t: t, s: f.s}
			ff.seq.Store(int64(v) * 1000) // seq_no spaces of their own
			testDeviceSDK(t, ff, v)
		})
	}
}

func testDeviceSDK(t *testing.T, f *fleet, version byte) {
	name := fmt.Sprintf("sdk-%d", version)
	secret := f.createDevice(name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := sdk.Connect(ctx, sdk.Config{Broker: "tcp://" + f.s.mqtt["tcp"], AppKey: demoKey, DeviceName: name, DeviceSecret: "wrong", ProtocolVersion: version}); !errors.Is(err, sdk.ErrNotAuthorized) {
		t.Fatalf("wrong secret: %v, want ErrNotAuthorized", err)
	}

	queued := f.send(name, "queued before connect", 60)
	var mu sync.Mutex
	var msgs []sdk.Message
	var docs []sdk.Desired
	d, err := sdk.Connect(ctx, sdk.Config{
		Broker: "ws://" + f.s.mqtt["ws"] + "/mqtt", AppKey: demoKey, DeviceName: name, DeviceSecret: secret, ProtocolVersion: version,
		SDKVersion: "sdk-test", AppVersion: "7",
		OnMessage: func(m sdk.Message) { mu.Lock(); msgs = append(msgs, m); mu.Unlock() },
		OnDesired: func(doc sdk.Desired) { mu.Lock(); docs = append(docs, doc); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	waitFor(t, 10*time.Second, "queued message", func() bool { mu.Lock(); defer mu.Unlock(); return len(msgs) == 1 })
	if m := msgs[0]; m.ID != queued || m.Body != "queued before connect" || m.ExpireTime != m.SentTime+60 {
		t.Fatalf("message %+v", m)
	}
	f.waitState(queued, "delivered")
	if err := d.Click(ctx, queued); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "click", func() bool { return len(f.message(queued).Records) == 4 })

	f.restOK("POST", "/device/v1/property", fmt.Sprintf(`{"seq_no":%d,"device_name":%q,`, 9000+int(version), name)+`"version":1,"properties":[{"name":"led","value":"on"}]}`, nil)
	waitFor(t, 5*time.Second, "desired push", func() bool { mu.Lock(); defer mu.Unlock(); return len(docs) == 1 })
	if docs[0].Version != 1 || string(docs[0].Properties["led"]) != `"on"` {
		t.Fatalf("desired %+v", docs[0])
	}
	doc, err := d.GetDesired(ctx)
	if err != nil || doc.Version != 1 {
		t.Fatalf("GetDesired: %+v %v", doc, err)
	}

	if v, err := d.Report(ctx, map[string]any{"temp": 21}, 0); err != nil || v != 1 {
		t.Fatalf("report: %d %v", v, err)
	}
	if v, err := d.Report(ctx, map[string]any{"temp": 22}, 10); err != nil || v != 10 {
		t.Fatalf("report version 10: %d %v", v, err)
	}
	var rerr *sdk.ReportError
	if _, err := d.Report(ctx, map[string]any{"temp": 23}, 10); !errors.As(err, &rerr) || rerr.Code != 6003 {
		t.Fatalf("stale report: %v, want a ReportError 6003", err)
	}
	_, b := f.rest("GET", "/device/v1/property?device_name="+name, "")
	if !strings.Contains(string(b), `"sdk_ver":"sdk-test"`) || !strings.Contains(string(b), `"app_ver":"7"`) || !strings.Contains(string(b), `"last_reported_version":10`) {
		t.Fatalf("property summary %s", b)
	}

	// Auto-reconnect resubscribes: a takeover drops the SDK's connection,
	// the takeover ends, the SDK comes back and gets new messages.
	other := f.mustConnect(name, secret)
	other.c.Disconnect(0)
	later := f.send(name, "after reconnect", 60)
	waitFor(t, 40*time.Second, "message after reconnect", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return msgs[len(msgs)-1].ID == later
	})
}

// TestDeviceSDKReportFromCallback is the usual firmware loop: apply the
// desired document and report the new state from inside OnDesired, and
// report first thing after Connect.
func TestDeviceSDKReportFromCallback(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("echo-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reported := make(chan error, 4)
	var d *sdk.Device
	d, err := sdk.Connect(ctx, sdk.Config{
		Broker: "tcp://" + f.s.mqtt["tcp"], AppKey: demoKey, DeviceName: "echo-1", DeviceSecret: secret,
		OnDesired: func(doc sdk.Desired) {
			if doc.Version == 0 {
				return // the empty document sent on subscribe
			}
			var led string
			_ = json.Unmarshal(doc.Properties["led"], &led)
			_, err := d.Report(ctx, map[string]any{"led": led}, 0)
			reported <- err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if v, err := d.Report(ctx, map[string]any{"led": "off"}, 0); err != nil || v != 1 {
		t.Fatalf("report right after Connect: %d %v", v, err)
	}
	f.restOK("POST", "/device/v1/property", `{"seq_no":9101,"device_name":"echo-1","version":1,"properties":[{"name":"led","value":"on"}]}`, nil)
	select {
	case err := <-reported:
		if err != nil {
			t.Fatalf("report from OnDesired: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("report from OnDesired never returned")
	}
	_, b := f.rest("GET", "/device/v1/property?device_name=echo-1", "")
	if !strings.Contains(string(b), `"last_reported_version":2`) {
		t.Fatalf("property summary %s", b)
	}
}

// TestSim runs `devmsg sim` with created devices and checks they come
// online, receive a message and report.
func TestSim(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--broker", "tcp://" + f.s.mqtt["tcp"], "--app-key", demoKey, "--count", "3",
			"--create", "--api", "http://" + f.s.addr, "--master-secret", demoSecret, "--report-every", "200ms"}, out, out)
	}()
	waitFor(t, 10*time.Second, "3 simulated devices online", func() bool {
		for i := 1; i <= 3; i++ {
			if st, b := f.rest("GET", fmt.Sprintf("/device/v1/status?device_name=sim-%04d", i), ""); st != 200 || !strings.Contains(string(b), `"status":1`) {
				return false
			}
		}
		return true
	})
	id := f.send("sim-0002", "hello sim", 60)
	waitFor(t, 5*time.Second, "sim prints the message", func() bool { return strings.Contains(out.String(), fmt.Sprintf("sim-0002 message %d: hello sim", id)) })
	f.waitState(id, "delivered")
	waitFor(t, 5*time.Second, "a report", func() bool {
		_, b := f.rest("GET", "/device/v1/property?device_name=sim-0001", "")
		return strings.Contains(string(b), `"name":"uptime_s"`)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("sim: %v\n%s", err, out)
	}

	// --secrets-file simulates existing devices.
	secret := f.createDevice("file-1")
	file := filepath.Join(t.TempDir(), "secrets.csv")
	if err := os.WriteFile(file, []byte("file-1,"+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- run(ctx, []string{"sim", "--broker", "tcp://" + f.s.mqtt["tcp"], "--app-key", demoKey, "--secrets-file", file, "--quiet"}, out, out)
	}()
	waitFor(t, 10*time.Second, "file-1 online", func() bool { return f.status("file-1").Status == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("sim --secrets-file: %v", err)
	}
}

// TestSimCreateTwice runs `devmsg sim --create` twice with the same flags,
// with one of its devices made beforehand: both runs connect every
// device, reusing the ones that exist.
func TestSimCreateTwice(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.createDevice("twice-0002")
	args := []string{"sim", "--broker", "tcp://" + f.s.mqtt["tcp"], "--app-key", demoKey, "--count", "3", "--prefix", "twice-",
		"--create", "--api", "http://" + f.s.addr, "--master-secret", demoSecret, "--report-every", "0", "--quiet"}
	for pass := 1; pass <= 2; pass++ {
		ctx, cancel := context.WithCancel(context.Background())
		out := &syncBuffer{}
		done := make(chan error, 1)
		go func() { done <- run(ctx, args, out, out) }()
		waitFor(t, 10*time.Second, fmt.Sprintf("pass %d: 3 devices connected", pass), func() bool {
			select {
			case err := <-done:
				t.Fatalf("pass %d: sim exited: %v\n%s", pass, err, out)
			default:
			}
			return strings.Contains(out.String(), "sim: 3 devices connected, 0 failed")
		})
		for i := 1; i <= 3; i++ {
			name := fmt.Sprintf("twice-%04d", i)
			waitFor(t, 5*time.Second, fmt.Sprintf("pass %d: %s online", pass, name), func() bool { return f.status(name).Status == 1 })
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("pass %d: %v\n%s", pass, err, out)
		}
		for i := 1; i <= 3; i++ {
			name := fmt.Sprintf("twice-%04d", i)
			waitFor(t, 5*time.Second, fmt.Sprintf("pass %d: %s offline", pass, name), func() bool { return f.status(name).Status == 0 })
		}
	}
	var page struct{ Devices []struct{ Name string } }
	f.restOK("GET", "/admin/v1/apps/"+demoKey+"/devices?prefix=twice-", "", &page)
	if len(page.Devices) != 3 {
		t.Fatalf("devices after two runs: %+v", page.Devices)
	}
}
