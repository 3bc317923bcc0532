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
	cc.put(done, nil)
	if _, ok := cc.device(7); ok {
		t.Fatal("an ended command is still cached")
	}
}
