package presence_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/presence"
	"github.com/devmsg/devmsg/store"
)

var t0 = time.Unix(1_700_000_000, 0)

func conn(node int, id string) presence.Conn {
	return presence.Conn{AppKey: "app", Device: "dev", Node: node, ID: id, ClientIP: "192.0.2.1",
		ProtocolVersion: 5, Transport: "tcp", Since: t0}
}

func offline(t *testing.T, e store.Event) events.Offline {
	t.Helper()
	if e.Type != events.TypeOffline {
		t.Fatalf("event %s, want %s", e.Type, events.TypeOffline)
	}
	var off events.Offline
	if err := json.Unmarshal(e.Data, &off); err != nil {
		t.Fatal(err)
	}
	return off
}

func TestLoginOfAnOfflineDevice(t *testing.T) {
	var tr presence.Tracker
	d := store.Device{AppKey: "app", Name: "dev"}
	prev, err := tr.Login(&d, conn(1, "c1"), t0)
	if err != nil || prev.Status != 0 {
		t.Fatalf("Login: prev %+v, %v", prev, err)
	}
	if d.Status != 1 || d.Node != 1 || d.Conn != "c1" || d.ClientIP != "192.0.2.1" || d.LastLoginTime != t0.Unix() || d.TimeActive != t0.Unix() {
		t.Fatalf("entry %+v", d)
	}
	if len(d.Emit) != 1 || d.Emit[0].Type != events.TypeOnline {
		t.Fatalf("emitted %+v, want one device.online", d.Emit)
	}
	var on events.Online
	if err := json.Unmarshal(d.Emit[0].Data, &on); err != nil || on != (events.Online{ClientIP: "192.0.2.1", Protocol: "5", Transport: "tcp"}) {
		t.Fatalf("online %+v %v", on, err)
	}
}

func TestLoginTakesOver(t *testing.T) {
	var tr presence.Tracker
	d := store.Device{AppKey: "app", Name: "dev"}
	if _, err := tr.Login(&d, conn(1, "c1"), t0); err != nil {
		t.Fatal(err)
	}
	d.Emit = nil
	c2 := conn(2, "c2")
	c2.ProtocolVersion = 4
	prev, err := tr.Login(&d, c2, t0.Add(1500*time.Millisecond))
	if err != nil || prev.Conn != "c1" {
		t.Fatalf("Login: prev %+v, %v", prev, err)
	}
	if d.Node != 2 || d.Conn != "c2" || d.TimeActive != t0.Unix() {
		t.Fatalf("entry %+v", d)
	}
	if len(d.Emit) != 2 || d.Emit[1].Type != events.TypeOnline {
		t.Fatalf("emitted %+v, want the takeover's offline, then the online", d.Emit)
	}
	if off := offline(t, d.Emit[0]); off.Reason != events.ReasonTakeover || off.OnlineMS != 1500 {
		t.Fatalf("offline %+v, want takeover after 1500 ms", off)
	}
}

func TestLoginRefusals(t *testing.T) {
	var tr presence.Tracker
	d := store.Device{Flag: store.FlagDisabled}
	if _, err := tr.Login(&d, conn(1, "c1"), t0); !errors.Is(err, presence.ErrDisabled) {
		t.Fatalf("disabled device: %v", err)
	}
	d = store.Device{Status: 1, Node: 1, Conn: "c1"}
	if _, err := tr.Login(&d, conn(1, "c1"), t0); !errors.Is(err, presence.ErrUnchanged) {
		t.Fatalf("login already recorded: %v", err)
	}
}

func TestLogoutOnlyOfTheHoldingConnection(t *testing.T) {
	off := store.Event{Type: events.TypeOffline}
	d := store.Device{Status: 1, Node: 1, Conn: "c2"}
	if err := presence.Logout(&d, 1, "c1", 10, off); !errors.Is(err, presence.ErrUnchanged) || d.Status != 1 {
		t.Fatalf("taken-over connection: %v, entry %+v", err, d)
	}
	if err := presence.Logout(&d, 1, "c2", 10, off); err != nil || d.Status != 0 || d.LastLogoutTime != 10 || len(d.Emit) != 1 {
		t.Fatalf("holding connection: %v, entry %+v", err, d)
	}
	if err := presence.Logout(&d, 1, "c2", 11, off); !errors.Is(err, presence.ErrUnchanged) {
		t.Fatalf("already offline: %v", err)
	}
}

