package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestDeliveredSurvivesKill9 sends a command with ttl 0 (the default) to
// a connected device, which takes it (PUBACK) and works on it, kills the
// server with SIGKILL once the ttl has passed, with no other write in
// between, and restarts it. The command must still be delivered, with
// its answer due within its timeout: the device has it, and a lost
// delivered state would leave it undelivered past its ttl, to end
// expired ("ttl passed before the device took the command") and drop
// the device's answer (docs/api.md, "States": only a sent state no one
// was shown may be taken back, and the command is then sent again).
func TestDeliveredSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	args := []string{"--mqtt.tcp_addr", "127.0.0.1:0"}
	p := startProc(t, dir, args...)
	app := p.createApp(t, "delivered")
	names, secrets := createDevices(t, p, app, "delivered-", 1)
	got := make(chan int64, 4)
	dev := connectCmdCrashDevice(t, p.mqtt, app.Key, names[0], secrets[0], func(m paho.Message) {
		var c struct {
			CmdID string `json:"cmd_id"`
		}
		if json.Unmarshal(m.Payload(), &c) == nil {
			if id, err := strconv.ParseInt(c.CmdID, 10, 64); err == nil {
				got <- id
			}
		}
	})
	defer dev.Disconnect(0)
	st, b := p.call(t, app.Key, app.MasterSecret, "POST", "/cmd/v1/cmd",
		fmt.Sprintf(`{"seq_no":1,"device_name":%q,"name":"update","ttl":0,"timeout":600,"wait":0}`, names[0]))
	var sent struct {
		CmdID int64 `json:"cmd_id"`
	}
	if st != 200 || json.Unmarshal(b, &sent) != nil {
		t.Fatalf("send: %d %s", st, b)
	}
	select {
	case id := <-got:
		if id != sent.CmdID {
			t.Fatalf("device got %d, sent %d", id, sent.CmdID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the device did not get the command")
	}
	// The PUBACK went when the handler returned; the ttl (0 s and the
	// 2 s grace) passes. Nothing is read, so nothing is made durable.
	time.Sleep(3 * time.Second)
	must(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()

	p = startProc(t, dir, args...)
	time.Sleep(4 * time.Second) // the expiry runs every second
	st, b = p.call(t, app.Key, app.MasterSecret, "GET", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d", sent.CmdID), "")
	var now struct {
		State         string `json:"state"`
		TimeDelivered int64  `json:"time_delivered"`
	}
	if st != 200 || json.Unmarshal(b, &now) != nil {
		t.Fatalf("get: %d %s", st, b)
	}
	if now.State != "delivered" || now.TimeDelivered == 0 {
		t.Fatalf("the device took command %d before the crash; after it: %s", sent.CmdID, b)
	}
}
