package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type fleetBroadcast struct {
	BroadcastID int64  `json:"broadcast_id"`
	State       string `json:"state"`
	Targets     int64  `json:"targets"`
	Queued      int64  `json:"queued"`
	Delivered   int64  `json:"delivered"`
	Failed      int64  `json:"failed"`
	Retracted   int64  `json:"retracted"`
}

func (f *fleet) broadcastState(id int64) fleetBroadcast {
	f.t.Helper()
	var b fleetBroadcast
	f.restOK("GET", fmt.Sprintf("/msg/v1/broadcast?broadcast_id=%d", id), "", &b)
	return b
}

func (f *fleet) waitBroadcast(id int64, what string, ok func(fleetBroadcast) bool) fleetBroadcast {
	f.t.Helper()
	var b fleetBroadcast
	waitFor(f.t, 10*time.Second, fmt.Sprintf("broadcast %d %s", id, what), func() bool {
		b = f.broadcastState(id)
		return ok(b)
	})
	return b
}

// waitReceived waits until the device has received n messages.
func waitReceived(t *testing.T, d *device, n int) []string {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%s to receive %d messages", d.name, n), func() bool { return len(d.received()) >= n })
	return d.received()
}

// TestFleetMessaging drives batch sends and broadcasts with real devices
// over MQTT: results per device, exactly the tagged enabled devices
// reached, online at once and offline ones when they connect, and a
// cancel that retracts what is undelivered.
func TestFleetMessaging(t *testing.T) {
	f := newFleet(t)
	f.restOK("POST", "/device/v1/devices", `{"device":[
		{"name":"lamp-1","tags":["lamp"]},{"name":"lamp-2","tags":["lamp"]},{"name":"lamp-3","tags":["lamp"]},
		{"name":"lamp-off","tags":["lamp"]},{"name":"plug-1","tags":["plug"]}]}`, nil)
	secrets := map[string]string{}
	for _, n := range []string{"lamp-1", "lamp-2", "lamp-3", "lamp-off", "plug-1"} {
		var info struct {
			DeviceSecret string `json:"device_secret"`
		}
		f.restOK("GET", "/device/v1/baseinfo?device_name="+n, "", &info)
		secrets[n] = info.DeviceSecret
	}
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/lamp-off", `{"flag":1}`, nil)
	lamp1 := f.mustConnect("lamp-1", secrets["lamp-1"], "msg")
	lamp2 := f.mustConnect("lamp-2", secrets["lamp-2"], "msg")
	plug := f.mustConnect("plug-1", secrets["plug-1"], "msg")

	// A batch: results in request order, each message delivered to its
	// device alone.
	var batch struct {
		Resp []struct {
			DeviceName string `json:"device_name"`
			Code       int    `json:"code"`
			Msgid      int64  `json:"msgid"`
		} `json:"resp"`
	}
	f.restOK("POST", "/msg/v1/msgs", `{"seq_no":1,"device_names":["lamp-1","nobody","plug-1","lamp-off","lamp-3"],"msg_body":"b"}`, &batch)
	codes := []int{}
	for _, r := range batch.Resp {
		codes = append(codes, r.Code)
	}
	if !slices.Equal(codes, []int{0, 1003, 0, 3003, 0}) {
		t.Fatalf("batch results %+v", batch.Resp)
	}
	if got := waitReceived(t, lamp1, 1); got[0] != fmt.Sprint(batch.Resp[0].Msgid) {
		t.Fatalf("lamp-1 got %v, want msgid %d", got, batch.Resp[0].Msgid)
	}
	if got := waitReceived(t, plug, 1); got[0] != fmt.Sprint(batch.Resp[2].Msgid) {
		t.Fatalf("plug-1 got %v", got)
	}
	f.waitState(batch.Resp[0].Msgid, "delivered")
	if m := f.message(batch.Resp[4].Msgid); m.State != "pending" {
		t.Fatalf("offline lamp-3's message is %s", m.State)
	}

	// A broadcast to the tag reaches the online lamps now and lamp-3 when
	// it connects; never the plug or the disabled lamp.
	var acc struct {
		BroadcastID int64 `json:"broadcast_id"`
		Targets     int64 `json:"targets"`
	}
	f.restOK("POST", "/msg/v1/broadcast", `{"seq_no":2,"target":{"tag":"lamp"},"msg_body":"all lamps","ttl":600}`, &acc)
	if acc.Targets != 3 {
		t.Fatalf("targets %d, want 3", acc.Targets)
	}
	waitReceived(t, lamp1, 2)
	waitReceived(t, lamp2, 1)
	f.waitBroadcast(acc.BroadcastID, "done with two delivered", func(b fleetBroadcast) bool {
		return b.State == "done" && b.Queued == 3 && b.Delivered == 2
	})
	lamp3 := f.mustConnect("lamp-3", secrets["lamp-3"], "msg")
	if got := waitReceived(t, lamp3, 2); got[0] != fmt.Sprint(batch.Resp[4].Msgid) {
		t.Fatalf("lamp-3 got %v: the batch's message first", got)
	}
	f.waitBroadcast(acc.BroadcastID, "delivered to all three", func(b fleetBroadcast) bool { return b.Delivered == 3 })
	time.Sleep(200 * time.Millisecond)
	if n := len(plug.received()); n != 1 {
		t.Fatalf("plug-1 got %d messages: the broadcast reached it", n)
	}
	if n, m := len(lamp1.received()), len(lamp2.received()); n != 2 || m != 1 {
		t.Fatalf("lamp-1 got %d, lamp-2 %d: a device got a broadcast twice", n, m)
	}

	// Cancel: lamp-3 is offline, so its message waits; the cancel
	// retracts it and lamp-3 never gets it.
	lamp3.c.Disconnect(250)
	waitFor(t, 10*time.Second, "lamp-3 offline", func() bool { return f.status("lamp-3").Status == 0 })
	f.restOK("POST", "/msg/v1/broadcast", `{"seq_no":3,"target":{"tag":"lamp"},"msg_body":"cancel me"}`, &acc)
	waitReceived(t, lamp1, 3)
	waitReceived(t, lamp2, 2)
	f.waitBroadcast(acc.BroadcastID, "done", func(b fleetBroadcast) bool { return b.State == "done" && b.Delivered == 2 })
	var cancelled fleetBroadcast
	f.restOK("DELETE", fmt.Sprintf("/msg/v1/broadcast?broadcast_id=%d", acc.BroadcastID), "", &cancelled)
	if cancelled.State != "cancelled" {
		t.Fatalf("after DELETE: %+v", cancelled)
	}
	b := f.waitBroadcast(acc.BroadcastID, "one retracted", func(b fleetBroadcast) bool { return b.Retracted == 1 })
	if b.Delivered != 2 || b.Queued != 3 {
		t.Fatalf("cancelled broadcast %+v", b)
	}
	lamp3 = f.mustConnect("lamp-3", secrets["lamp-3"], "msg")
	time.Sleep(300 * time.Millisecond)
	if got := lamp3.received(); len(got) != 0 {
		t.Fatalf("lamp-3 got %v after the cancel", got)
	}
}

