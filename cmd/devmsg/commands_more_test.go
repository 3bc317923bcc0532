package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestCommandBadInput: names, sizes, ranges, unknown devices, another
// app's command and reused seq_nos are refused with the codes of
// docs/api.md, each message naming the field.
func TestCommandBadInput(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.createDevice("cmd-bad")
	big := strings.Repeat("x", 256<<10)
	for _, c := range []struct {
		body, field  string
		status, code int
	}{
		{`{"seq_no":1,"device_name":"cmd-bad"}`, "name", 400, 1002},
		{`{"device_name":"cmd-bad","name":"a"}`, "seq_no", 400, 1002},
		{`{"seq_no":1,"name":"a"}`, "device_name", 400, 1002},
		{`{"seq_no":1,"device_name":"cmd-bad","name":"bad name"}`, "name", 400, 1003},
		{`{"seq_no":1,"device_name":"cmd-bad","name":"` + strings.Repeat("n", 65) + `"}`, "name", 400, 1003},
		{`{"seq_no":1,"device_name":"cmd-bad","name":7}`, "name", 400, 1003},
		{`{"seq_no":1,"device_name":"cmd-bad","name":"a","params":"` + big + `"}`, "params", 400, 1003},
		{`{"seq_no":1,"device_name":"cmd-bad","name":"a","ttl":-1}`, "ttl", 400, 1003},
		{`{"seq_no":1,"device_name":"cmd-bad","name":"a","ttl":604801}`, "ttl", 400, 1003},
		{`{"seq_no":1,"device_name":"cmd-bad","name":"a","timeout":0}`, "timeout", 400, 1003},
		{`{"seq_no":1,"device_name":"cmd-bad","name":"a","timeout":3601}`, "timeout", 400, 1003},
		{`{"seq_no":1,"device_name":"cmd-bad","name":"a","wait":301}`, "wait", 400, 1003},
		{`{"seq_no":1,"device_name":"cmd-bad","name":"a","wait":"5"}`, "wait", 400, 1003},
		{`{"seq_no":1,"device_name":"nobody","name":"a"}`, "nobody", 400, 1003},
		{`[1]`, "request body", 400, 1003},
	} {
		st, code, msg := f.errCode("POST", "/cmd/v1/cmd", c.body)
		if st != c.status || code != c.code || !strings.Contains(msg, c.field) {
			t.Errorf("%.80s: %d %d %q, want %d %d naming %s", c.body, st, code, msg, c.status, c.code, c.field)
		}
	}
	for _, c := range []struct {
		method, query string
		code          int
	}{
		{"GET", "", 1002}, {"GET", "?cmd_id=x", 1003}, {"GET", "?cmd_id=1&wait=301", 1003}, {"GET", "?cmd_id=1&wait=-1", 1003},
		{"GET", "?cmd_id=12345", 1003}, {"DELETE", "", 1002}, {"DELETE", "?cmd_id=12345", 1003},
	} {
		if st, code, msg := f.errCode(c.method, "/cmd/v1/cmd"+c.query, ""); st != 400 || code != c.code {
			t.Errorf("%s %s: %d %d %q, want 400 %d", c.method, c.query, st, code, msg, c.code)
		}
	}
	for _, body := range []string{`{"seq_no":1,"device_names":[],"name":"a"}`, `{"seq_no":1,"device_names":"x","name":"a"}`,
		`{"seq_no":1,"device_names":[` + strings.Repeat(`"d",`, 1000) + `"d"],"name":"a"}`} {
		if st, code, msg := f.errCode("POST", "/cmd/v1/cmds", body); st != 400 || code != 1003 || !strings.Contains(msg, "device_names") {
			t.Errorf("batch %.60s: %d %d %q", body, st, code, msg)
		}
	}

	commandSeqAndScope(t, f)
}

