package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// cmdCrashLedger is what the clients and devices saw of commands,
// across every kill -9 cycle.
type cmdCrashLedger struct {
	mu       sync.Mutex
	reqs     map[string]*crashReq      // by tag (each request's params)
	answered map[string]map[int64]bool // tag → cmd_ids a 200 gave it
	received map[int64]map[string]bool // cmd_id → tags a device got under it
	acked    map[int64]string          // cmd_id → tag of an answer the server PUBACKed
	// full holds the cmd_ids a 200 said were rejected with a full
	// queue (3004): the client was told, so they end as they began.
	full map[int64]bool
	// unacked holds, per device prefix, the answers not PUBACKed yet:
	// the device publishes them again when it reconnects, as a device
	// keeping QoS 1 publishes across connections does.
	unacked map[string]map[int64]string
	// tried holds the tags of the requests sent at least once.
	tried map[string]bool
	// twice lists the commands a device got twice on one connection.
	twice []string
	// hold, when set, makes the devices take up to that long to
	// acknowledge a command, and forget it when the connection is gone by
	// then, so that a kill finds commands sent but not acknowledged,
	// which the server must send again.
	hold time.Duration
}

func newCmdCrashLedger() *cmdCrashLedger {
	return &cmdCrashLedger{reqs: map[string]*crashReq{}, answered: map[string]map[int64]bool{},
		received: map[int64]map[string]bool{}, acked: map[int64]string{}, unacked: map[string]map[int64]string{}, full: map[int64]bool{},
		tried: map[string]bool{}}
}

// answer records the cmd_id of a 200; another id for the same request
// is an error.
func (l *cmdCrashLedger) answer(t *testing.T, r *crashReq, id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.msgid != 0 && r.msgid != id {
		t.Errorf("command %s answered %d, then %d", r.body, r.msgid, id)
	}
	r.msgid = id
	if l.answered[r.body] == nil {
		l.answered[r.body] = map[int64]bool{}
	}
	l.answered[r.body][id] = true
}

// device returns the handler of one connection of a device that answers
// every command at QoS 1 with its tag as the result, and records the
// answers PUBACKed and any command the connection got twice (the server
// sends a command again only on a later connection).
// With hold set it forgets a command whose connection closed before it
// acknowledged it.
func (l *cmdCrashLedger) device(c func() paho.Client, prefix string) func(paho.Message) {
	seen := map[int64]bool{} // the cmd_ids this connection got; under l.mu
	return func(m paho.Message) {
		var p struct {
			CmdID  string `json:"cmd_id"`
			Params string `json:"params"`
		}
		if json.Unmarshal(m.Payload(), &p) != nil {
			return
		}
		id, err := strconv.ParseInt(p.CmdID, 10, 64)
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.received[id] == nil {
			l.received[id] = map[string]bool{}
		}
		l.received[id][p.Params] = true
		if seen[id] {
			l.twice = append(l.twice, fmt.Sprintf("cmd_id %d reached one connection of %s twice", id, prefix))
		}
		seen[id] = true
		l.mu.Unlock()
		cl := c()
		if l.hold > 0 {
			// The PUBACK goes when the handler returns.
			time.Sleep(rand.N(l.hold))
			if !cl.IsConnectionOpen() {
				return // not acknowledged, forgotten: the server must send it again
			}
		}
		go l.reply(cl, prefix, id, p.Params)
	}
}

// reply publishes a device's answer and records whether it was PUBACKed.
// An answer over the device's publish rate gets no PUBACK on MQTT 3.1.1
// (docs/device-protocol.md, Refused publishes): while the connection
// stays open the device publishes it again after a pause, as a device
// that does not block on one PUBACK does; once the connection is gone
// the answer waits in unacked for the next one (resend).
func (l *cmdCrashLedger) reply(c paho.Client, prefix string, id int64, tag string) {
	l.mu.Lock()
	if l.unacked[prefix] == nil {
		l.unacked[prefix] = map[int64]string{}
	}
	l.unacked[prefix][id] = tag
	l.mu.Unlock()
	payload := fmt.Sprintf(`{"cmd_id":"%d","code":0,"result":%q}`, id, tag)
	for range 30 {
		tok := c.Publish(prefix+"cmd/reply", 1, false, payload)
		if tok.WaitTimeout(2*time.Second) && tok.Error() == nil {
			l.mu.Lock()
			l.acked[id] = tag
			delete(l.unacked[prefix], id)
			l.mu.Unlock()
			return
		}
		if !c.IsConnectionOpen() {
			return
		}
		time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
	}
}

