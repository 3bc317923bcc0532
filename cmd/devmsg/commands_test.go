package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestCommandRoundTrip sends commands that the HTTP call waits on to a
// real device: an answer, a failing answer, progress, and the events
// the log keeps of them.
func TestCommandRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-rt")
	f.connectCmdDevice("cmd-rt", secret, false, func(c devCmd) string {
		if c.Name == "fail" {
			return fmt.Sprintf(`{"cmd_id":%q,"code":1,"message":"cannot"}`, c.CmdID)
		}
		return echo(c)
	})

	v := f.command(`{"seq_no":1,"device_name":"cmd-rt","name":"ping","params":{"n":1},"wait":10}`)
	if v.State != "succeeded" || v.Code == nil || *v.Code != 0 || string(v.Result) != `{"n":1}` || v.Message != "ok" {
		t.Fatalf("round trip: %+v", v)
	}
	if v.TimeCreate == 0 || v.TimeSent < v.TimeCreate || v.TimeDelivered < v.TimeSent || v.TimeDone < v.TimeDelivered {
		t.Fatalf("times out of order: %+v", v)
	}
	v = f.command(`{"seq_no":2,"device_name":"cmd-rt","name":"fail","wait":10}`)
	if v.State != "failed" || v.Code == nil || *v.Code != 1 || v.Message != "cannot" {
		t.Fatalf("failing answer: %+v", v)
	}
	if got := f.getCommand(v.CmdID, 0); got.State != "failed" {
		t.Fatalf("GET after the answer: %+v", got)
	}

	var evs struct {
		Events []struct {
			Type       string         `json:"type"`
			DeviceName string         `json:"device_name"`
			Data       map[string]any `json:"data"`
		} `json:"events"`
	}
	f.restOK("GET", "/event/v1/events?types=command.done&device_name=cmd-rt", "", &evs)
	if len(evs.Events) != 2 || evs.Events[0].Data["state"] != "succeeded" || evs.Events[1].Data["state"] != "failed" ||
		evs.Events[1].Data["cmd_id"] != fmt.Sprint(v.CmdID) || evs.Events[1].Data["name"] != "fail" {
		t.Fatalf("command.done events: %+v", evs.Events)
	}
}

// TestCommandProgressAndTimeout: a device that reports progress and
// never answers; the command times out on the server's clock, and a
// late answer is dropped.
func TestCommandProgressAndTimeout(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-slow")
	d := f.connectCmdDevice("cmd-slow", secret, false, nil)

	v := f.command(`{"seq_no":1,"device_name":"cmd-slow","name":"ota","timeout":2,"wait":0}`)
	waitFor(t, 10*time.Second, "the device to get the command", func() bool { return len(d.received()) == 1 })
	id := d.received()[0].CmdID
	if id != fmt.Sprint(v.CmdID) || d.received()[0].Timeout != 2 {
		t.Fatalf("device got %+v for command %d", d.received(), v.CmdID)
	}
	if tok := d.c.Publish(d.prefix+"cmd/progress", 1, false, `{"cmd_id":"`+id+`","progress":40,"details":{"step":"download"}}`); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	if got := f.getCommand(v.CmdID, 0); got.State != "in_progress" || got.Progress != 40 {
		t.Fatalf("after progress: %+v", got)
	}
	got := f.getCommand(v.CmdID, 10)
	if got.State != "timed_out" || got.TimeDone == 0 {
		t.Fatalf("unanswered command: %+v, want timed_out", got)
	}
	d.reply(t, `{"cmd_id":"`+id+`","code":0}`) // acknowledged, dropped
	if got := f.getCommand(v.CmdID, 0); got.State != "timed_out" {
		t.Fatalf("a late answer changed the command: %+v", got)
	}
	var evs struct {
		Events []struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		} `json:"events"`
	}
	f.restOK("GET", "/event/v1/events?types=command.progress,command.done&device_name=cmd-slow", "", &evs)
	if len(evs.Events) != 2 || evs.Events[0].Type != "command.progress" || evs.Events[0].Data["progress"] != 40.0 ||
		evs.Events[1].Data["state"] != "timed_out" {
		t.Fatalf("events: %+v", evs.Events)
	}
	if !strings.Contains(f.metrics(), "devmsg_command_answers_dropped_total 1") {
		t.Fatal("the late answer is not counted in devmsg_command_answers_dropped_total")
	}
}

