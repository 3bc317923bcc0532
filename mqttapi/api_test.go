package mqttapi_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/devmsg/devmsg/broker"
	"github.com/devmsg/devmsg/delivery"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/mqttapi"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/pebble"
)

const (
	appKey = "gw-app"
	secret = "device-secret-0123456789abcdefgh"
)

// world is an MQTT API with its dispatcher and a real broker on a loopback
// port, over Pebble in a temp dir.
type world struct {
	t        *testing.T
	st       store.Store
	gw       *mqttapi.API
	dispatch *delivery.Dispatcher
	msgs     *message.Service
	events   *events.Service
	broker   *broker.Broker
	logs     *lockedBuffer // what the MQTT API and broker log
	mqtt     string        // the broker's TCP address
}

func newWorld(t *testing.T) *world {
	t.Helper()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return newWorldOn(t, st)
}

// newWorldOn is newWorld over st, which it closes at the end of the test.
func newWorldOn(t *testing.T, st store.Store) *world {
	t.Helper()
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	t.Cleanup(func() { st.Close() })
	d := delivery.NewDispatcher(st, log)
	ev := events.NewService(st)
	gw := mqttapi.New(st, d, shadow.NewSync(st, log), ev, log)
	b := broker.New(broker.Config{TCPAddr: "127.0.0.1:0", ServiceTopics: mqttapi.ServiceTopics}, gw, log)
	gw.SetBroker(b)
	addrs, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // before the store closes
	ids, err := idgen.New(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateApp(context.Background(), store.App{Key: appKey, Name: "gateway test"}); err != nil {
		t.Fatal(err)
	}
	return &world{t: t, st: st, gw: gw, dispatch: d, events: ev, broker: b, logs: logs, msgs: message.NewService(st, ids, gw), mqtt: addrs["tcp"]}
}

// lockedBuffer is a log the test reads while the server writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (w *world) createDevice(name string) store.Device {
	w.t.Helper()
	d := store.Device{AppKey: appKey, Name: name, Secret: secret, TimeCreate: time.Now().Unix()}
	errs, err := w.st.CreateDevices(context.Background(), appKey, []store.Device{d})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return d
}

// device is a connected MQTT client that never acknowledges a message.
type device struct {
	c    paho.Client
	got  chan paho.Message
	lost chan error
}

func (w *world) connect(name string) (*device, error) {
	d := &device{got: make(chan paho.Message, 10), lost: make(chan error, 1)}
	opts := paho.NewClientOptions().AddBroker("tcp://" + w.mqtt).SetClientID(name).
		SetUsername(appKey + "/" + name).SetPassword(secret).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectRetry(false).SetAutoAckDisabled(true).
		SetProtocolVersion(4).SetConnectTimeout(5 * time.Second).
		SetConnectionLostHandler(func(_ paho.Client, err error) { d.lost <- err })
	d.c = paho.NewClient(opts)
	tok := d.c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, errors.New("connect timed out")
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	w.t.Cleanup(func() { d.c.Disconnect(0) })
	return d, nil
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestDeleted runs the MQTT API's part of a device deletion (docs/api.md,
// "Delete a device") on a connected device with a message in flight:
// disabled first, then Deleted, then the store's delete.
func TestDeleted(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	dev := w.createDevice("dev-del")
	other := w.createDevice("dev-other")
	d := w.subscribed(t, dev.Name)
	inFlight := w.send(t, dev) // sent to the device, never acknowledged
	select {
	case <-d.got:
	case <-time.After(5 * time.Second):
		t.Fatal("the message never reached the device")
	}
	queued := w.send(t, other) // another device's, which is offline

	if _, err := w.st.UpdateDevice(ctx, appKey, dev.Name, func(d *store.Device) error { d.Flag = store.FlagDisabled; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := w.gw.Deleted(ctx, appKey, dev.Name); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.lost:
	case <-time.After(5 * time.Second):
		t.Fatal("a deleted device stayed connected")
	}
	w.wantFailedDeleted(t, inFlight.ID)
	if err := w.st.DeleteDevice(ctx, appKey, dev.Name); err != nil {
		t.Fatal(err)
	}
	w.wantGone(t, dev.Name)
	// The other device's message is untouched.
	if p, err := w.st.PendingMessages(ctx, appKey, other.Name, 10); err != nil || len(p) != 1 || p[0].ID != queued.ID {
		t.Fatalf("other device's queue: %+v %v", p, err)
	}
	w.wantRecreatedFresh(t, dev.Name)
}

// subscribed connects the device and subscribes it to its msg topic.
func (w *world) subscribed(t *testing.T, name string) *device {
	t.Helper()
	d, err := w.connect(name)
	if err != nil {
		t.Fatal(err)
	}
	if tok := d.c.Subscribe("d/"+appKey+"/"+name+"/msg", 1, func(_ paho.Client, m paho.Message) { d.got <- m }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return d
}

// send sends the device a message through the message service.
func (w *world) send(t *testing.T, to store.Device) store.Message {
	t.Helper()
	m, err := w.msgs.Send(context.Background(), store.App{Key: appKey}, to, message.SendRequest{Body: "hello", TTL: 600}, 0, func(int64) *store.SeqEntry { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// wantFailedDeleted checks that message id, in flight to a device being
// deleted, ended failed with the device-deleted error.
func (w *world) wantFailedDeleted(t *testing.T, id int64) {
	t.Helper()
	m, err := w.st.GetMessage(context.Background(), appKey, id)
	if err != nil {
		t.Fatal(err)
	}
	last := m.Records[len(m.Records)-1]
	if m.State != store.StateFailed || last.Type != store.RecordDeliveryFailure || last.Error == nil ||
		last.Error.Code != message.ErrCodeDeviceDeleted || last.Error.Message != "device deleted" {
		t.Fatalf("message in flight to a deleted device: %+v, last record %+v", m, last)
	}
}

// wantGone checks that a deleted device's session ended and that it can
// neither connect nor authenticate.
func (w *world) wantGone(t *testing.T, name string) {
	t.Helper()
	waitFor(t, "the session to end", func() bool { return !w.dispatch.Online(appKey, name) })
	if _, err := w.connect(name); !errors.Is(err, packets.ErrorRefusedNotAuthorised) {
		t.Fatalf("a deleted device connected: %v", err)
	}
	if err := w.gw.Authenticate(appKey, name, secret); !errors.Is(err, broker.ErrNotAuthorized) {
		t.Fatalf("Authenticate of a deleted device: %v", err)
	}
}

// wantRecreatedFresh creates the deleted device's name again: it is a new
// device, which connects, and nothing of the old one's is delivered to it.
func (w *world) wantRecreatedFresh(t *testing.T, name string) {
	t.Helper()
	w.createDevice(name)
	d, err := w.connect(name)
	if err != nil {
		t.Fatalf("re-created device: %v", err)
	}
	if tok := d.c.Subscribe("d/"+appKey+"/"+name+"/msg", 1, func(_ paho.Client, m paho.Message) { d.got <- m }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	recreated, err := w.st.GetDevice(context.Background(), appKey, name)
	if err != nil {
		t.Fatal(err)
	}
	fresh := w.send(t, recreated)
	select {
	case m := <-d.got:
		if want := `"msgid":"` + strconv.FormatInt(fresh.ID, 10) + `"`; !strings.Contains(string(m.Payload()), want) {
			t.Fatalf("the re-created device got %s, want its own message %d", m.Payload(), fresh.ID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the re-created device got no message")
	}
}
