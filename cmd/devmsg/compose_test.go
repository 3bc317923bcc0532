package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestCompose runs the repository's docker-compose.yml (three nodes,
// Redis with appendfsync always, HAProxy) on the Docker engine and uses
// it as a user would, only through HAProxy's published ports: devices
// over MQTT, sends over HTTPS, callbacks and an event webhook to
// receivers on the Docker host, the console in headless Chromium. Then
// it breaks it, under load, one fault at a time:
//   - docker kill of a node holding devices;
//   - a node cut off from the network (so from Redis) past the heartbeat
//     TTL, then put back;
//   - docker restart of Redis;
//   - compose down, then up.
//
// Every send is retried with its seq_no and body until answered 200. At
// the end the checker counts lost (a 200 whose message is unknown or
// never reached its device), phantom (a delivered msgid unknown, or with
// two bodies) and duplicated (one send under two msgids); all must be 0.
// The fault figures (takeover, fencing, recovery) are logged; see
// docs/operations.md, "Failure behaviour in docker-compose".
func TestCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images and runs a docker-compose stack")
	}
	s := newComposeStack(t)
	t.Logf("compose up: healthy in %.1fs", s.up().Seconds())

	app := s.createApp("compose")
	cb := newReceiverAt(t, s.hostIP+":0")
	hooks := newEventReceiverAt(t, s.hostIP+":0")
	hostURL := func(u string) string {
		return strings.Replace(u, s.hostIP, "host.docker.internal", 1)
	}
	s.ok("", "", "POST", "/admin/v1/apps/"+app.Key+"/callback/urls", fmt.Sprintf(`{"url":%q}`, hostURL(cb.url("/cb"))))
	s.ok("", "", "PUT", "/admin/v1/apps/"+app.Key+"/callback", `{"enabled":true,"types":[4]}`)
	s.ok("", "", "POST", "/admin/v1/apps/"+app.Key+"/events/webhooks",
		fmt.Sprintf(`{"url":%q,"types":["device.created"]}`, hostURL(hooks.url("/events"))))

	const n = 12
	names, secrets := s.createDevices(app, "cdev-", n)
	want := append([]string(nil), names...)
	hooks.waitDevices(want...)

	l := &composeLedger{crashLedger: newCrashLedger(), answeredAt: map[int64]time.Time{}, receivedAt: map[int64]time.Time{}}
	fleet := newComposeFleet(t, s, app, names, secrets, l)
	fleet.connectAll()
	ld := newComposeLoad(t, s, app, names, l)

	// Through HAProxy: every device gets what is sent to it, and the
	// console shows it online.
	ld.run(2*time.Second, 4)
	fleet.waitDelivered(30 * time.Second)
	composeConsole(t, s, app, names[0])

	composeKillNode(t, s, fleet, ld)
	composePartitionNode(t, s, fleet, ld)
	composeRestartRedis(t, s, fleet, ld)
	composeDownUp(t, s, app, fleet, ld)

	// Every delivery has its callback, whichever node ran the callback
	// worker through the faults.
	waitFor(t, 90*time.Second, "a delivery callback of every acknowledged message", func() bool {
		seen := map[string]bool{}
		for _, r := range cb.records() {
			if r.Type == 4 {
				seen[r.MsgID] = true
			}
		}
		for _, id := range l.answeredIDs() {
			if !seen[strconv.FormatInt(id, 10)] {
				return false
			}
		}
		return true
	})

	exists := s.msgExists(app)
	undelivered := l.undelivered()
	l.mu.Lock()
	defer l.mu.Unlock()
	lost, phantom, duplicated := l.lost(exists, undelivered), l.phantoms(exists), l.duplicated()
	t.Logf("%d sends answered, %d msgids delivered, %d callbacks; lost %d, phantom %d, duplicated under two ids %d",
		len(l.answered), len(l.received), len(cb.records()), len(lost), len(phantom), len(duplicated))
	reportProblems(t, lost, phantom, duplicated)
}

