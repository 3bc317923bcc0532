package pebble

import (
	"encoding/json"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestCmdCacheHoldsLastWrite checks that the cache answers with the
// command as last put, and that a forgotten one is read from the store.
func TestCmdCacheHoldsLastWrite(t *testing.T) {
	var cc cmdCache
	c := store.Command{ID: 7, AppKey: "app", DeviceName: "d", Name: "reboot", State: store.CmdQueued}
	cc.put(c, 100)
	if dev, ok := cc.device(7); !ok || dev != "d" {
		t.Fatalf("device(7) = %q, %v; want d, true", dev, ok)
	}
	c.State = store.CmdSucceeded
	c.Emit = []store.Event{{Type: "command.done"}}
	cc.put(c, 100)
	got, ok := cc.get(7)
	if !ok || got.State != store.CmdSucceeded || got.Emit != nil {
		t.Fatalf("get(7) = %+v, %v; want the ended command without its events", got, ok)
	}
	cc.forget(7)
	if _, ok := cc.get(7); ok {
		t.Fatal("a forgotten command is still cached")
	}
}

// TestCmdCacheEndedBound checks that only the last cmdCacheEnded ended
// commands stay cached, and the open ones all.
func TestCmdCacheEndedBound(t *testing.T) {
	var cc cmdCache
	open := store.Command{ID: 1 << 40, DeviceName: "d", State: store.CmdQueued}
	cc.put(open, 4)
	for id := int64(1); id <= cmdCacheEnded+10; id++ {
		cc.put(store.Command{ID: id, DeviceName: "d", State: store.CmdSucceeded}, 1)
		cc.put(store.Command{ID: id, DeviceName: "d", State: store.CmdSucceeded}, 1) // again: no second place
	}
	if len(cc.m) != cmdCacheEnded+1 {
		t.Fatalf("%d cached, want %d", len(cc.m), cmdCacheEnded+1)
	}
	for _, id := range []int64{1, 10} {
		if _, ok := cc.device(id); ok {
			t.Fatalf("command %d, among the first to end, still cached", id)
		}
	}
	for _, id := range []int64{11, cmdCacheEnded + 10, 1 << 40} {
		if _, ok := cc.device(id); !ok {
			t.Fatalf("command %d not cached", id)
		}
	}
}

// TestCmdCacheSkipsLargeCommands checks that a command stored larger
// than cmdCacheEntryMax (large params, or a large result once answered)
// is not held, and that one growing past it leaves the cache.
func TestCmdCacheSkipsLargeCommands(t *testing.T) {
	var cc cmdCache
	big := store.Command{ID: 1, DeviceName: "d", Name: "ota", State: store.CmdQueued,
		Params: json.RawMessage(`"` + string(make([]byte, cmdCacheEntryMax)) + `"`)}
	cc.put(big, cmdCacheEntryMax+1)
	if _, ok := cc.device(1); ok {
		t.Fatal("a command over cmdCacheEntryMax was cached")
	}
	small := store.Command{ID: 2, DeviceName: "d", Name: "ping", State: store.CmdQueued}
	cc.put(small, 2)
	if _, ok := cc.device(2); !ok {
		t.Fatal("a small command was not cached")
	}
	small.State = store.CmdSucceeded
	cc.put(small, cmdCacheEntryMax+1) // answered with a large result
	if _, ok := cc.device(2); ok {
		t.Fatal("a command grown over cmdCacheEntryMax stayed cached")
	}
}
