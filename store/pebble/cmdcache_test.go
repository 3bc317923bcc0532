package pebble

import (
	"encoding/json"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestCmdCacheStale checks that an entry is used only for the bytes it
// was written as: other bytes stored under its id are decoded.
func TestCmdCacheStale(t *testing.T) {
	var cc cmdCache
	c := store.Command{ID: 7, AppKey: "app", DeviceName: "d", Name: "reboot", State: store.CmdQueued}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cc.put(c, raw)
	if dev, ok := cc.device(7); !ok || dev != "d" {
		t.Fatalf("device(7) = %q, %v; want d, true", dev, ok)
	}
	got, err := cc.decode(7, raw)
	if err != nil || got.State != store.CmdQueued {
		t.Fatalf("decode of the cached bytes = %+v, %v", got, err)
	}
	sent := c
	sent.State = store.CmdSent
	other, err := json.Marshal(sent)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = cc.decode(7, other); err != nil || got.State != store.CmdSent {
		t.Fatalf("decode of other bytes = %+v, %v; want state sent", got, err)
	}
	done := c
	done.State = store.CmdSucceeded
	doneRaw, err := json.Marshal(done)
	if err != nil {
		t.Fatal(err)
	}
	cc.put(done, doneRaw)
	if got, err = cc.decode(7, doneRaw); err != nil || got.State != store.CmdSucceeded {
		t.Fatalf("decode of the ended command = %+v, %v", got, err)
	}
}

// TestCmdCacheEndedBound checks that only the last cmdCacheEnded ended
// commands stay cached, and the open ones all.
func TestCmdCacheEndedBound(t *testing.T) {
	var cc cmdCache
	open := store.Command{ID: 1 << 40, DeviceName: "d", State: store.CmdQueued}
	cc.put(open, []byte("open"))
	for id := int64(1); id <= cmdCacheEnded+10; id++ {
		cc.put(store.Command{ID: id, DeviceName: "d", State: store.CmdSucceeded}, []byte("x"))
		cc.put(store.Command{ID: id, DeviceName: "d", State: store.CmdSucceeded}, []byte("y")) // again: no second place
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
	cc.put(big, make([]byte, cmdCacheEntryMax+1))
	if _, ok := cc.device(1); ok {
		t.Fatal("a command over cmdCacheEntryMax was cached")
	}
	small := store.Command{ID: 2, DeviceName: "d", Name: "ping", State: store.CmdQueued}
	cc.put(small, []byte(`{}`))
	if _, ok := cc.device(2); !ok {
		t.Fatal("a small command was not cached")
	}
	small.State = store.CmdSucceeded
	cc.put(small, make([]byte, cmdCacheEntryMax+1)) // answered with a large result
	if _, ok := cc.device(2); ok {
		t.Fatal("a command grown over cmdCacheEntryMax stayed cached")
	}
}