// messagesPerDevice counts every message of the app by device, through
// the admin API's message list.
func messagesPerDevice(t *testing.T, p *proc, appKey string) map[string]int {
	t.Helper()
	per := map[string]int{}
	cursor := ""
	for {
		st, body := p.call(t, "admin", "durability-admin", "GET", "/admin/v1/apps/"+appKey+"/messages?limit=1000&cursor="+cursor, "")
		var page struct {
			Messages []struct {
				DeviceName string `json:"device_name"`
			} `json:"messages"`
			NextCursor string `json:"next_cursor"`
		}
		if st != 200 || json.Unmarshal(body, &page) != nil {
			t.Fatalf("list messages: %d %s", st, body)
		}
		for _, m := range page.Messages {
			per[m.DeviceName]++
		}
		if page.NextCursor == "" {
			return per
		}
		cursor = page.NextCursor
	}
}

// fanoutDevices is how many devices the kill -9 fan-out tests register:
// DEVMSG_FANOUT_DEVICES (a multiple of 1,000; `make crash-fanout` runs
// 50,000), else def.
func fanoutDevices(t *testing.T, def int) int {
	v := os.Getenv("DEVMSG_FANOUT_DEVICES")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1000 || n%1000 != 0 {
		t.Fatalf("DEVMSG_FANOUT_DEVICES=%q: want a multiple of 1000", v)
	}
	return n
}

