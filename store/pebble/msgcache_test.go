package pebble

import (
	"context"
	"errors"
	"testing"
	"time"

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
	s, must := openTestApp(t, "dev-1")
	s.msgs.noVerify = true
	ctx := context.Background()
	pending := func(id int64) store.Message {
		return store.Message{ID: id, AppKey: "app", DeviceName: "dev-1", Body: "b", TTL: 60,
			ExpireTime: 1 << 40, State: store.StatePending, Records: []store.Record{{Type: store.RecordTargetValid}}}
	}
	must(s.CreateMessage(ctx, pending(1), 0, nil))
	_, err := s.CreateMessages(ctx, "app", []store.BatchMessage{{Message: pending(2)}}, nil, nil)
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
// TestMsgCacheKeepsOldestWhileRecent: a full shard keeps the messages it
// holds rather than take newer ones, until the oldest has been held
// msgCacheHold; then it forgets the oldest first.
func TestMsgCacheKeepsOldestWhileRecent(t *testing.T) {
	now := time.Unix(1000, 0)
	c := msgCache{now: func() time.Time { return now }}
	id := func(i int) int64 { return int64(i) * msgCacheShards } // all in shard 0
	for i := range msgCacheShardSize + 10 {
		c.put(id(i), nil, store.Message{ID: id(i)})
		c.put(id(i), nil, store.Message{ID: id(i), Body: "again"})
	}
	for i := range msgCacheShardSize + 10 {
		if e := c.get(id(i)); (e != nil) != (i < msgCacheShardSize) {
			t.Fatalf("message %d cached: %v, want %v", i, e != nil, i < msgCacheShardSize)
		} else if e != nil && e.m.Body != "again" {
			t.Fatalf("message %d cached as first put", i)
		}
	}
	// A PUBACK's write takes the oldest out: a newer message gets its place.
	c.drop(id(0))
	c.put(id(msgCacheShardSize+10), nil, store.Message{})
	if c.get(id(msgCacheShardSize+10)) == nil {
		t.Fatal("message not cached with room made")
	}
	now = now.Add(msgCacheHold)
	for i := msgCacheShardSize + 11; i < msgCacheShardSize+16; i++ {
		c.put(id(i), nil, store.Message{})
	}
	for i := range msgCacheShardSize + 16 {
		want := i >= 6 && i < msgCacheShardSize || i >= msgCacheShardSize+10
		if e := c.get(id(i)); (e != nil) != want {
			t.Fatalf("after %v, message %d cached: %v, want %v", msgCacheHold, i, e != nil, want)
		}
	}
	if n := len(c.shard(0).byID); n != msgCacheShardSize {
		t.Fatalf("shard holds %d messages, want %d", n, msgCacheShardSize)
	}
}

// TestMsgCacheOrderStaysBounded: messages put and dropped (sent and
// acknowledged) without the shard ever filling leave no trail.
func TestMsgCacheOrderStaysBounded(t *testing.T) {
	var c msgCache
	for i := range int64(10 * msgCacheShardSize) {
		c.put(i*msgCacheShards, nil, store.Message{})
		if i >= 100 {
			c.drop((i - 100) * msgCacheShards)
		}
	}
	sh := c.shard(0)
	if n := len(sh.order) - sh.head; n > 2*msgCacheShardSize || len(sh.byID) != 100 {
		t.Fatalf("shard holds %d messages in an order of %d", len(sh.byID), n)
	}
}