// commandSeqAndScope: a reused seq_no, another app's lookups, the limit
// of waiting commands and a disabled device, on device cmd-bad.
func commandSeqAndScope(t *testing.T, f *fleet) {
	// seq_no: the same body answers the same command; another is refused.
	a := f.command(`{"seq_no":50,"device_name":"cmd-bad","name":"a","ttl":60,"wait":0}`)
	b := f.command(`{"seq_no":50,"device_name":"cmd-bad","name":"a","ttl":60,"wait":0}`)
	if a.CmdID == 0 || b.CmdID != a.CmdID {
		t.Fatalf("repeat of seq_no 50 made %d after %d, want the same", b.CmdID, a.CmdID)
	}
	if st, code, msg := f.errCode("POST", "/cmd/v1/cmd", `{"seq_no":50,"device_name":"cmd-bad","name":"b","ttl":60,"wait":0}`); st != 400 || code != 1003 || !strings.Contains(msg, "seq_no 50") {
		t.Fatalf("seq_no 50 with another body: %d %d %q", st, code, msg)
	}

	// Another app cannot see or cancel the command.
	var other struct{ Key, MasterSecret string }
	f.restOK("POST", "/admin/v1/apps", `{"name":"other"}`, &struct {
		Key          *string `json:"key"`
		MasterSecret *string `json:"master_secret"`
	}{&other.Key, &other.MasterSecret})
	for _, m := range []string{"GET", "DELETE"} {
		st, body := f.restAs(other.Key, other.MasterSecret, m, fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d", a.CmdID), "")
		if st != 400 || !strings.Contains(string(body), `"code":1003`) || !strings.Contains(string(body), "not found") {
			t.Errorf("another app's %s of command %d: %d %s", m, a.CmdID, st, body)
		}
	}
	if got := f.getCommand(a.CmdID, 0); got.State != "queued" {
		t.Fatalf("the command after another app's cancel: %+v", got)
	}

	// At most 100 wait per device: the 101st is rejected with 3004.
	for i := 2; i <= 100; i++ {
		f.command(fmt.Sprintf(`{"seq_no":%d,"device_name":"cmd-bad","name":"a","ttl":60,"wait":0}`, 100+i))
	}
	v := f.command(`{"seq_no":999,"device_name":"cmd-bad","name":"a","ttl":60,"wait":0}`)
	if v.State != "rejected" || v.Code == nil || *v.Code != 3004 {
		t.Fatalf("the 101st waiting command: %+v, want rejected 3004", v)
	}
	// Disabled device: rejected 3003, and its waiting commands too.
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/cmd-bad", `{"flag":1}`, nil)
	if got := f.getCommand(a.CmdID, 0); got.State != "rejected" || *got.Code != 3003 {
		t.Fatalf("a waiting command of a disabled device: %+v, want rejected 3003", got)
	}
	v = f.command(`{"seq_no":1000,"device_name":"cmd-bad","name":"a","ttl":60,"wait":0}`)
	if v.State != "rejected" || v.Code == nil || *v.Code != 3003 {
		t.Fatalf("a command to a disabled device: %+v, want rejected 3003", v)
	}
}

// TestCommandBatch sends one command to 1000 names with mixed
// outcomes and waits for every one to end: answers in request order.
func TestCommandBatch(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	var names []string
	var devs strings.Builder
	for i := range 997 {
		names = append(names, fmt.Sprintf("bat-%d", i))
		if i > 0 {
			devs.WriteString(",")
		}
		fmt.Fprintf(&devs, `{"name":"bat-%d"}`, i)
	}
	var created struct {
		Resp []struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"resp"`
	}
	f.restOK("POST", "/device/v1/devices", `{"device":[`+devs.String()+`]}`, &created)
	for i, r := range created.Resp {
		if r.Code != 0 {
			t.Fatalf("create device %d: %+v", i, r)
		}
	}
	secret := func(name string) string {
		var info struct {
			DeviceSecret string `json:"device_secret"`
		}
		f.restOK("GET", "/device/v1/baseinfo?device_name="+name, "", &info)
		return info.DeviceSecret
	}
	f.connectCmdDevice("bat-0", secret("bat-0"), false, echo)
	f.connectCmdDevice("bat-1", secret("bat-1"), false, func(c devCmd) string {
		return fmt.Sprintf(`{"cmd_id":%q,"code":2,"message":"no"}`, c.CmdID)
	})
	f.restOK("PATCH", "/admin/v1/apps/"+demoKey+"/devices/bat-2", `{"flag":1}`, nil)
	names = append(names, "nobody", "bat-5", "bat-6")
	list, _ := json.Marshal(names)
	var ans struct {
		Resp []json.RawMessage `json:"resp"`
	}
	start := time.Now()
	f.restOK("POST", "/cmd/v1/cmds", `{"seq_no":1,"device_names":`+string(list)+`,"name":"ping","params":[1],"wait":20}`, &ans)
	if len(ans.Resp) != 1000 {
		t.Fatalf("%d answers for 1000 names", len(ans.Resp))
	}
	states := map[string]int{}
	for i, raw := range ans.Resp {
		var v cmdView
		_ = json.Unmarshal(raw, &v)
		if v.DeviceName != names[i] {
			t.Fatalf("answer %d is for %q, want %q (request order)", i, v.DeviceName, names[i])
		}
		if v.CmdID == 0 {
			var r struct{ Code int }
			_ = json.Unmarshal(raw, &r)
			states[fmt.Sprint("refused ", r.Code)]++
			continue
		}
		states[v.State]++
	}
	want := map[string]int{"succeeded": 1, "failed": 1, "rejected": 1, "offline": 994, "refused 1003": 3}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v (in %v)", states, want, time.Since(start))
	}
	var v cmdView
	_ = json.Unmarshal(ans.Resp[0], &v)
	if string(v.Result) != "[1]" {
		t.Fatalf("bat-0's answer: %+v", v)
	}
}

// TestCommandMQTT5Shell: a device that is a shell script, mosquitto_sub
// and mosquitto_pub over MQTT 5, answering through the Response Topic
// with the Correlation Data and no cmd_id in its payload.
func TestCommandMQTT5Shell(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"mosquitto_sub", "mosquitto_pub"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not installed (Debian package mosquitto-clients; CI installs it)")
		}
	}
	f := newFleet(t)
	secret := f.createDevice("cmd-v5")
	host, port, _ := strings.Cut(f.s.mqtt["tcp"], ":")
	user := demoKey + "/cmd-v5"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := exec.CommandContext(ctx, "mosquitto_sub", "-V", "mqttv5", "-h", host, "-p", port, "-u", user, "-P", secret, "-i", user,
		"-q", "1", "-C", "1", "-t", "d/"+user+"/cmd", "-F", "%R|%D|%p")
	out := make(chan []byte, 1)
	go func() {
		b, _ := sub.Output()
		out <- b
	}()
	waitFor(t, 10*time.Second, "mosquitto_sub to subscribe", func() bool {
		return strings.Contains(f.metrics(), "devmsg_mqtt_connected_devices 1")
	})
	time.Sleep(200 * time.Millisecond) // its SUBSCRIBE follows the CONNECT
	v := f.command(`{"seq_no":1,"device_name":"cmd-v5","name":"ping","ttl":30,"wait":0}`)
	line := strings.TrimSpace(string(<-out))
	respTopic, rest, _ := strings.Cut(line, "|")
	corr, payload, _ := strings.Cut(rest, "|")
	if respTopic != "d/"+user+"/cmd/reply" || corr != fmt.Sprint(v.CmdID) || !strings.Contains(payload, `"cmd_id":"`+corr+`"`) {
		t.Fatalf("mosquitto_sub printed %q for command %d", line, v.CmdID)
	}
	pub := exec.CommandContext(ctx, "mosquitto_pub", "-V", "mqttv5", "-h", host, "-p", port, "-u", user, "-P", secret, "-i", user,
		"-q", "1", "-t", respTopic, "-D", "publish", "correlation-data", corr, "-m", `{"code":0,"result":"from the shell"}`)
	if b, err := pub.CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v %s", err, b)
	}
	got := f.getCommand(v.CmdID, 10)
	if got.State != "succeeded" || string(got.Result) != `"from the shell"` {
		t.Fatalf("after the shell's answer: %+v", got)
	}
}

// TestCommandAnswerOnlyByItsDevice: a command's answer counts only from
// its own device. Another device of the app, a device of another app
// (each answering on its own reply topic with the stolen cmd_id), and a
// device publishing on the owner's reply topic leave it open; its own
// device's answer then ends it.
func TestCommandAnswerOnlyByItsDevice(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	ownerSecret := f.createDevice("cmd-owner")
	thiefSecret := f.createDevice("cmd-thief")
	owner := f.connectCmdDevice("cmd-owner", ownerSecret, false, nil)
	thief := f.connectCmdDevice("cmd-thief", thiefSecret, false, nil)
	v := f.command(`{"seq_no":1,"device_name":"cmd-owner","name":"ping","ttl":60,"timeout":60,"wait":0}`)
	waitFor(t, 10*time.Second, "delivered", func() bool { return f.getCommand(v.CmdID, 0).State == "delivered" })
	forged := fmt.Sprintf(`{"cmd_id":"%d","code":0,"result":"stolen"}`, v.CmdID)

	thief.reply(t, forged)
	// Onto the owner's topic: refused by the broker, or the connection closed.
	thief.c.Publish(owner.prefix+"cmd/reply", 1, false, forged).WaitTimeout(5 * time.Second)

	var other struct {
		Key          string `json:"key"`
		MasterSecret string `json:"master_secret"`
	}
	f.restOK("POST", "/admin/v1/apps", `{"name":"foreign"}`, &other)
	st, body := f.restAs(other.Key, other.MasterSecret, "POST", "/device/v1/devices", `{"device":[{"name":"cmd-owner"}]}`)
	var created struct {
		Resp []struct {
			DeviceSecret string `json:"device_secret"`
		} `json:"resp"`
	}
	if st != 200 || json.Unmarshal(body, &created) != nil || len(created.Resp) != 1 {
		t.Fatalf("create the other app's device: %d %s", st, body)
	}
	opts := paho.NewClientOptions().AddBroker("tcp://" + f.s.mqtt["tcp"]).SetClientID(other.Key + "/cmd-owner").
		SetUsername(other.Key + "/cmd-owner").SetPassword(created.Resp[0].DeviceSecret).SetAutoReconnect(false).
		SetConnectTimeout(5 * time.Second)
	foreign := paho.NewClient(opts)
	if tok := foreign.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect the other app's device: %v", tok.Error())
	}
	defer foreign.Disconnect(0)
	if tok := foreign.Publish("d/"+other.Key+"/cmd-owner/cmd/reply", 1, false, forged); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("the other app's device's reply: %v", tok.Error())
	}

	if got := f.getCommand(v.CmdID, 0); got.State != "delivered" || got.Code != nil {
		t.Fatalf("after answers from devices that do not own it: %+v", got)
	}
	owner.reply(t, fmt.Sprintf(`{"cmd_id":"%d","code":0,"result":"mine"}`, v.CmdID))
	if got := f.getCommand(v.CmdID, 0); got.State != "succeeded" || string(got.Result) != `"mine"` {
		t.Fatalf("after its own device's answer: %+v", got)
	}
}