// resend publishes again the device's answers not PUBACKed.
func (l *cmdCrashLedger) resend(c paho.Client, prefix string) {
	l.mu.Lock()
	var ids []int64
	var tags []string
	for id, tag := range l.unacked[prefix] {
		ids, tags = append(ids, id), append(tags, tag)
	}
	l.mu.Unlock()
	for i := range ids {
		go l.reply(c, prefix, ids[i], tags[i])
	}
}

// cmdCrashFleet is the app, devices and ledger of a kill -9 test of
// commands.
type cmdCrashFleet struct {
	t              *testing.T
	app            testApp
	names, secrets []string
	l              *cmdCrashLedger
	seq            []int64 // the last seq_no of each client; seq[c] is client c's alone
	// crossing is set while the devices are on one node and the clients
	// that wait for answers call the other. crossed counts the first
	// sends with a wait both begun and answered in such a window, quick
	// those of them that returned their device's answer within a second:
	// the answer given on one node woke the call on the other.
	crossing       atomic.Bool
	crossed, quick atomic.Int64
}

// newCmdCrashFleet returns the fleet of app's devices (names, secrets)
// and clients clients. Its devices take up to 20 ms to acknowledge a
// command (cmdCrashLedger.hold).
func newCmdCrashFleet(t *testing.T, app testApp, names, secrets []string, clients int) *cmdCrashFleet {
	l := newCmdCrashLedger()
	l.hold = 20 * time.Millisecond
	return &cmdCrashFleet{t: t, app: app, names: names, secrets: secrets, l: l, seq: make([]int64, clients)}
}

// next returns client c's next request, to a device picked at random,
// with a seq_no of its own and its params as its tag.
func (f *cmdCrashFleet) next(c int) *crashReq {
	f.seq[c]++
	r := &crashReq{seq: int64(c)*1_000_000 + f.seq[c], device: f.names[rand.IntN(len(f.names))]}
	r.body = fmt.Sprintf("c%d-s%d", c, r.seq)
	f.l.mu.Lock()
	f.l.reqs[r.body] = r
	f.l.mu.Unlock()
	return r
}

// send posts command r to p, waiting up to wait seconds for its answer,
// and records the cmd_id of its 200 in the ledger. It reports false
// when p did not answer. An answer the call returns must be the one
// the device gave: its tag.
func (f *cmdCrashFleet) send(p *proc, r *crashReq, wait int) bool {
	t, l := f.t, f.l
	l.mu.Lock()
	first := !l.tried[r.body]
	l.tried[r.body] = true
	l.mu.Unlock()
	start, crossing := time.Now(), f.crossing.Load()
	st, b, err := p.tryCall(f.app.Key, f.app.MasterSecret, "POST", "/cmd/v1/cmd",
		fmt.Sprintf(`{"seq_no":%d,"device_name":%q,"name":"crash","params":%q,"ttl":3600,"timeout":3600,"wait":%d}`, r.seq, r.device, r.body, wait))
	if err != nil {
		return false
	}
	var resp cmdView
	if st != 200 || json.Unmarshal(b, &resp) != nil || resp.CmdID == 0 {
		t.Errorf("command %s: %d %s", r.body, st, b)
		return false
	}
	if resp.State == "rejected" && resp.Code != nil && *resp.Code == 3004 {
		// The device has 100 commands open: its answers fell behind
		// the clients on this shared machine, and the 200 says so.
		l.mu.Lock()
		l.full[resp.CmdID] = true
		l.mu.Unlock()
	}
	if resp.State == "succeeded" && string(resp.Result) != strconv.Quote(r.body) {
		t.Errorf("command %s: the call returned the answer %s", r.body, resp.Result)
	}
	if wait > 0 && first && crossing && f.crossing.Load() {
		f.crossed.Add(1)
		if resp.State == "succeeded" && time.Since(start) < time.Second {
			f.quick.Add(1)
		}
	}
	l.answer(t, r, resp.CmdID)
	return true
}