// TestKill9DuringFanout kills the server with SIGKILL while a broadcast
// to 5,000 registered devices (see fanoutDevices) fans out, restarts it
// on the same data dir and finds that every device ends with exactly one
// message.
func TestKill9DuringFanout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	devices := fanoutDevices(t, 5000)
	dir := t.TempDir()
	// devices/2.5 messages a second in chunks of 100: the fan-out takes
	// about 2.5 s, long enough to be killed midway.
	args := []string{"--broadcast.rate", strconv.Itoa(devices * 2 / 5), "--broadcast.chunk", "100"}
	p := startProc(t, dir, args...)
	app := p.createApp(t, "fanout")
	for b := 0; b < devices/1000; b++ {
		var devs []string
		for i := range 1000 {
			devs = append(devs, fmt.Sprintf(`{"name":"fan-%05d"}`, b*1000+i))
		}
		if st, body := p.call(t, app.Key, app.MasterSecret, "POST", "/device/v1/devices", `{"device":[`+strings.Join(devs, ",")+`]}`); st != 200 {
			t.Fatalf("create devices: %d %s", st, body)
		}
	}
	st, body := p.call(t, app.Key, app.MasterSecret, "POST", "/msg/v1/broadcast", `{"seq_no":1,"target":{"all":true},"msg_body":"fw"}`)
	var acc struct {
		BroadcastID int64 `json:"broadcast_id"`
		Targets     int   `json:"targets"`
	}
	if st != 200 || json.Unmarshal(body, &acc) != nil || acc.Targets != devices {
		t.Fatalf("broadcast: %d %s", st, body)
	}
	progress := func(p *proc) fleetBroadcast {
		st, body := p.call(t, app.Key, app.MasterSecret, "GET", fmt.Sprintf("/msg/v1/broadcast?broadcast_id=%d", acc.BroadcastID), "")
		var b fleetBroadcast
		if st != 200 || json.Unmarshal(body, &b) != nil {
			t.Fatalf("progress: %d %s", st, body)
		}
		return b
	}
	waitFor(t, 20*time.Second, "the fan-out to start", func() bool { return progress(p).Queued >= int64(devices/10) })
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()

	q := startProc(t, dir, args...)
	if b := progress(q); b.Queued >= int64(devices) {
		t.Fatalf("the fan-out ended before the kill (%+v): the test proves nothing", b)
	}
	waitFor(t, 30*time.Second, "the fan-out to resume and end", func() bool { return progress(q).State == "done" })
	if b := progress(q); b.Queued != int64(devices) {
		t.Fatalf("done with %+v", b)
	}
	// Every message of the app, by device.
	per := messagesPerDevice(t, q, app.Key)
	for i := range devices {
		if n := per[fmt.Sprintf("fan-%05d", i)]; n != 1 {
			t.Errorf("fan-%05d has %d messages", i, n)
		}
	}
	if len(per) != devices {
		t.Errorf("%d devices have messages, want %d", len(per), devices)
	}
}

// TestClusterFanoutNodeKilled runs a broadcast on two nodes sharing a
// Redis, kills the node running the fan-out with SIGKILL midway, and finds
// that the other takes the broadcast lease, resumes, and that every
// device ends with exactly one message.
func TestClusterFanoutNodeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	rdb := redisForTest(t, "--appendfsync", "always")
	devices := fanoutDevices(t, 3000)
	// devices/7.5 messages a second (400 for 3,000): the fan-out outlasts
	// the lease's hand-over.
	flags := []string{"--broadcast.rate", strconv.Itoa(devices * 2 / 15), "--broadcast.chunk", "50"}
	n1 := startNode(t, rdb, 1, flags...) // first: it takes the lease
	n2 := startNode(t, rdb, 2, flags...)
	app := n1.createApp(t, "cluster-fanout")
	for b := 0; b < devices/1000; b++ {
		var devs []string
		for i := range 1000 {
			devs = append(devs, fmt.Sprintf(`{"name":"cf-%05d","tags":["all"]}`, b*1000+i))
		}
		if st, body := n1.call(t, app.Key, app.MasterSecret, "POST", "/device/v1/devices", `{"device":[`+strings.Join(devs, ",")+`]}`); st != 200 {
			t.Fatalf("create devices: %d %s", st, body)
		}
	}
	leading := func(p *proc) bool {
		st, b, err := p.tryCall("", "", "GET", "/metrics", "")
		return err == nil && st == 200 && strings.Contains(string(b), "\ndevmsg_cluster_broadcast_worker 1\n")
	}
	waitFor(t, 20*time.Second, "node 1 to hold the broadcast lease", func() bool { return leading(n1) })
	// Accepted by node 2; fanned out by node 1.
	st, body := n2.call(t, app.Key, app.MasterSecret, "POST", "/msg/v1/broadcast", `{"seq_no":1,"target":{"tag":"all"},"msg_body":"c"}`)
	var acc struct {
		BroadcastID int64 `json:"broadcast_id"`
		Targets     int   `json:"targets"`
	}
	if st != 200 || json.Unmarshal(body, &acc) != nil || acc.Targets != devices {
		t.Fatalf("broadcast: %d %s", st, body)
	}
	progress := func() fleetBroadcast {
		st, body := n2.call(t, app.Key, app.MasterSecret, "GET", fmt.Sprintf("/msg/v1/broadcast?broadcast_id=%d", acc.BroadcastID), "")
		var b fleetBroadcast
		if st != 200 || json.Unmarshal(body, &b) != nil {
			t.Fatalf("progress: %d %s", st, body)
		}
		return b
	}
	waitFor(t, 20*time.Second, "the fan-out to start", func() bool { return progress().Queued >= int64(devices/15) })
	if err := n1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = n1.cmd.Wait()
	if b := progress(); b.Queued >= int64(devices) {
		t.Fatalf("the fan-out ended before the kill (%+v): the test proves nothing", b)
	}
	waitFor(t, time.Duration(max(60, devices/100))*time.Second, "node 2 to take over and finish", func() bool { return progress().State == "done" })
	if !leading(n2) {
		t.Error("node 2 finished without the lease")
	}
	per := messagesPerDevice(t, n2, app.Key)
	for i := range devices {
		if n := per[fmt.Sprintf("cf-%05d", i)]; n != 1 {
			t.Errorf("cf-%05d has %d messages", i, n)
		}
	}
	if b := progress(); b.Queued != int64(devices) {
		t.Errorf("done with %+v", b)
	}
}
