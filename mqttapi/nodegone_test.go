package mqttapi_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/devmsg/devmsg/cluster"
	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/delivery"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/store"
)

// TestNodeGoneWakesCommandWaiters checks that word of a dead node makes
// this node look again at the commands its calls wait for: an end that
// another node stored without telling this one (it died first) wakes
// the call waiting here.
func TestNodeGoneWakesCommandWaiters(t *testing.T) {
	w := newWorld(t)
	w.createDevice("cmd-dev")
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	service := func(node int, st command.Store) *command.Service {
		ids, err := idgen.New(node)
		if err != nil {
			t.Fatal(err)
		}
		svc := command.NewService(st, ids, log)
		svc.SetRouter(w.gw)
		return svc
	}
	reads := &commandReads{Store: w.st}
	here, there := service(0, reads), service(1, w.st)
	w.gw.SetCommands(here, delivery.NewCommandSender(w.st, here, log))

	rs, err := here.Send(ctx, store.App{Key: appKey}, []string{"cmd-dev"}, command.Request{Name: "ping", TTL: 60, Timeout: 30}, true, 0, nil)
	if err != nil || rs[0].Command.ID == 0 {
		t.Fatalf("send: %+v %v", rs, err)
	}
	c := rs[0].Command
	before := reads.n.Load()
	done := make(chan store.Command, 1)
	go func() {
		out, err := here.Wait(ctx, appKey, []store.Command{c}, time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- out[0]
	}()
	// The call reads the command once it watches it.
	for reads.n.Load() == before {
		time.Sleep(time.Millisecond)
	}
	if took, err := there.Answer(ctx, appKey, "cmd-dev", command.Reply{ID: c.ID, Result: []byte(`"there"`)}); !took || err != nil {
		t.Fatalf("answer: %v %v", took, err)
	}
	select {
	case got := <-done:
		t.Fatalf("the call returned before the word: %+v", got)
	case <-time.After(200 * time.Millisecond):
	}
	w.gw.HandleEvent(ctx, cluster.Event{Kind: cluster.KindNodeGone, ID: 1})
	select {
	case got := <-done:
		if got.State != store.CmdSucceeded || string(got.Result) != `"there"` {
			t.Fatalf("the call returned %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the word that a node is gone did not wake the call")
	}
}

// commandReads is a command store that counts the commands read.
type commandReads struct {
	command.Store
	n atomic.Int64
}

func (r *commandReads) GetCommand(ctx context.Context, appKey string, id int64) (store.Command, error) {
	r.n.Add(1)
	return r.Store.GetCommand(ctx, appKey, id)
}
