package events_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

func TestTrimmer(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	for _, key := range []string{"app-a", "app-b"} {
		if err := st.CreateApp(ctx, store.App{Key: key, Name: key, MasterSecret: "s"}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	old, fresh := now.Add(-2*time.Hour), now.Add(-time.Minute)
	var evs []store.Event
	// app-a: 2 events past retention, then 4 fresh; app-b: 3 fresh.
	for _, at := range []time.Time{old, old, fresh, fresh, fresh, fresh} {
		evs = append(evs, events.New(events.TypeUp, "app-a", "dev-0001", at, nil))
	}
	for range 3 {
		evs = append(evs, events.New(events.TypeUp, "app-b", "dev-0001", fresh, nil))
	}
	if _, err := st.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	tr, err := events.NewTrimmer(events.Config{Retention: time.Hour, MaxPerApp: 3}, st, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	n, err := tr.Trim(ctx)
	// app-a: 2 by age, then 1 beyond max_per_app; app-b: within both.
	if err != nil || n != 3 {
		t.Fatalf("trim: %d %v, want 3 deleted", n, err)
	}
	for key, want := range map[string]int{"app-a": 3, "app-b": 3} {
		p, err := st.ReadEvents(ctx, store.EventQuery{AppKey: key, Limit: 100})
		if err != nil || len(p.Events) != want {
			t.Errorf("%s keeps %d events (%v), want %d", key, len(p.Events), err, want)
		}
	}
	if a, b := trimmed(t, reg, "app-a"), trimmed(t, reg, "app-b"); a != 3 || b != 0 {
		t.Errorf("devmsg_events_trimmed_total: app-a %v, app-b %v; want 3 and 0", a, b)
	}
	if n, err := tr.Trim(ctx); err != nil || n != 0 {
		t.Errorf("second trim: %d %v, want nothing left to trim", n, err)
	}

	// Start trims at once; Stop waits for it.
	if _, err := st.AppendEvents(ctx, []store.Event{events.New(events.TypeUp, "app-b", "dev-0001", old, nil)}); err != nil {
		t.Fatal(err)
	}
	tr.Start()
	deadline := time.Now().Add(10 * time.Second)
	for trimmed(t, reg, "app-b") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Start did not trim")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tr.Stop()
	tr.Stop() // twice is harmless
}

// trimmed returns the app's devmsg_events_trimmed_total.
func trimmed(t *testing.T, reg *prometheus.Registry, app string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "devmsg_events_trimmed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == app {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
