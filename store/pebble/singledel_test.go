package pebble

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable/block"

	"github.com/devmsg/devmsg/store"
)

// TestUnqueuedEntriesLeaveNoTombstones checks that a message created
// pending and taken out of its queue soon after (delivered by
// UpdateMessages, expired by UpdateMessage) leaves nothing of its queue
// and expiry entries once the memtable is flushed: no tombstone for the
// compactions to carry down the levels.
func TestUnqueuedEntriesLeaveNoTombstones(t *testing.T) {
	s, must := openTestApp(t, "dev-1", "dev-2")
	ctx := context.Background()
	pending := func(id int64, dev string) store.Message {
		return store.Message{ID: id, AppKey: "app", DeviceName: dev, Body: "b", TTL: 60,
			ExpireTime: 1 << 40, State: store.StatePending, Records: []store.Record{{Type: store.RecordTargetValid}}}
	}
	// A message that stays queued, on disk: the flush below cannot drop
	// a tombstone for lack of anything under it.
	must(s.CreateMessage(ctx, pending(100, "dev-2"), 0, nil))
	must(s.db.Flush())
	must(s.CreateMessage(ctx, pending(1, "dev-1"), 0, nil))
	_, err := s.CreateMessages(ctx, "app", []store.BatchMessage{{Message: pending(2, "dev-1")}, {Message: pending(3, "dev-2")}}, nil, nil)
	must(err)
	deliver := func(m *store.Message) error {
		m.State = store.StateDelivered
		return nil
	}
	errs, err := s.UpdateMessages(ctx, []store.MessageUpdate{{AppKey: "app", ID: 1, Fn: deliver}, {AppKey: "app", ID: 2, Fn: deliver}})
	must(err)
	must(errors.Join(errs...))
	_, err = s.UpdateMessage(ctx, "app", 3, func(m *store.Message) error {
		m.State = store.StateExpired
		return nil
	})
	must(err)
	must(s.db.Flush())
	if n := tombstones(t, s, nil, nil); n != 0 {
		t.Errorf("%d tombstones flushed, want 0", n)
	}
	if n := countKeys(t, s, pQueue) + countKeys(t, s, pExpiry); n != 2 {
		t.Errorf("%d queue and expiry entries left, want 2 (message 100's)", n)
	}
}

// TestAppendUnqueueKeysAreUnqueueKeys: the ack write's removals, built in
// one buffer, are the very keys the send wrote (a SingleDelete must meet
// them exactly), however long the buffer grows meanwhile.
func TestAppendUnqueueKeysAreUnqueueKeys(t *testing.T) {
	var buf []byte
	var got [][2][]byte
	var msgs []store.Message
	for i := range int64(50) {
		m := store.Message{ID: i<<40 + i, AppKey: "app", DeviceName: strings.Repeat("d", int(i)), ExpireTime: i*1000 - 5000}
		var ks [2][]byte
		buf, ks = appendUnqueueKeys(buf, &m)
		got = append(got, ks)
		msgs = append(msgs, m)
	}
	for i, m := range msgs {
		want := unqueueKeys(m)
		if !bytes.Equal(got[i][0], want[0]) || !bytes.Equal(got[i][1], want[1]) {
			t.Fatalf("message %d: keys %q, want %q", i, got[i], want)
		}
	}
}

// TestEndedCommandLeavesNoTombstones: a command created and answered
// within the memtable's life leaves nothing of its open and due entries
// once the memtable is flushed.
func TestEndedCommandLeavesNoTombstones(t *testing.T) {
	s, must := openTestApp(t, "dev-1")
	ctx := context.Background()
	queued := func(id int64) store.Command {
		return store.Command{ID: id, DeviceName: "dev-1", Name: "ping", TTL: 60, Timeout: 30, State: store.CmdQueued, TimeCreate: 1000}
	}
	// A command that stays open, on disk: the flush below cannot drop a
	// tombstone for lack of anything under it.
	_, err := s.CreateCommands(ctx, "app", []store.Command{queued(100)}, 0, nil)
	must(err)
	must(s.db.Flush())
	_, err = s.CreateCommands(ctx, "app", []store.Command{queued(1), queued(2)}, 0, nil)
	must(err)
	deliver := func(c *store.Command) error {
		c.State, c.TimeDelivered, c.Deadline = store.CmdDelivered, 2000, 32000
		return nil
	}
	answer := func(c *store.Command) error {
		c.State, c.TimeDone, c.Answered = store.CmdSucceeded, 3000, true
		return nil
	}
	for _, fn := range []func(*store.Command) error{deliver, answer} {
		_, err = s.UpdateCommand(ctx, "app", 1, fn)
		must(err)
	}
	_, errs, err := s.UpdateCommands(ctx, []store.CommandUpdate{{AppKey: "app", ID: 2, Fn: deliver}, {AppKey: "app", ID: 2, Fn: answer}}, nil)
	must(err)
	must(errors.Join(errs...))
	must(s.db.Flush())
	if n := tombstones(t, s, []byte(pCmdDue), []byte("P")); n != 0 {
		t.Errorf("%d tombstones flushed, want 0", n)
	}
	if n := countKeys(t, s, pCmdOpen) + countKeys(t, s, pCmdDue); n != 2 {
		t.Errorf("%d open and due entries left, want 2 (command 100's)", n)
	}
}

// tombstones counts the deletes of keys in [lo, hi) (nil: unbounded) in
// s's memtables and tables.
func tombstones(t *testing.T, s *Store, lo, hi []byte) int {
	t.Helper()
	n := 0
	err := s.db.ScanInternal(context.Background(), block.CategoryUnknown, lo, hi,
		func(k *pebble.InternalKey, _ pebble.LazyValue, _ pebble.IteratorLevel) error {
			if k.Kind() == pebble.InternalKeyKindDelete || k.Kind() == pebble.InternalKeyKindSingleDelete {
				n++
			}
			return nil
		}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
