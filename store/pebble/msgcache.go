package pebble

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/devmsg/devmsg/store"
)

// Sizes of msgCache: msgCacheShards shards of msgCacheShardSize messages.
const (
	msgCacheShards    = 16
	msgCacheShardSize = 4096
)

// msgCacheHold is how long a full msgCache keeps a pending message rather
// than make room for a newer one.
const msgCacheHold = 10 * time.Second

// msgCache holds the stored state of the messages written last, so that
// the write that follows (in fan-out: the PUBACK's, milliseconds after the
// send's) neither reads the message from Pebble nor decodes it: those
// reads and decodes were a sixth of the server's CPU in fan-out, each
// message read twice by its ack write.
//
// An entry is put only by a writer of the message, under the device's
// stripe, after its batch is applied, and dropped by a writer whose batch
// may or may not have landed; every writer of a message holds its
// device's stripe. So under the stripe an entry is the message as Pebble
// holds it, and a miss reads Pebble. Only writers use it (UpdateMessage,
// UpdateMessages), reading it under the stripe or checking there what
// they read before taking it: a reader without the stripe could see the
// message's old state after other keys of its write (the queue entry's
// deletion) are visible in Pebble, which Pebble alone never shows.
//
// It holds pending messages only (keep), at most 65,536 (about 1 KiB each
// with their records): in fan-out the PUBACKs come a few thousand
// messages behind the sends, more while the deliveries catch up with a
// burst. When a shard is full it forgets its oldest entry only if that
// was put msgCacheHold ago or more, and otherwise does not take the new
// one: the PUBACKs come in send order, so behind a backlog larger than
// the cache, forgetting the oldest first forgot every message just before
// its PUBACK (every ack write read Pebble twice), where keeping them
// serves the oldest 65,536 of the backlog, and the next as those leave.
// A message whose device never answers is forgotten after msgCacheHold.
// Forgetting is always safe.
type msgCache struct {
	shards [msgCacheShards]msgCacheShard
	// noVerify turns verifyMsgCache off for a test that changes Pebble
	// behind the cache's back.
	noVerify bool
	// now is the clock of msgCacheHold, time.Now's if nil (tests set it).
	now func() time.Time
}

type msgCacheShard struct {
	mu   sync.Mutex
	byID map[int64]*cachedMsg
	// order holds the messages put in order, from order[head]; an
	// entry whose message was dropped or put again since is skipped.
	order []putAt
	head  int
	seq   uint64 // of the last message put
}

// putAt is one put of a message, seq its number in its shard.
type putAt struct {
	id  int64
	seq uint64
	at  time.Time
}

// cachedMsg is one message as stored: raw is its value in Pebble and m
// the value decoded. Neither is changed once cached; get hands out copies.
type cachedMsg struct {
	raw []byte
	m   store.Message
	seq uint64 // the put that brought the message into its shard
}

func (c *msgCache) shard(id int64) *msgCacheShard {
	return &c.shards[uint64(id)%msgCacheShards]
}

// get returns message id's entry, or nil.
func (c *msgCache) get(id int64) *cachedMsg {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.byID[id]
}

// put records that message id is now stored as raw, decoded m, unless
// the shard is full of messages put less than msgCacheHold ago. The caller
// holds the device's stripe and its write is applied; neither raw nor m
// may be changed afterwards.
func (c *msgCache) put(id int64, raw []byte, m store.Message) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.put(id, &cachedMsg{raw: raw, m: m}, c.clock())
}

// clock returns the time of msgCacheHold.
func (c *msgCache) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// put is msgCache.put of e, now the time of the put, under sh.mu.
func (sh *msgCacheShard) put(id int64, e *cachedMsg, now time.Time) {
	if sh.byID == nil {
		sh.byID = make(map[int64]*cachedMsg)
	}
	if old, ok := sh.byID[id]; ok {
		e.seq = old.seq
		sh.byID[id] = e
		return
	}
	for len(sh.byID) >= msgCacheShardSize {
		p := sh.order[sh.head]
		if cur := sh.byID[p.id]; cur != nil && cur.seq == p.seq {
			if now.Sub(p.at) < msgCacheHold {
				return // the oldest is recent: its PUBACK is still to come
			}
			delete(sh.byID, p.id)
		}
		sh.order[sh.head] = putAt{}
		sh.head++
	}
	sh.seq++
	e.seq = sh.seq
	sh.byID[id] = e
	sh.order = append(sh.order, putAt{id: id, seq: e.seq, at: now})
	if len(sh.order)-sh.head > 2*msgCacheShardSize {
		sh.compact()
	}
}

// keepAll is keep for each of es (in order), each shard locked once and
// the clock read once: a batch send kept its 1,000 messages one lock
// and one clock reading each (a third of cacheCreated's CPU). The caller
// is as for put, for every message.
func (c *msgCache) keepAll(es []keeping) {
	if len(es) == 0 {
		return
	}
	now := c.clock()
	var in [msgCacheShards]int
	for _, k := range es {
		in[uint64(k.id)%msgCacheShards]++
	}
	for i := range c.shards {
		if in[i] == 0 {
			continue
		}
		sh := &c.shards[i]
		sh.mu.Lock()
		for _, k := range es {
			if uint64(k.id)%msgCacheShards != uint64(i) {
				continue
			}
			if k.m.State == store.StatePending {
				sh.put(k.id, &cachedMsg{raw: k.raw, m: k.m}, now)
			} else {
				delete(sh.byID, k.id)
			}
		}
		sh.mu.Unlock()
	}
}