// connect connects every device to p, each answering its commands and
// publishing again its answers not PUBACKed on an earlier connection.
func (f *cmdCrashFleet) connect(p *proc) []paho.Client {
	cs := make([]paho.Client, len(f.names))
	for i := range cs {
		prefix := "d/" + f.app.Key + "/" + f.names[i] + "/"
		var c paho.Client
		var mu sync.Mutex
		get := func() paho.Client { mu.Lock(); defer mu.Unlock(); return c }
		mu.Lock()
		c = connectCmdCrashDevice(f.t, p.mqtt, f.app.Key, f.names[i], f.secrets[i], f.l.device(get, prefix))
		mu.Unlock()
		f.l.resend(c, prefix)
		cs[i] = c
	}
	return cs
}

func disconnectAll(cs []paho.Client) {
	for _, c := range cs {
		c.Disconnect(0)
	}
}

// TestCommandCrashLoop sends commands from several REST clients (each
// with a seq_no, kept with the body through every retry) to devices that
// acknowledge each within 20 ms and then answer it at once (forgetting
// it when the connection closed first), kills the server with SIGKILL at
// random moments and restarts it on the same data dir. At the end, with
// every client's unanswered sends retried and the devices online, it
// counts:
//   - lost: a cmd_id answered 200 that the server does not know, or
//     that never ends (its device answers every command it
//     acknowledges, and gets again every one it does not). A
//     200 that said the command was rejected with its device's queue
//     full (3004: the devices' answers fell behind the clients) must
//     stay so, and such rejections must stay under half of the
//     sends;
//   - phantom: a cmd_id a device got that the server does not know
//     (a state a crash took back), or got with two different requests;
//   - duplicated: one request known under two cmd_ids, or one command
//     sent twice on one connection;
//   - answers lost: an answer the server PUBACKed that the command
//     does not hold.
//
// All must be 0. DEVMSG_CRASH_CYCLES sets the cycles (default 20).
func TestCommandCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	cycles := envInt(t, envCrashCycles, 20)
	// The clients send as fast as the server takes commands, and each
	// device answers at most 200 a second (the broker's answer rate):
	// enough devices that their answers keep up, so the queues fill only
	// when a crash holds answers back.
	clients, devices := 8, 32

	dir := t.TempDir()
	args := []string{"--mqtt.tcp_addr", "127.0.0.1:0"}
	p := startProc(t, dir, args...)
	app := p.createApp(t, "cmdcrash")
	names, secrets := createDevices(t, p, app, "cmdcrash-", devices)

	f := newCmdCrashFleet(t, app, names, secrets, clients)
	l := f.l
	send := func(p *proc, r *crashReq) bool { return f.send(p, r, 0) }
	pending := make([][]*crashReq, clients)
	var totalSends, retries int
	for cycle := range cycles {
		if cycle > 0 {
			p = startProc(t, dir, args...)
		}
		devs := f.connect(p)
		s, r := crashClients(t, p, pending, send, f.next)
		totalSends += s
		retries += r
		disconnectAll(devs)
		if t.Failed() {
			return
		}
	}

	p = startProc(t, dir, args...)
	devs := f.connect(p)
	defer disconnectAll(devs)
	retries += retryPending(t, p, pending, send, func(r *crashReq) string { return r.body })

	lost, phantom, duplicated, answersLost := l.check(t, p, app)
	t.Logf("%d cycles, %d clients, %d devices: %d sends, %d retries; lost %d, phantom %d, duplicated %d, answers lost %d",
		cycles, clients, devices, totalSends, retries, len(lost), len(phantom), len(duplicated), len(answersLost))
	reportProblems(t, lost, phantom, duplicated, answersLost)
}

