package redis

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestFence: once the fence key holds another process's token, every
// kind of write (scripts and optimistic transactions) is refused with
// store.ErrFenced and leaves nothing behind.
func TestFence(t *testing.T) {
	requireServer(t)
	ctx := context.Background()
	s := openTest(t)
	key := s.prefix + "fence"
	if !s.SetFence(key, "mine") {
		t.Fatal("a standalone Redis does not enforce the fence")
	}
	must(t, s.rdb.Set(ctx, key, "mine", 0).Err())
	must(t, s.CreateApp(ctx, store.App{Key: "app", Name: "a"}))
	if _, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "dev"}}); err != nil {
		t.Fatal(err)
	}
	pending := func(id int64) store.Message {
		return store.Message{ID: id, AppKey: "app", DeviceName: "dev", Body: "b", TTL: 60, TimeCreate: 1, ExpireTime: 61,
			State: store.StatePending, Records: []store.Record{{Type: store.RecordSubmitSuccess, SentTime: 1}}}
	}
	must(t, s.CreateMessage(ctx, pending(1), 1, nil))
	bc := func(id int64) store.Broadcast {
		return store.Broadcast{ID: id, AppKey: "app", All: true, Body: "b", TTL: 60, TimeCreate: 1, Targets: 1, Chunks: 1, State: store.BroadcastFanningOut}
	}
	must(t, s.CreateBroadcast(ctx, bc(10), [][]string{{"dev"}}, 0, nil))

	// Another process claims the node_id.
	must(t, s.rdb.Set(ctx, key, "theirs", 0).Err())
	fenced := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrFenced) {
			t.Errorf("%s after the fence moved: %v, want ErrFenced", what, err)
		}
	}
	fenced("CreateMessage", s.CreateMessage(ctx, pending(2), 2, nil))
	_, err := s.UpdateMessage(ctx, "app", 1, func(m *store.Message) error {
		m.State = store.StateDelivered
		m.Records = append(m.Records, store.Record{Type: store.RecordDeliverySuccess, SentTime: 2})
		return nil
	})
	fenced("UpdateMessage", err)
	_, err = s.UpdateDevice(ctx, "app", "dev", func(d *store.Device) error { d.Status = 1; return nil })
	fenced("UpdateDevice", err)
	_, err = s.CreateDevices(ctx, "app", []store.Device{{Name: "dev2"}})
	fenced("CreateDevices", err)
	_, err = s.SetDesired(ctx, store.DesiredUpdate{AppKey: "app", DeviceName: "dev", Version: 1, Properties: map[string]json.RawMessage{"p": json.RawMessage("1")}}, 0, nil)
	fenced("SetDesired", err)
	_, err = s.AppendEvents(ctx, []store.Event{{AppKey: "app", Type: "device.up"}})
	fenced("AppendEvents", err)
	_, err = s.ReportProperties(ctx, store.Report{AppKey: "app", DeviceName: "dev", Emit: func(store.Shadow) []store.Event { return []store.Event{{Type: "property.reported"}} }})
	fenced("ReportProperties with Emit", err)
	_, err = s.TrimEvents(ctx, "app", 1<<62, 0)
	fenced("TrimEvents", err)
	fenced("CreateBroadcast", s.CreateBroadcast(ctx, bc(11), [][]string{{"dev"}}, 0, nil))
	if _, err := s.GetBroadcast(ctx, "app", 11); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a fenced broadcast was stored: %v", err)
	}
	if _, err := s.BroadcastTargets(ctx, "app", 11, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a fenced broadcast's targets were stored: %v", err)
	}
	_, err = s.CreateMessages(ctx, "app", nil, nil, &store.BroadcastStep{AppKey: "app", ID: 10, Done: true})
	fenced("a fan-out step", err)
	_, err = s.UpdateBroadcast(ctx, "app", 10, func(b *store.Broadcast) error { b.State = store.BroadcastCancelled; return nil })
	fenced("UpdateBroadcast", err)
	if b, err := s.GetBroadcast(ctx, "app", 10); err != nil || b.Chunk != 0 || b.State != store.BroadcastFanningOut {
		t.Errorf("a fenced step or cancel landed: %+v %v", b, err)
	}
	if names, err := s.BroadcastTargets(ctx, "app", 10, 0); err != nil || len(names) != 1 {
		t.Errorf("a fenced step or cancel deleted the targets: %v %v", names, err)
	}
	if p, err := s.ReadEvents(ctx, store.EventQuery{AppKey: "app", Limit: 10}); err != nil || len(p.Events) != 0 {
		t.Errorf("fenced writes appended events: %+v, %v", p.Events, err)
	}

	if _, err := s.GetMessage(ctx, "app", 2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a fenced message was stored: %v", err)
	}
	m, err := s.GetMessage(ctx, "app", 1)
	must(t, err)
	if m.State != store.StatePending {
		t.Errorf("a fenced update landed: state %s", m.State)
	}
	if d, err := s.GetDevice(ctx, "app", "dev"); err != nil || d.Status != 0 {
		t.Errorf("a fenced presence write landed: %+v %v", d, err)
	}
	if _, err := s.GetDevice(ctx, "app", "dev2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a fenced device was created: %v", err)
	}
}