// keeping is one message of keepAll: message id stored as raw, decoded m.
type keeping struct {
	id  int64
	raw []byte
	m   store.Message
}

// compact drops from order the puts of messages since dropped or put
// again: without a full shard nothing else takes them out.
func (sh *msgCacheShard) compact() {
	live := make([]putAt, 0, len(sh.byID)+msgCacheShardSize/4)
	for _, p := range sh.order[sh.head:] {
		if cur := sh.byID[p.id]; cur != nil && cur.seq == p.seq {
			live = append(live, p)
		}
	}
	sh.order, sh.head = live, 0
}

// keep puts message id if it is pending, and drops it otherwise: only a
// pending message has a write coming soon (its PUBACK's, its expiry), and
// a delivered one kept would push out pending ones. The caller is as for
// put.
func (c *msgCache) keep(id int64, raw []byte, m store.Message) {
	if m.State == store.StatePending {
		c.put(id, raw, m)
	} else {
		c.drop(id)
	}
}

// drop forgets message id: the caller, holding the device's stripe, does
// not know what is stored.
func (c *msgCache) drop(id int64) {
	sh := c.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.byID, id)
}

// message returns a copy of the cached message that the caller may change.
func (e *cachedMsg) message() store.Message { return cloneMessage(e.m) }

// cloneMessage returns m with records (and their errors) of its own. The
// byte slices (params) are shared: nothing changes them in place.
func cloneMessage(m store.Message) store.Message {
	if m.Records != nil {
		recs := make([]store.Record, len(m.Records))
		copy(recs, m.Records)
		for i, r := range recs {
			if r.Error != nil {
				re := *r.Error
				recs[i].Error = &re
			}
		}
		m.Records = recs
	}
	return m
}

// readMessageShared is readMessage, but a cached message comes back as
// the cache holds it, records shared: the caller must not change it.
func (s *Store) readMessageShared(id int64, locked bool) (m store.Message, raw []byte, e *cachedMsg, err error) {
	if e = s.msgs.get(id); e != nil {
		if verifyMsgCache && locked && !s.msgs.noVerify {
			s.verifyCached(id, e)
		}
		return e.m, e.raw, e, nil
	}
	return s.readMessage(id, locked)
}

// copyRecords returns a copy of rs that shares nothing a caller may
// change (errors are copied), with room for extra more records; never
// nil.
func copyRecords(rs []store.Record, extra int) []store.Record {
	out := append(make([]store.Record, 0, len(rs)+extra), rs...)
	for i, r := range out {
		if r.Error != nil {
			re := *r.Error
			out[i].Error = &re
		}
	}
	return out
}

// verifyMsgCache makes readMessage check every cache hit against Pebble
// (set by the package's tests).
var verifyMsgCache bool

// readMessage returns message id as stored, decoded and raw, and its cache
// entry: from msgCache if it holds the message (e non-nil), else read.
// The message is the caller's to change. locked says the caller holds the
// device's stripe; without it, what it returns may be older than what
// Pebble holds, and the caller checks it again under the stripe.
func (s *Store) readMessage(id int64, locked bool) (m store.Message, raw []byte, e *cachedMsg, err error) {
	if e = s.msgs.get(id); e != nil {
		if verifyMsgCache && locked && !s.msgs.noVerify {
			s.verifyCached(id, e)
		}
		return e.message(), e.raw, e, nil
	}
	if raw, err = s.get(msgKey(id)); err != nil {
		return store.Message{}, nil, nil, err
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return store.Message{}, nil, nil, fmt.Errorf("decode message %d: %w", id, err)
	}
	return m, raw, nil, nil
}

// verifyCached panics unless e is message id as Pebble holds it. Called
// only under the device's stripe.
func (s *Store) verifyCached(id int64, e *cachedMsg) {
	raw, err := s.get(msgKey(id))
	if err != nil {
		panic(fmt.Sprintf("message %d cached but not readable: %v", id, err))
	}
	var m store.Message
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(err)
	}
	if !bytes.Equal(raw, e.raw) || !reflect.DeepEqual(m, e.message()) {
		panic(fmt.Sprintf("message %d cached as %s %+v, stored as %s %+v", id, e.raw, e.m, raw, m))
	}
}

// cacheCreated caches the messages a CreateMessages call stored in their
// pending form (BatchStored), as encoded; the caller holds their devices'
// stripes and the batch is applied. A queue-full form is left out: it is
// not pending, so no PUBACK writes it next. With pre, only those it
// keeps are cached.
func (s *Store) cacheCreated(appKey string, msgs []store.BatchMessage, outcomes []int, encoded []encodedMsg, pre *preparedStep) {
	es := make([]keeping, 0, len(msgs))
	for i, bm := range msgs {
		if outcomes[i] != store.BatchStored || pre != nil && !pre.keep[i] {
			continue
		}
		var kb [len(pMsg) + 8]byte // no allocation under the stripes
		k := appendMsgKey(kb[:0], bm.Message.ID)
		for _, e := range encoded[i].stored {
			if bytes.Equal(e.k, k) {
				m := cloneMessage(bm.Message)
				m.AppKey = appKey
				es = append(es, keeping{id: m.ID, raw: e.v, m: m})
				break
			}
		}
	}
	s.msgs.keepAll(es)
}