// createApp creates an app through HAProxy.
func (s *composeStack) createApp(name string) testApp {
	s.t.Helper()
	var app testApp
	if err := json.Unmarshal(s.ok("", "", "POST", "/admin/v1/apps", fmt.Sprintf(`{"name":%q}`, name)), &app); err != nil || app.Key == "" {
		s.t.Fatalf("create app: %v", err)
	}
	return app
}

// createDevices creates n devices named prefix0, prefix1, ... and returns
// their names and secrets.
func (s *composeStack) createDevices(app testApp, prefix string, n int) (names, secrets []string) {
	s.t.Helper()
	var req []string
	for i := range n {
		names = append(names, fmt.Sprint(prefix, i))
		req = append(req, fmt.Sprintf(`{"name":%q}`, names[i]))
	}
	var r struct {
		Resp []struct {
			DeviceSecret string `json:"device_secret"`
		}
	}
	b := s.ok(app.Key, app.MasterSecret, "POST", "/device/v1/devices", `{"device":[`+strings.Join(req, ",")+`]}`)
	if err := json.Unmarshal(b, &r); err != nil || len(r.Resp) != n {
		s.t.Fatalf("create devices: %v %s", err, b)
	}
	for _, d := range r.Resp {
		secrets = append(secrets, d.DeviceSecret)
	}
	return names, secrets
}

// msgExists asks, once per msgid, whether GET /msg/v1/msg knows it.
func (s *composeStack) msgExists(app testApp) func(int64) bool {
	known := map[int64]bool{}
	return func(id int64) bool {
		if v, ok := known[id]; ok {
			return v
		}
		st, b, err := s.call(app.Key, app.MasterSecret, "GET", fmt.Sprintf("/msg/v1/msg?msgid=%d", id), "")
		if err != nil || st != http.StatusOK && st != http.StatusBadRequest {
			s.t.Fatalf("GET message %d: %d %s %v", id, st, b, err)
		}
		known[id] = st == http.StatusOK
		return known[id]
	}
}

// status is a device's status (1 online) through HAProxy, or -1.
func (s *composeStack) status(app testApp, device string) int {
	st, b, err := s.call(app.Key, app.MasterSecret, "GET", "/device/v1/status?device_name="+device, "")
	var r struct{ Status int }
	if err != nil || st != http.StatusOK || json.Unmarshal(b, &r) != nil {
		return -1
	}
	return r.Status
}

// composeConsole signs in to the console on HAProxy's console port and
// finds a device online there.
func composeConsole(t *testing.T, s *composeStack, app testApp, device string) {
	t.Helper()
	b := newBrowser(t, s.url("CONSOLE", ""))
	b.open("/console/login")
	b.fill(map[string]string{"#login-admin-username": "admin", "#login-admin-password": s.adminPW}, "#login-admin-submit")
	if who := b.text("#whoami"); !strings.Contains(who, "admin") {
		t.Fatalf("console: signed in as %q, want admin", who)
	}
	b.waitText("/console/apps/"+app.Key+"/devices/"+device, "online", 15*time.Second)
}

// composeLedger is the crash checkers' ledger with the times of each
// answer and first delivery.
type composeLedger struct {
	*crashLedger
	answeredAt map[int64]time.Time
	receivedAt map[int64]time.Time
}

func (l *composeLedger) answerAt(t *testing.T, r *crashReq, msgid int64) {
	l.answer(t, r, msgid)
	l.mu.Lock()
	l.answeredAt[msgid] = time.Now()
	l.mu.Unlock()
}

func (l *composeLedger) receiveAt(device string, m paho.Message) {
	l.receive(device, m)
	var p struct {
		MsgID string `json:"msgid"`
	}
	if json.Unmarshal(m.Payload(), &p) != nil {
		return
	}
	id, _ := strconv.ParseInt(p.MsgID, 10, 64)
	l.mu.Lock()
	if _, ok := l.receivedAt[id]; !ok {
		l.receivedAt[id] = time.Now()
	}
	l.mu.Unlock()
}

func (l *composeLedger) answeredIDs() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []int64
	for id := range l.answeredAt {
		ids = append(ids, id)
	}
	return ids
}

