package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
	"github.com/devmsg/devmsg/store/storetest"
)

// TestConformance runs the suite every backend passes. The other suites
// of storetest do not apply: RunReopenTests needs data that outlives a
// closed store, and RunBarrierTests a store that can lose unsynced writes
// in a crash; this one keeps nothing after Close and has no unsynced
// state (a write is visible only once applied). TestBarrier checks what
// Barrier still promises here.
func TestConformance(t *testing.T) {
	storetest.RunTests(t, func(t *testing.T) store.Store { return memory.New() })
}

// TestCopies checks that callers never share memory with the store: what
// they pass in or get back can be changed without changing what is stored.
func TestCopies(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	app := store.App{Key: "a", RateLimits: map[string]int{store.CategoryMessage: 5}, Callback: store.CallbackSettings{Types: []int{1}}}
	if err := s.CreateApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	app.RateLimits[store.CategoryMessage] = 99
	app.Callback.Types[0] = 99
	got, err := s.GetApp(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	got.RateLimits[store.CategoryMessage] = 98
	got.Callback.Types[0] = 98
	if again, _ := s.GetApp(ctx, "a"); again.RateLimits[store.CategoryMessage] != 5 || again.Callback.Types[0] != 1 {
		t.Errorf("app changed through a caller's copy: %+v", again)
	}

	if _, err := s.CreateDevices(ctx, "a", []store.Device{{Name: "d"}}); err != nil {
		t.Fatal(err)
	}
	sh, err := s.SetDesired(ctx, store.DesiredUpdate{AppKey: "a", DeviceName: "d", Version: 1, Properties: map[string]json.RawMessage{"p": json.RawMessage("1")}}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	sh.Properties["p"].DesiredValue[0] = '7'
	sh.Properties["q"] = store.Property{}
	if again, _ := s.GetShadow(ctx, "a", "d"); string(again.Properties["p"].DesiredValue) != "1" || len(again.Properties) != 1 {
		t.Errorf("shadow changed through a caller's copy: %+v", again)
	}

	m := store.Message{ID: 1, AppKey: "a", DeviceName: "d", State: store.StatePending, Params: json.RawMessage(`{"k":1}`), Records: []store.Record{{Type: store.RecordTargetValid}}}
	if err := s.CreateMessage(ctx, m, 0, nil); err != nil {
		t.Fatal(err)
	}
	m.Records[0].Type = 9
	m.Params[1] = 'x'
	msgs, err := s.PendingMessages(ctx, "a", "d", 10)
	if err != nil {
		t.Fatal(err)
	}
	msgs[0].Records[0].Type = 8
	if again, _ := s.GetMessage(ctx, "a", 1); again.Records[0].Type != store.RecordTargetValid || string(again.Params) != `{"k":1}` {
		t.Errorf("message changed through a caller's copy: %+v", again)
	}
	heads, err := s.ReadOutbox(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	q := store.CallbackQueue{AppKey: "a", URL: "http://cb.example/"}
	if err := s.RouteOutbox(ctx, []store.OutboxRoute{{Entry: heads[0], URL: q.URL}}); err != nil {
		t.Fatal(err)
	}
	out, err := s.ReadCallbacks(ctx, q, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	out[0].Record.Params[1] = 'y'
	if again, _ := s.ReadCallbacks(ctx, q, 0, 10); string(again[0].Record.Params) != `{"k":1}` {
		t.Errorf("queued entry changed through a caller's copy: %+v", again[0])
	}

	v := []byte("v")
	if err := s.PutMeta(ctx, "k", v); err != nil {
		t.Fatal(err)
	}
	v[0] = 'x'
	if again, _ := s.GetMeta(ctx, "k"); string(again) != "v" {
		t.Errorf("meta changed through a caller's copy: %q", again)
	}
}

// TestBarrier: with nothing unsynced, Barrier only honours its context.
func TestBarrier(t *testing.T) {
	s := memory.New()
	if err := s.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Barrier(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Barrier with a cancelled context: %v, want context.Canceled", err)
	}
}

// TestClose: every call after Close fails with ErrClosed.
func TestClose(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	if err := s.CreateApp(ctx, store.App{Key: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetApp(ctx, "a"); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("GetApp after Close: %v, want ErrClosed", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("Ping after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCloseWakesWaiters: a WaitEvents blocked when the store closes
// returns, rather than wait out its context.
func TestCloseWakesWaiters(t *testing.T) {
	s := memory.New()
	done := make(chan error, 1)
	go func() { done <- s.WaitEvents(context.Background(), "a", 0) }()
	time.Sleep(20 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter still waits after Close")
	}
}