// TestCommandOfflineDevice: ttl 0 to an offline device ends offline at
// once; ttl > 0 waits and is delivered when the device connects.
func TestCommandOfflineDevice(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-off")
	v := f.command(`{"seq_no":1,"device_name":"cmd-off","name":"ping","wait":30}`)
	if v.State != "offline" || v.TimeDone == 0 {
		t.Fatalf("ttl 0 to an offline device: %+v", v)
	}
	v = f.command(`{"seq_no":2,"device_name":"cmd-off","name":"ping","ttl":60,"wait":0}`)
	if v.State != "queued" {
		t.Fatalf("ttl 60 to an offline device: %+v", v)
	}
	more := []int64{
		f.command(`{"seq_no":3,"device_name":"cmd-off","name":"two","ttl":60,"wait":0}`).CmdID,
		f.command(`{"seq_no":4,"device_name":"cmd-off","name":"three","ttl":60,"wait":0}`).CmdID,
	}
	d := f.connectCmdDevice("cmd-off", secret, false, echo)
	if got := f.getCommand(v.CmdID, 10); got.State != "succeeded" {
		t.Fatalf("queued command after the device connected: %+v", got)
	}
	waitFor(t, 10*time.Second, "three commands", func() bool { return len(d.received()) == 3 })
	for i, want := range append([]int64{v.CmdID}, more...) {
		if got := d.received()[i].CmdID; got != fmt.Sprint(want) {
			t.Fatalf("command %d arrived as %s, want %d: commands go out in accepted order", i, got, want)
		}
	}
}