// slowest is the longest wait from a 200 to the delivery among messages
// answered in [from, to).
func (l *composeLedger) slowest(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var worst time.Duration
	for id, at := range l.answeredAt {
		if at.Before(from) || !at.Before(to) {
			continue
		}
		if got, ok := l.receivedAt[id]; ok && got.Sub(at) > worst {
			worst = got.Sub(at)
		}
	}
	return worst
}

// composeFleet is the devices, each a paho client connected through
// HAProxy that reconnects by itself, as a device in the field does.
type composeFleet struct {
	t       *testing.T
	s       *composeStack
	app     testApp
	names   []string
	secrets []string
	l       *composeLedger

	mu      sync.Mutex
	clients map[string]paho.Client
	lostAt  map[string]time.Time // the last loss of each device's connection
	backAt  map[string]time.Time // the last (re)connection
}

func newComposeFleet(t *testing.T, s *composeStack, app testApp, names, secrets []string, l *composeLedger) *composeFleet {
	f := &composeFleet{t: t, s: s, app: app, names: names, secrets: secrets, l: l,
		clients: map[string]paho.Client{}, lostAt: map[string]time.Time{}, backAt: map[string]time.Time{}}
	t.Cleanup(f.disconnectAll)
	return f
}

// connect connects a device through HAProxy. It reconnects after a loss,
// subscribing again each time (clean sessions: devmsg's queue, not the
// MQTT session, holds what is pending).
func (f *composeFleet) connect(i int) {
	f.t.Helper()
	name := f.names[i]
	user := f.app.Key + "/" + name
	topic := "d/" + f.app.Key + "/" + name + "/msg"
	opts := paho.NewClientOptions().AddBroker("tcp://" + f.s.mqttAddr()).SetClientID(user).SetUsername(user).
		SetPassword(f.secrets[i]).SetCleanSession(true).SetOrderMatters(false).
		SetKeepAlive(4 * time.Second).SetPingTimeout(3 * time.Second).SetConnectTimeout(5 * time.Second).
		SetAutoReconnect(true).SetMaxReconnectInterval(time.Second).SetConnectRetry(true).SetConnectRetryInterval(time.Second)
	opts.SetOnConnectHandler(func(c paho.Client) {
		c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) { f.l.receiveAt(name, m) })
		f.mu.Lock()
		f.backAt[name] = time.Now()
		f.mu.Unlock()
	})
	opts.SetConnectionLostHandler(func(paho.Client, error) {
		f.mu.Lock()
		f.lostAt[name] = time.Now()
		f.mu.Unlock()
	})
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		f.t.Fatalf("connect %s through HAProxy: %v", name, tok.Error())
	}
	f.mu.Lock()
	f.clients[name] = c
	f.mu.Unlock()
}

func (f *composeFleet) connectAll() {
	for i := range f.names {
		f.connect(i)
	}
	for _, name := range f.names {
		waitFor(f.t, 20*time.Second, name+" online", func() bool { return f.s.status(f.app, name) == 1 })
	}
}

func (f *composeFleet) disconnect(name string) {
	f.mu.Lock()
	c := f.clients[name]
	delete(f.clients, name)
	f.mu.Unlock()
	if c != nil {
		c.Disconnect(100)
	}
}

func (f *composeFleet) disconnectAll() {
	for _, name := range f.names {
		f.disconnect(name)
	}
}

// lostSince lists the devices whose connection was lost after at, with
// the time the last of them was back.
func (f *composeFleet) lostSince(at time.Time) (names []string, lastBack time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, lost := range f.lostAt {
		if lost.After(at) {
			names = append(names, name)
			if b := f.backAt[name]; b.After(lastBack) {
				lastBack = b
			}
		}
	}
	return names, lastBack
}

// waitDelivered waits until every send answered 200 reached its device.
func (f *composeFleet) waitDelivered(within time.Duration) {
	f.t.Helper()
	if left := f.l.waitDelivered(within); len(left) > 0 {
		f.t.Fatalf("%d messages answered 200 not delivered within %s, e.g. %d", len(left), within, left[0])
	}
}