// check asks the restarted server about each cmd_id the ledger holds,
// waiting for it to end, and lists what the crashes broke.
func (l *cmdCrashLedger) check(t *testing.T, p *proc, app testApp) (lost, phantom, duplicated, answersLost []string) {
	state := map[int64]cmdView{}
	// Each GET waits up to 5 s for its command to end, until ten have
	// not: then the check is failing, and the others are read at once
	// (a command still open then is listed as lost).
	wait, open := 5, 0
	get := func(id int64) (cmdView, bool) {
		if v, ok := state[id]; ok {
			return v, v.CmdID != 0
		}
		st, b := p.call(t, app.Key, app.MasterSecret, "GET", fmt.Sprintf("/cmd/v1/cmd?cmd_id=%d&wait=%d", id, wait), "")
		var v cmdView
		if st == 200 {
			_ = json.Unmarshal(b, &v)
		} else if st != 400 {
			t.Fatalf("GET command %d: %d %s", id, st, b)
		}
		if v.CmdID != 0 && v.TimeDone == 0 {
			if open++; open == 10 {
				t.Logf("ten commands have not ended: the other commands are read without waiting")
				wait = 0
			}
		}
		state[id] = v
		return v, v.CmdID != 0
	}
	l.mu.Lock()
	answered := maps.Clone(l.answered)
	full := maps.Clone(l.full)
	received := map[int64]map[string]bool{}
	for id, tags := range l.received {
		received[id] = maps.Clone(tags)
	}
	l.mu.Unlock()
	for tag, ids := range answered {
		for id := range ids {
			v, ok := get(id)
			if e := lostAnswered(tag, id, v, ok, full[id]); e != "" {
				lost = append(lost, e)
			}
		}
	}
	under := map[string]map[int64]bool{}
	for tag, ids := range answered {
		under[tag] = map[int64]bool{}
		for id := range ids {
			under[tag][id] = true
		}
	}
	for id, tags := range received {
		if _, ok := get(id); !ok {
			phantom = append(phantom, fmt.Sprintf("cmd_id %d reached a device, not found", id))
		}
		if len(tags) > 1 {
			phantom = append(phantom, fmt.Sprintf("cmd_id %d reached a device with %d requests", id, len(tags)))
		}
		for tag := range tags {
			if under[tag] == nil {
				under[tag] = map[int64]bool{}
			}
			under[tag][id] = true
		}
	}
	for tag, ids := range under {
		if len(ids) > 1 {
			duplicated = append(duplicated, fmt.Sprintf("%s under %d cmd_ids", tag, len(ids)))
		}
	}
	l.mu.Lock()
	duplicated = append(duplicated, l.twice...)
	for id, tag := range l.acked {
		if v, ok := get(id); !ok || v.State != "succeeded" || string(v.Result) != strconv.Quote(tag) {
			answersLost = append(answersLost, fmt.Sprintf("cmd_id %d: answer %s PUBACKed, command now %+v", id, tag, v))
		}
	}
	t.Logf("%d cmd_ids received, %d answers PUBACKed, %d rejected with a full queue", len(received), len(l.acked), len(full))
	lost = append(lost, tooFull(answered, full)...)
	l.mu.Unlock()
	return lost, phantom, duplicated, answersLost
}

// lostAnswered describes command id, answered 200 for tag and now v
// (found: ok), if it is lost: not found, not ended with its device's
// answer, or, when its 200 said queue full, no longer rejected.
func lostAnswered(tag string, id int64, v cmdView, ok, full bool) string {
	switch {
	case !ok:
		return fmt.Sprintf("%s: cmd_id %d answered 200, not found", tag, id)
	case full && v.State != "rejected":
		return fmt.Sprintf("%s: cmd_id %d answered 200 rejected (queue full), now %s", tag, id, v.State)
	case !full && (v.State != "succeeded" || string(v.Result) != strconv.Quote(tag)):
		return fmt.Sprintf("%s: cmd_id %d answered 200, now %s with %s", tag, id, v.State, v.Result)
	}
	return ""
}

// tooFull reports, as lost, rejections with a full queue (full) of more
// than half the commands answered 200: the devices answer every command,
// so a server refusing that many refuses wrongly.
func tooFull(answered map[string]map[int64]bool, full map[int64]bool) []string {
	sent := 0
	for _, ids := range answered {
		sent += len(ids)
	}
	if len(full) > sent/2 {
		return []string{fmt.Sprintf("%d of %d commands rejected with a full queue: the devices answer them all", len(full), sent)}
	}
	return nil
}

// connectCmdCrashDevice connects a device subscribed to cmd, handing
// each command to h.
func connectCmdCrashDevice(t *testing.T, addr, appKey, device, secret string, h func(paho.Message)) paho.Client {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker("tcp://" + addr).
		SetClientID(appKey + "/" + device).SetUsername(appKey + "/" + device).SetPassword(secret).
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(false)
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", device, tok.Error())
	}
	topic := "d/" + appKey + "/" + device + "/cmd"
	if tok := c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) { h(m) }); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", topic, tok.Error())
	}
	return c
}
