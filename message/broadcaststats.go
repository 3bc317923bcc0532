package message

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// cachedStats is a count of a broadcast's messages and until when it
// stands in for a new one, while the broadcast is still in state.
type cachedStats struct {
	stats BroadcastStats
	until time.Time
	state string
	// last is the broadcast's LastID when it was counted: the count
	// holds none of its messages after it.
	last int64
}

// minCachedCount is how long a count must have taken to be reused. It
// was 200 ms, and a broadcast fanned out at 50,000 messages/s was
// counted afresh on every poll (every 100 ms in devmsg bench) while it
// had fewer than about 150,000 messages: a tenth of the server's CPU.
const minCachedCount = 10 * time.Millisecond

// fanningOutCount is how long a count of a broadcast that is fanning
// out is reused at least. Its messages are mostly pending then (queued
// and state come from the broadcast itself, always current), and
// counting afresh on every poll (devmsg bench and the console poll every
// 100 ms to 1 s) read each message again a few times a second: a tenth
// of the server's CPU during a fan-out of 100,000.
const fanningOutCount = time.Second

// maxCachedStats bounds the cache; past it, the oldest go.
const maxCachedStats = 1024

// Get returns the app's broadcast id with its messages counted by state;
// a *errdefs.NotFoundError if the app has none such. Counting reads each
// of the broadcast's messages, so a count is reused while the broadcast
// keeps its state: while it fans out for fanningOutCount at least, and
// any count that took over minCachedCount for five times as long as it
// took (a broadcast of 100,000 messages is counted every second or so).
// Polls then cost at most a sixth of a core, and the counts lag by as
// much. State and queued are always current; a count made before a
// cancel is not reused after it, and one made while it fanned out is
// completed with the messages made since (countRest), by each poll while
// it fans out and by the first once it is done. Each message is so
// counted once as it is made, not all at the poll that first sees the
// broadcast done: that poll counted 100,000 messages (50 to 100 ms) after
// the fan-out had ended, and what a client waited for grew by as much.
func (br *Broadcaster) Get(ctx context.Context, appKey string, id int64) (store.Broadcast, BroadcastStats, error) {
	b, err := br.store.GetBroadcast(ctx, appKey, id)
	if errors.Is(err, store.ErrNotFound) {
		return b, BroadcastStats{}, errdefs.NotFound("broadcast", id)
	}
	if err != nil {
		return b, BroadcastStats{}, fmt.Errorf("broadcast %d: %w", id, err)
	}
	now := br.now()
	br.statsMu.Lock()
	c, ok := br.stats[id]
	br.statsMu.Unlock()
	rest := ok && now.Before(c.until) && c.state == store.BroadcastFanningOut &&
		(b.State == store.BroadcastFanningOut && b.LastID > c.last || b.State == store.BroadcastDone)
	if ok && now.Before(c.until) && c.state == b.State && !rest {
		return b, c.stats, nil
	}
	if rest {
		// Concurrent polls share one count of the rest too.
		key := appKey + "\x00" + strconv.FormatInt(id, 10) + "\x00" + strconv.FormatInt(b.LastID, 10)
		v, err, _ := br.counting.Do(key, func() (any, error) {
			_, st, err := br.countRest(context.WithoutCancel(ctx), b, c)
			return st, err
		})
		if err != nil {
			return b, BroadcastStats{}, err
		}
		return b, v.(BroadcastStats), nil
	}
	// Concurrent polls share one count: each would read every message
	// otherwise (50 polls of a 100,000-device broadcast took 68 s of
	// CPU). The count outlives a poller that leaves, so the others
	// still get it.
	v, err, _ := br.counting.Do(appKey+"\x00"+strconv.FormatInt(id, 10), func() (any, error) {
		return br.count(context.WithoutCancel(ctx), b)
	})
	if err != nil {
		return b, BroadcastStats{}, err
	}
	return b, v.(BroadcastStats), nil
}

// countRest completes c, a count made while b fanned out and still
// current, while b still fans out or once it is done: the messages the
// fan-out made after it (a second's at most) are counted and added, and
// the whole stands as long as c would have. Those counted before are as
// current as during the fan-out. Reusing c alone left out the last
// steps: a target failed there (disabled since acceptance) was not
// counted as failed.
func (br *Broadcaster) countRest(ctx context.Context, b store.Broadcast, c cachedStats) (store.Broadcast, BroadcastStats, error) {
	if b.LastID > c.last {
		first := max(c.last+1, b.FirstID)
		rest, err := br.store.CountBroadcast(ctx, b.AppKey, b.ID, first, b.LastID)
		if err != nil {
			return b, BroadcastStats{}, fmt.Errorf("messages of broadcast %d: %w", b.ID, err)
		}
		c.stats.Delivered += rest.Delivered
		c.stats.Expired += rest.Expired
		c.stats.Failed += rest.Failed
		c.stats.Retracted += rest.Retracted
		c.stats.Pending += rest.Pending
	}
	c.state, c.last = b.State, b.LastID
	br.statsMu.Lock()
	br.stats[b.ID] = c
	br.statsMu.Unlock()
	return b, c.stats, nil
}

// count counts b's messages by state and caches a count that took long
// or is of a broadcast fanning out (see Get).
func (br *Broadcaster) count(ctx context.Context, b store.Broadcast) (BroadcastStats, error) {
	now := br.now()
	st, err := br.store.CountBroadcast(ctx, b.AppKey, b.ID, b.FirstID, b.LastID)
	if err != nil {
		return st, fmt.Errorf("messages of broadcast %d: %w", b.ID, err)
	}
	took := br.now().Sub(now)
	hold := time.Duration(0)
	if took > minCachedCount {
		hold = took * 5
	}
	if b.State == store.BroadcastFanningOut {
		hold = max(hold, fanningOutCount)
	}
	if hold > 0 {
		br.statsMu.Lock()
		if len(br.stats) >= maxCachedStats {
			clear(br.stats)
		}
		br.stats[b.ID] = cachedStats{st, br.now().Add(hold), b.State, b.LastID}
		br.statsMu.Unlock()
	}
	return st, nil
}

// eachMessage calls fn with each message of b, newest first: the app's
// messages between b's first and last msgid that belong to it. What it
// reads grows with the messages sent while b fanned out, not with all
// the app's messages.
func (br *Broadcaster) eachMessage(ctx context.Context, b store.Broadcast, fn func(store.Message) error) error {
	if b.LastID == 0 {
		return nil
	}
	before := b.LastID + 1
	for {
		ms, err := br.store.ListMessages(ctx, b.AppKey, before, 500)
		if err != nil {
			return fmt.Errorf("messages of broadcast %d: %w", b.ID, err)
		}
		for _, m := range ms {
			if m.ID < b.FirstID {
				return nil
			}
			if m.Broadcast == b.ID {
				if err := fn(m); err != nil {
					return err
				}
			}
		}
		if len(ms) < 500 {
			return nil
		}
		before = ms[len(ms)-1].ID
	}
}