func TestKicked(t *testing.T) {
	var tr presence.Tracker
	d := store.Device{ClientIP: "192.0.2.1", LastLoginTime: t0.Unix()}
	if _, err := tr.Login(&d, conn(1, "c1"), t0); err != nil {
		t.Fatal(err)
	}
	held := d
	newer := d
	newer.Conn = "c9"
	if err := tr.Kicked(&newer, held, "app", "dev", t0); !errors.Is(err, presence.ErrUnchanged) {
		t.Fatalf("a newer connection: %v", err)
	}
	at := t0.Add(2 * time.Second)
	if err := tr.Kicked(&d, held, "app", "dev", at); err != nil || d.Status != 0 || d.LastLogoutTime != at.Unix() {
		t.Fatalf("Kicked: %v, entry %+v", err, d)
	}
	if off := offline(t, d.Emit[0]); off.Reason != events.ReasonKicked || off.OnlineMS != 2000 || d.Emit[0].AppKey != "app" || d.Emit[0].DeviceName != "dev" {
		t.Fatalf("offline %+v of %+v", off, d.Emit[0])
	}
}

func TestReassert(t *testing.T) {
	var tr presence.Tracker
	d := store.Device{Status: 1, Node: 1, Conn: "c1"}
	if err := tr.Reassert(&d, conn(1, "c1"), t0); !errors.Is(err, presence.ErrUnchanged) || errors.Is(err, presence.ErrHeldElsewhere) {
		t.Fatalf("still held: %v", err)
	}
	d = store.Device{Status: 1, Node: 2, Conn: "c2"}
	if err := tr.Reassert(&d, conn(1, "c1"), t0); !errors.Is(err, presence.ErrHeldElsewhere) || !errors.Is(err, presence.ErrUnchanged) {
		t.Fatalf("held by another node: %v", err)
	}
	d = store.Device{Status: 0, Node: 1, Conn: "c1", LastLoginTime: 5}
	if err := tr.Reassert(&d, conn(1, "c1"), t0); err != nil || d.Status != 1 || d.LastLoginTime != 5 {
		t.Fatalf("marked node_lost: %v, entry %+v", err, d)
	}
	if len(d.Emit) != 1 || d.Emit[0].Type != events.TypeOnline {
		t.Fatalf("emitted %+v, want one device.online", d.Emit)
	}
}

func TestOffline(t *testing.T) {
	var tr presence.Tracker
	c := conn(1, "c1")
	if off := offline(t, tr.Offline(c, events.ReasonError, t0.Add(time.Second))); off.OnlineMS != 1000 || off.Reason != events.ReasonError {
		t.Fatalf("untracked connection: %+v, want 1000 ms from Since", off)
	}
	d := store.Device{}
	if _, err := tr.Login(&d, c, t0.Add(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if off := offline(t, tr.Offline(c, events.ReasonDisconnect, t0.Add(time.Second))); off.OnlineMS != 500 {
		t.Fatalf("tracked connection: %+v, want 500 ms from its login", off)
	}
	tr.Forget(c.ID)
	if off := offline(t, tr.Offline(c, events.ReasonDisconnect, t0.Add(time.Second))); off.OnlineMS != 1000 {
		t.Fatalf("forgotten connection: %+v, want 1000 ms from Since", off)
	}
}

func TestNodeLost(t *testing.T) {
	d := store.Device{AppKey: "app", Name: "dev", ClientIP: "192.0.2.1", LastLoginTime: time.Now().Unix() - 60}
	evs := presence.NodeLost(d)
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	if off := offline(t, evs[0]); off.Reason != events.ReasonNodeLost || off.ClientIP != "192.0.2.1" || off.OnlineMS < 59_000 {
		t.Fatalf("offline %+v", off)
	}
}
