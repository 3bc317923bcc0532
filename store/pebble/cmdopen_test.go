package pebble

import (
	"context"
	"fmt"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestOpenCountCache: the cached open counts stay those of the keys
// through writes of one device and of many, ends and rejections.
func TestOpenCountCache(t *testing.T) {
	ctx := context.Background()
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprint("dev-", i))
	}
	s, must := openTestApp(t, names...)
	id := int64(0)
	create := func(devs ...string) {
		var cmds []store.Command
		for _, d := range devs {
			id++
			cmds = append(cmds, store.Command{ID: id, DeviceName: d, Name: "x", TTL: 60, State: store.CmdQueued, TimeCreate: 1})
		}
		_, err := s.CreateCommands(ctx, "app", cmds, 0, nil)
		must(err)
	}
	check := func(when string) {
		t.Helper()
		for _, n := range append(names, "gone") {
			cached, ok := s.openCmds.get("app", n)
			p := cmdOpenPrefix("app", n)
			stored := 0
			must(s.scan(p, prefixEnd(p), func(_, _ []byte) (bool, error) { stored++; return true, nil }))
			if ok && cached != stored {
				t.Fatalf("%s: %s has %d open, cached %d", when, n, stored, cached)
			}
		}
	}
	create("dev-0", "dev-0", "gone")
	check("one by one")
	create(append(append(names, names...), "gone")...)
	check("many")
	for c := int64(1); c <= id; c += 3 {
		_, err := s.UpdateCommand(ctx, "app", c, func(c *store.Command) error { c.State = store.CmdExpired; return nil })
		must(err)
	}
	check("after ends")
	create(names...)
	check("again")
}