// TestCommandCancel cancels a command before delivery (never sent) and
// after (the device is told, and its answer is dropped).
func TestCommandCancel(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-cancel")
	v := f.command(`{"seq_no":1,"device_name":"cmd-cancel","name":"reboot","ttl":60,"wait":0}`)
	var c cmdView
	f.restOK("DELETE", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d", v.CmdID), "", &c)
	if c.State != "cancelled" {
		t.Fatalf("cancel before delivery: %+v", c)
	}
	d := f.connectCmdDevice("cmd-cancel", secret, false, nil)
	v2 := f.command(`{"seq_no":2,"device_name":"cmd-cancel","name":"reboot","ttl":60,"wait":0}`)
	waitFor(t, 10*time.Second, "the second command", func() bool { return len(d.received()) == 1 })
	if got := d.received(); got[0].CmdID != fmt.Sprint(v2.CmdID) {
		t.Fatalf("the device got %+v; the cancelled command %d must never be sent", got, v.CmdID)
	}
	waitFor(t, 10*time.Second, "delivered", func() bool { return f.getCommand(v2.CmdID, 0).State == "delivered" })
	f.restOK("DELETE", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d", v2.CmdID), "", &c)
	if c.State != "cancelled" {
		t.Fatalf("cancel after delivery: %+v", c)
	}
	waitFor(t, 10*time.Second, "cmd/cancel", func() bool { return len(d.cancelled()) == 1 })
	d.reply(t, fmt.Sprintf(`{"cmd_id":"%d","code":0}`, v2.CmdID))
	if got := f.getCommand(v2.CmdID, 0); got.State != "cancelled" {
		t.Fatalf("an answer after the cancel: %+v", got)
	}
}

// TestCommandRedeliveredOnce: a command the device did not acknowledge
// is sent again on its next connection with the same cmd_id, and only
// the first answer counts.
func TestCommandRedeliveredOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-dup")
	d := f.connectCmdDevice("cmd-dup", secret, true, nil)
	v := f.command(`{"seq_no":1,"device_name":"cmd-dup","name":"ping","ttl":60,"wait":0}`)
	waitFor(t, 10*time.Second, "the first delivery", func() bool { return len(d.received()) == 1 })
	if got := f.getCommand(v.CmdID, 0); got.State != "sent" {
		t.Fatalf("published without PUBACK: %+v, want sent", got)
	}
	d.c.Disconnect(0)
	d2 := f.connectCmdDevice("cmd-dup", secret, false, echo)
	waitFor(t, 10*time.Second, "the second delivery", func() bool { return len(d2.received()) == 1 })
	if d2.received()[0].CmdID != fmt.Sprint(v.CmdID) {
		t.Fatalf("sent again as %s, want the same cmd_id %d", d2.received()[0].CmdID, v.CmdID)
	}
	got := f.getCommand(v.CmdID, 10)
	if got.State != "succeeded" {
		t.Fatalf("after the answer: %+v", got)
	}
	d2.reply(t, fmt.Sprintf(`{"cmd_id":"%d","code":7}`, v.CmdID))
	if again := f.getCommand(v.CmdID, 0); again.State != "succeeded" || *again.Code != 0 {
		t.Fatalf("a second answer changed the command: %+v", again)
	}
}

// TestCommandAheadOfMessages: a device whose window is full of
// unacknowledged messages, with more queued behind them, gets a command
// in the first place that frees, ahead of the queued messages, and
// answers it: the command shares the window (a device must never hold
// more unacknowledged publishes than its window) but not the queue.
func TestCommandAheadOfMessages(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-busy")
	var msgs atomic.Int64
	var first atomic.Pointer[paho.Message]
	msgsBeforeCmd := make(chan int64, 1)
	prefix := "d/" + demoKey + "/cmd-busy/"
	opts := paho.NewClientOptions().AddBroker("tcp://" + f.s.mqtt["tcp"]).SetClientID(demoKey + "/cmd-busy").
		SetUsername(demoKey + "/cmd-busy").SetPassword(secret).SetCleanSession(true).SetAutoReconnect(false).
		SetAutoAckDisabled(true).SetOrderMatters(true)
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer c.Disconnect(0)
	sub := func(topic string, h paho.MessageHandler) {
		if tok := c.Subscribe(prefix+topic, 1, h); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	sub("msg", func(_ paho.Client, m paho.Message) { // acknowledged only when the test says
		if msgs.Add(1) == 1 {
			first.Store(&m)
		}
	})
	sub("cmd", func(_ paho.Client, m paho.Message) {
		select {
		case msgsBeforeCmd <- msgs.Load():
		default:
		}
		m.Ack()
		var p devCmd
		_ = json.Unmarshal(m.Payload(), &p)
		go c.Publish(prefix+"cmd/reply", 1, false, `{"cmd_id":"`+p.CmdID+`","code":0}`)
	})
	for i := range 80 {
		f.send("cmd-busy", fmt.Sprint("m", i), 3600)
	}
	waitFor(t, 10*time.Second, "the window to fill", func() bool { return msgs.Load() >= 64 })
	v := f.command(`{"seq_no":9001,"device_name":"cmd-busy","name":"ping","ttl":60,"wait":0}`)
	if got := f.getCommand(v.CmdID, 0); got.State != "queued" {
		t.Fatalf("a command with the window full: %+v, want queued", got)
	}
	(*first.Load()).Ack()
	if got := f.getCommand(v.CmdID, 10); got.State != "succeeded" {
		t.Fatalf("a command behind a message backlog: %+v", got)
	}
	if n := <-msgsBeforeCmd; n != 64 {
		t.Fatalf("the device got %d messages before the command, want the 64 of its window", n)
	}
}

// TestCommandBacklogAnsweredAtOnce: a device that connects to a full
// backlog of commands gets them all and answers each at once. Answers
// count against a rate of their own, so every one is taken, and the
// device's telemetry right after is not refused on their account.
func TestCommandBacklogAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	secret := f.createDevice("cmd-backlog")
	ids := make([]int64, 100)
	for i := range ids {
		ids[i] = f.command(fmt.Sprintf(`{"seq_no":%d,"device_name":"cmd-backlog","name":"ping","params":%d,"ttl":60,"timeout":60,"wait":0}`, i+1, i)).CmdID
	}
	d := f.connectCmdDevice("cmd-backlog", secret, false, echo)
	for i, id := range ids {
		if got := f.getCommand(id, 10); got.State != "succeeded" || string(got.Result) != fmt.Sprint(i) {
			t.Fatalf("command %d of the backlog: %+v, want succeeded with %d", i, got, i)
		}
	}
	toks := make([]paho.Token, 80)
	for i := range toks {
		toks[i] = d.c.Publish(d.prefix+"up", 1, false, `{"t":1}`)
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("telemetry %d after the answers: no PUBACK (%v)", i, tok.Error())
		}
	}
}
