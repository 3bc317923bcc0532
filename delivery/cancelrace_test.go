package delivery

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"testing"

	"github.com/devmsg/devmsg/command"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
	"github.com/devmsg/devmsg/store/pebble"
)

// cancellingConn is a device connection on which every command is
// cancelled the moment it is published, before the sender records it
// sent: as a DELETE that reads the command still queued, which ends it
// and tells no device.
type cancellingConn struct {
	cmdConn
	svc *command.Service
	t   *testing.T
}

func (c *cancellingConn) Publish(topic string, payload []byte, qos byte) (uint16, error) {
	pid, err := c.cmdConn.Publish(topic, payload, qos)
	if topic == command.TopicCmd {
		var p struct {
			ID string `json:"cmd_id"`
		}
		id, perr := int64(0), json.Unmarshal(payload, &p)
		if perr == nil {
			id, perr = strconv.ParseInt(p.ID, 10, 64)
		}
		if perr != nil {
			c.t.Errorf("command payload %s: %v", payload, perr)
		} else if cmd, err := c.svc.Cancel(context.Background(), "app", id); err != nil || cmd.State != store.CmdCancelled {
			c.t.Errorf("cancel %d: %+v %v", id, cmd, err)
		}
	}
	return pid, err
}

// commandStore is what the test needs of a store.
type commandStore interface {
	CommandStore
	command.Store
	registry
}

// A command cancelled while it is being published, after the publish
// read it queued and before its sent state is written, reaches the
// device all the same: the device must then get cmd/cancel, after the
// command. The sender's write of the sent state finds the command
// cancelled and publishes the cancel; without it the device runs a
// command whose answer is dropped. Covered on a store that records a
// connection's sends one by one and on one that records them in one
// write, for a reconnecting device (Attach) and for a batch send
// (SendAll).
func TestCancelledWhilePublishedIsCancelledOnDevice(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) commandStore
	}{
		{"memory", func(*testing.T) commandStore { return memory.New() }},
		{"pebble", func(t *testing.T) commandStore {
			st, err := pebble.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := tc.open(t)
			svc := offlineCommands(t, st, st, "dev-1", "dev-2")
			var queued []store.Command
			for _, dev := range []string{"dev-1", "dev-1", "dev-2"} {
				rs, err := svc.Send(ctx, store.App{Key: "app"}, []string{dev}, command.Request{Name: "reboot", TTL: 60, Timeout: 30}, true, 0, nil)
				if err != nil || rs[0].Command.State != store.CmdQueued {
					t.Fatalf("send: %+v %v", rs, err)
				}
				queued = append(queued, rs[0].Command)
			}
			cs := NewCommandSender(st, svc, slog.New(slog.DiscardHandler))

			// dev-1 connects and is sent its two queued commands.
			c1 := &cancellingConn{svc: svc, t: t}
			cs.Attach(ctx, c1, "app", "dev-1", false)
			want := []string{command.TopicCmd, command.TopicCmd, command.TopicCancel + " " + string(command.CancelPayload(queued[0].ID)),
				command.TopicCancel + " " + string(command.CancelPayload(queued[1].ID))}
			checkTopics(t, "reconnect", c1.got(), want)

			// dev-2's command goes out in a batch send, from the copy the
			// send read before the cancel.
			c2 := &cancellingConn{svc: svc, t: t}
			cs.SendAll(ctx, []Addressed{{Conn: c2, Command: queued[2]}})
			checkTopics(t, "batch send", c2.got(), []string{command.TopicCmd, command.TopicCancel + " " + string(command.CancelPayload(queued[2].ID))})
			for _, q := range queued {
				if c, err := st.GetCommand(ctx, "app", q.ID); err != nil || c.State != store.CmdCancelled {
					t.Errorf("command %d: %+v %v, want cancelled", q.ID, c, err)
				}
			}
		})
	}
}

// checkTopics compares what a connection got, a command's publish by its
// topic alone, with want.
func checkTopics(t *testing.T, what string, got, want []string) {
	t.Helper()
	for i, g := range got {
		if len(g) > len(command.TopicCmd) && g[:len(command.TopicCmd)+1] == command.TopicCmd+" " {
			got[i] = command.TopicCmd
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: the device got %q, want %q", what, got, want)
	}
}
