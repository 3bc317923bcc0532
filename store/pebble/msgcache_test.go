package pebble

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// The package's tests, the conformance suite among them, check every
// message the cache hands a writer under its stripe against Pebble.
func init() { verifyMsgCache = true }

// TestAckWriteReadsCachedMessage checks that the write after a send (in
// fan-out, the PUBACK's) takes the message the send stored from the cache,
// for both CreateMessage and CreateMessages: the stored values are
// removed behind the cache's back, and the updates still find the
// messages. What they write is what Pebble then holds, and the delivered
// messages leave the cache.
func TestAckWriteReadsCachedMessage(t *testing.T) {
	s := openTest(t)
	s.msgs.noVerify = true
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateApp(ctx, store.App{Key: "app", Name: "a"}))
	_, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "dev-1", Secret: "s"}})
	must(err)
	pending := func(id int64) store.Message {
		return store.Message{ID: id, AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60,
			ExpireTime: 1 << 40, State: store.StatePending, Records: []store.Record{{Type: store.RecordTargetValid}}}
	}
	must(s.CreateMessage(ctx, pending(1), 0, nil))
	_, err = s.CreateMessages(ctx, "app", []store.BatchMessage{{Message: pending(2)}}, nil, nil)
	must(err)
	for _, id := range []int64{1, 2} {
		must(s.db.Delete(msgKey(id), pebble.Sync))
	}
	deliver := func(m *store.Message) error {
		m.State = store.StateDelivered
		m.Records = append(m.Records, store.Record{Type: store.RecordDeliverySuccess})
		return nil
	}
	errs, err := s.UpdateMessages(ctx, []store.MessageUpdate{{AppKey: "app", ID: 1, Fn: deliver}, {AppKey: "app", ID: 2, Fn: deliver}})
	must(err)
	must(errors.Join(errs...))
	for _, id := range []int64{1, 2} {
		m, err := s.GetMessage(ctx, "app", id)
		must(err)
		if m.State != store.StateDelivered || len(m.Records) != 2 {
			t.Errorf("message %d stored as %s with %d records, want delivered with 2", id, m.State, len(m.Records))
		}
		// Nothing writes a delivered message soon: it would only push
		// pending ones out.
		if s.msgs.get(id) != nil {
			t.Errorf("delivered message %d still cached", id)
		}
	}
}

// TestMsgCacheForgetsOldest checks the cache's bound: a shard holds its
// newest msgCacheShardSize messages, and putting a message again does not
// take a second place.
func TestMsgCacheForgetsOldest(t *testing.T) {
	var c msgCache
	for i := range int64(msgCacheShardSize + 10) {
		c.put(i*msgCacheShards, nil, store.Message{ID: i * msgCacheShards})
		c.put(i*msgCacheShards, nil, store.Message{ID: i * msgCacheShards, Body: "again"})
	}
	sh := c.shard(0)
	if len(sh.byID) != msgCacheShardSize || len(sh.ring) != msgCacheShardSize {
		t.Fatalf("shard holds %d messages in a ring of %d, want %d", len(sh.byID), len(sh.ring), msgCacheShardSize)
	}
	for i := range int64(msgCacheShardSize + 10) {
		if e := c.get(i * msgCacheShards); (e != nil) != (i >= 10) {
			t.Fatalf("message %d cached: %v, want %v", i*msgCacheShards, e != nil, i >= 10)
		} else if e != nil && e.m.Body != "again" {
			t.Fatalf("message %d cached as first put", i*msgCacheShards)
		}
	}
}
