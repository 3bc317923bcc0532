package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// appended returns devmsg_events_appended_total by type.
func appended(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "devmsg_events_appended_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestCountedStore counts what each kind of write appends, and only what
// it stored: the count by type equals the log's content by type.
func TestCountedStore(t *testing.T) {
	ctx := context.Background()
	const app = "app-1"
	mem := memory.New()
	st := events.Counted(mem)
	reg := prometheus.NewRegistry()
	reg.MustRegister(st.Collector())
	now := time.Now()
	ev := func(typ, dev string) store.Event { return events.New(typ, app, dev, now, nil) }
	dev := func(name string) store.Device {
		return store.Device{AppKey: app, Name: name, Emit: []store.Event{ev(events.TypeCreated, name)}}
	}
	errNo := errors.New("refused")

	steps := []func() error{
		func() error {
			_, err := st.AppendEvents(ctx, []store.Event{ev(events.TypeUp, "dev-0001"), ev(events.TypeUp, "dev-0002")})
			return err
		},
		func() error {
			_, err := st.CreateDevices(ctx, app, []store.Device{dev("dev-0001"), dev("dev-0002")})
			return err
		},
		// A taken name is not created, and its event not appended.
		func() error {
			_, err := st.CreateDevices(ctx, app, []store.Device{dev("dev-0001"), dev("dev-0003")})
			return err
		},
		func() error {
			_, err := st.UpdateDevice(ctx, app, "dev-0001", func(d *store.Device) error {
				d.Status, d.Node = 1, 1
				d.Emit = []store.Event{ev(events.TypeOnline, "dev-0001")}
				return nil
			})
			return err
		},
		// fn refuses: nothing stored, nothing counted.
		func() error {
			_, err := st.UpdateDevice(ctx, app, "dev-0002", func(d *store.Device) error {
				d.Emit = []store.Event{ev(events.TypeDisabled, "dev-0002")}
				return errNo
			})
			if !errors.Is(err, errNo) {
				return errors.New("update did not fail")
			}
			return nil
		},
		func() error {
			_, err := st.ReportProperties(ctx, store.Report{AppKey: app, DeviceName: "dev-0002", Time: 1,
				Properties: map[string]json.RawMessage{"temp": json.RawMessage("21")},
				Emit:       func(store.Shadow) []store.Event { return []store.Event{ev(events.TypeReported, "dev-0002")} }})
			return err
		},
		func() error {
			_, err := st.ResetPresence(ctx, store.AllNodes, math.MaxInt64, now.Unix(), func(d store.Device) []store.Event {
				return []store.Event{ev(events.TypeOffline, d.Name)}
			})
			return err
		},
		func() error { return st.DeleteDevice(ctx, app, "dev-0003", ev(events.TypeDeleted, "dev-0003")) },
		// No such device: nothing counted.
		func() error {
			if err := st.DeleteDevice(ctx, app, "dev-0009", ev(events.TypeDeleted, "dev-0009")); err == nil {
				return errors.New("delete of a missing device succeeded")
			}
			return nil
		},
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	p, err := mem.ReadEvents(ctx, store.EventQuery{AppKey: app, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	inLog := map[string]float64{}
	for _, e := range p.Events {
		inLog[e.Type]++
	}
	got := appended(t, reg)
	for _, typ := range events.Types { // every type is exported, at 0 until its first event
		if _, ok := got[typ]; !ok {
			t.Errorf("type %s not exported", typ)
		}
		if got[typ] == 0 {
			delete(got, typ)
		}
	}
	if !maps.Equal(got, inLog) {
		t.Errorf("counted %v, the log holds %v", got, inLog)
	}
	want := map[string]float64{events.TypeUp: 2, events.TypeCreated: 3, events.TypeOnline: 1,
		events.TypeReported: 1, events.TypeOffline: 1, events.TypeDeleted: 1}
	if !maps.Equal(got, want) {
		t.Errorf("counted %v, want %v", got, want)
	}
}
