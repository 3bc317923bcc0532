package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// The event log: one Redis Stream per app, {P a:<app>}:ev, whose entries
// hold the fields t (type), d (device name), ts (time, Unix ms) and data
// (the data JSON as it came). Beside it, in the app's slot:
//
//	{P a:<app>}:evlast   the last stream id handed out ("ms-seq")
//	{P a:<app>}:evtrim   the highest stream id trimmed away
//
// An event's ID is its stream id ms-seq as the int64 ms*1,000+seq, which
// stays within 2^53-1 (ids every JSON parser holds exactly; see
// docs/events.md) until the year 2255; ms*1,000,000 would not (1.8e18 today).
// The scripts choose the stream id themselves, rather than XADD's "*",
// so that seq stays below 1,000: the id is the server's time in ms with
// seq 0, or when that is not above the last id's ms (several appends in
// one ms, or a clock that went back) the last id's seq+1, or past 999
// the next ms (so an app appending over a million events a second gets
// ids ahead of the clock, still increasing). So ids increase per app, and since Redis runs
// one script at a time, they become visible in id order. Reads see only
// durable writes (see Barrier), so neither a gap nor an event that a
// crash takes back is ever seen.
//
// Every write that appends events runs appendEventsLua within the same
// script or MULTI/EXEC as its state change, and publishes the app key on
// the channel P events; each Store keeps one subscription to it and wakes
// its WaitEvents callers (see eventWaiters), so a waiter sees appends of
// every node without holding a connection of its own.
//
// On Redis Cluster, one AppendEvents call writes one app at a time, so a
// call with events of several apps is atomic per app only.

// eventIDScale splits an event ID into the stream id's ms and seq.
const eventIDScale = 1_000

func (s *Store) eventStreamKey(app string) string { return s.app(app) + "ev" }
func (s *Store) eventLastKey(app string) string   { return s.app(app) + "evlast" }
func (s *Store) eventTrimKey(app string) string   { return s.app(app) + "evtrim" }
func (s *Store) eventChannel() string             { return s.prefix + "events" }

// eventKeys are the KEYS an append of the app's events needs.
func (s *Store) eventKeys(app string) []string {
	return []string{s.eventStreamKey(app), s.eventLastKey(app)}
}

// streamID is the stream id of an event ID.
func streamID(id int64) string {
	return strconv.FormatInt(id/eventIDScale, 10) + "-" + strconv.FormatInt(id%eventIDScale, 10)
}

// eventID is the event ID of a stream id; "" is 0.
func eventID(sid string) (int64, error) {
	if sid == "" {
		return 0, nil
	}
	ms, seq, ok := strings.Cut(sid, "-")
	m, err1 := strconv.ParseInt(ms, 10, 64)
	n, err2 := strconv.ParseInt(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil || n >= eventIDScale || m < 0 || n < 0 {
		return 0, fmt.Errorf("stream id %q is not an event id", sid)
	}
	return m*eventIDScale + n, nil
}

// eventArgs lays events out as appendEventsLua reads them: type, device
// name, time and data of each.
func eventArgs(evs []store.Event) []any {
	args := make([]any, 0, 4*len(evs))
	for _, e := range evs {
		args = append(args, e.Type, e.DeviceName, e.Time, []byte(store.NormalData(e.Data)))
	}
	return args
}

// appendEventsLua's appendEvents appends the events whose four ARGV
// (type, device name, time, data) start at the indexes in starts on to
// the app's stream (see the top of this file for the ids), records the
// last id and publishes the app key on chan; it returns the stream ids.
// span(base, n) lists the starts of n events laid out from base on.
const appendEventsLua = `
local function span(base, n)
  local starts = {}
  for i = 0, n - 1 do starts[i + 1] = base + 4 * i end
  return starts
end
local function appendEvents(stream, lastKey, chan, app, starts)
  if #starts == 0 then return {} end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ms, seq = -1, 0
  local last = redis.call('GET', lastKey)
  if last then
    local i = string.find(last, '-', 1, true)
    ms, seq = tonumber(string.sub(last, 1, i - 1)), tonumber(string.sub(last, i + 1))
  end
  local ids = {}
  for i, a in ipairs(starts) do
    if now > ms then
      ms, seq = now, 0
    elseif seq < 999 then
      seq = seq + 1
    else
      ms, seq = ms + 1, 0
    end
    local id = string.format('%d-%d', ms, seq)
    redis.call('XADD', stream, id, 't', ARGV[a], 'd', ARGV[a + 1], 'ts', ARGV[a + 2], 'data', ARGV[a + 3])
    ids[i] = id
  end
  redis.call('SET', lastKey, ids[#ids])
  redis.call('PUBLISH', chan, app)
  return ids
end
`

// appendScript appends the events of one or more apps.
// KEYS: stream and last key of each app. ARGV: channel, then for each
// app its key and event count, then the events of each app in turn.
// Returns the stream ids of all the events, in that order.
var appendScript = newScript(appendEventsLua + `
local apps = #KEYS / 2
local base = 2 + 2 * apps
local out = {}
for a = 0, apps - 1 do
  local n = tonumber(ARGV[3 + 2 * a])
  local ids = appendEvents(KEYS[1 + 2 * a], KEYS[2 + 2 * a], ARGV[1], ARGV[2 + 2 * a], span(base, n))
  for _, id in ipairs(ids) do out[#out + 1] = id end
  base = base + 4 * n
end
return out
`)

// txAppendSrc appends events inside an optimistic transaction (EVAL in
// MULTI), whose WATCH already checked the fence. KEYS: stream, last key.
// ARGV: channel, app, then the events.
const txAppendSrc = appendEventsLua + `
return appendEvents(KEYS[1], KEYS[2], ARGV[1], ARGV[2], span(3, (#ARGV - 2) / 4))
`

// txAppend queues, on the transaction's pipeline, the append of evs, all
// of app.
func (s *Store) txAppend(ctx context.Context, p goredis.Pipeliner, app string, evs []store.Event) {
	if len(evs) == 0 {
		return
	}
	p.Eval(ctx, txAppendSrc, s.eventKeys(app), append([]any{s.eventChannel(), app}, eventArgs(evs)...)...)
}

// readEventsScript reads up to ARGV[2] entries after the stream id
// ARGV[1] ("-" for the start) and returns the oldest id, the trim mark,
// the last id examined ("" for none) and the last id handed out, then id, type, device, time
// and data of each entry that matches the device name ARGV[3] ("" for
// any) and one of the types ARGV[5...] (none: any). It stops before a
// matching entry whose data would take the data returned over ARGV[4]
// bytes, once it returns one (store.MaxEventPageBytes). Reading, trim
// mark and oldest id come from one moment of the log. KEYS: stream, trim
// mark, last id (the newest: store.EventPage.Newest, read here so that
// it and the page are one moment of the log whichever node appended).
// Not fenced: it writes nothing.
var readEventsScript = goredis.NewScript(`
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local oldest = ''
if first[1] then oldest = first[1][1] end
local out = {oldest, redis.call('GET', KEYS[2]) or '', '', redis.call('GET', KEYS[3]) or ''}
local examine, dev, room = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local types, anyType = {}, #ARGV < 5
for i = 5, #ARGV do types[ARGV[i]] = true end
local start, lastSeen, full = ARGV[1], '', false
while examine > 0 and not full do
  local es = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', math.min(examine, 1000))
  if #es == 0 then break end
  for _, e in ipairs(es) do
    local f = {}
    for i = 1, #e[2], 2 do f[e[2][i]] = e[2][i + 1] end
    if (dev == '' or f.d == dev) and (anyType or types[f.t]) then
      room = room - #f.data
      if room < 0 and #out > 4 then full = true break end
      out[#out + 1] = e[1]
      out[#out + 1] = f.t
      out[#out + 1] = f.d
      out[#out + 1] = f.ts
      out[#out + 1] = f.data
    end
    lastSeen = e[1]
  end
  examine = examine - #es
  start = '(' .. lastSeen
end
out[3] = lastSeen
return out
`)

// trimBudget is the most entries one trimScript call deletes, so that no
// call holds Redis up for long; TrimEvents calls it until it is done.
const trimBudget = 10_000

// trimScript deletes the oldest entries while they are older than
// ARGV[1] (Unix ms of field ts; 0: none by age) or more than ARGV[2]
// remain (0: no bound), at most ARGV[3] of them, with XTRIM MINID, and
// records the last id deleted as the trim mark. Returns the count
// deleted and 1 when it stopped at its budget. KEYS: stream, trim mark.
var trimScript = newScript(`
local olderThan, max, budget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = redis.call('XLEN', KEYS[1])
local del, lastDel, more, start = 0, nil, 0, '-'
while true do
  local es = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', 100)
  if #es == 0 then break end
  local stop = false
  for _, e in ipairs(es) do
    local old = max > 0 and n - del > max
    if not old and olderThan > 0 then
      for i = 1, #e[2], 2 do
        if e[2][i] == 'ts' then old = tonumber(e[2][i + 1]) < olderThan end
      end
    end
    if not old then stop = true break end
    if del >= budget then more, stop = 1, true break end
    del, lastDel = del + 1, e[1]
  end
  if stop then break end
  start = '(' .. es[#es][1]
end
if del > 0 then
  local i = string.find(lastDel, '-', 1, true)
  local ms, seq = string.sub(lastDel, 1, i - 1), tonumber(string.sub(lastDel, i + 1))
  redis.call('XTRIM', KEYS[1], 'MINID', ms .. '-' .. string.format('%d', seq + 1))
  redis.call('SET', KEYS[2], lastDel)
end
return {del, more}
`)

// AppendEvents appends evs, in one script (on Redis Cluster one per app).
func (s *Store) AppendEvents(ctx context.Context, evs []store.Event) ([]store.Event, error) {
	out := make([]store.Event, len(evs))
	copy(out, evs)
	// Group by app, keeping each app's events in order.
	var apps []string
	byApp := map[string][]int{}
	for i, e := range out {
		if e.AppKey == "" {
			return nil, fmt.Errorf("append events: an event of type %q has no app key", e.Type)
		}
		out[i].Data = store.NormalData(e.Data)
		if _, ok := byApp[e.AppKey]; !ok {
			apps = append(apps, e.AppKey)
		}
		byApp[e.AppKey] = append(byApp[e.AppKey], i)
	}
	groups := [][]string{apps}
	if !s.inline {
		groups = groups[:0]
		for _, a := range apps {
			groups = append(groups, []string{a})
		}
	}
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		var keys []string
		args := []any{s.eventChannel()}
		var order []int
		var events []any
		for _, a := range g {
			keys = append(keys, s.eventKeys(a)...)
			args = append(args, a, len(byApp[a]))
			for _, i := range byApp[a] {
				order = append(order, i)
				events = append(events, eventArgs(out[i:i+1])...)
			}
		}
		ids, err := s.run(ctx, appendScript, keys, append(args, events...)...).StringSlice()
		if err != nil {
			return nil, fmt.Errorf("append events: %w", err)
		}
		if len(ids) != len(order) {
			return nil, fmt.Errorf("append events: %d ids for %d events", len(ids), len(order))
		}
		for j, i := range order {
			if out[i].ID, err = eventID(ids[j]); err != nil {
				return nil, fmt.Errorf("append events: %w", err)
			}
		}
	}
	return out, nil
}

// ReadEvents returns the app's events after q.After; see store.EventLog.
func (s *Store) ReadEvents(ctx context.Context, q store.EventQuery) (store.EventPage, error) {
	if err := q.Check(); err != nil {
		return store.EventPage{}, err
	}
	start := "-"
	if q.After > 0 {
		start = "(" + streamID(q.After)
	}
	args := []any{start, q.Examine(), q.DeviceName, store.MaxEventPageBytes}
	for _, t := range q.Types {
		args = append(args, t)
	}
	res, err := readEventsScript.Run(ctx, s.rdb, []string{s.eventStreamKey(q.AppKey), s.eventTrimKey(q.AppKey), s.eventLastKey(q.AppKey)}, args...).Slice()
	if err != nil {
		return store.EventPage{}, fmt.Errorf("read events of %s: %w", q.AppKey, err)
	}
	page, err := decodeEventPage(q.AppKey, res)
	if err != nil {
		return store.EventPage{}, fmt.Errorf("read events of %s: %w", q.AppKey, err)
	}
	trimmed, err := eventID(str(res[1]))
	if err != nil {
		return store.EventPage{}, fmt.Errorf("read events of %s: %w", q.AppKey, err)
	}
	if q.After != 0 && q.After < trimmed {
		return store.EventPage{Next: q.After, Oldest: page.Oldest, Newest: page.Newest}, store.ErrEventsTrimmed
	}
	if page.Next == 0 {
		page.Next = q.After
	}
	return page, nil
}

func str(v any) string { s, _ := v.(string); return s }

// decodeEventPage decodes readEventsScript's reply; Next is 0 when no
// entry was examined.
func decodeEventPage(app string, res []any) (store.EventPage, error) {
	if len(res) < 4 || (len(res)-4)%5 != 0 {
		return store.EventPage{}, fmt.Errorf("unexpected script reply of %d values", len(res))
	}
	var page store.EventPage
	var err error
	if page.Oldest, err = eventID(str(res[0])); err != nil {
		return page, err
	}
	if page.Next, err = eventID(str(res[2])); err != nil {
		return page, err
	}
	if page.Newest, err = eventID(str(res[3])); err != nil {
		return page, err
	}
	for i := 4; i < len(res); i += 5 {
		e := store.Event{AppKey: app, Type: str(res[i+1]), DeviceName: str(res[i+2]), Data: []byte(str(res[i+4]))}
		if e.ID, err = eventID(str(res[i])); err != nil {
			return page, err
		}
		if e.Time, err = strconv.ParseInt(str(res[i+3]), 10, 64); err != nil {
			return page, fmt.Errorf("event %s: time: %w", str(res[i]), err)
		}
		page.Events = append(page.Events, e)
	}
	return page, nil
}

// lastEventID returns the highest id of the app's log, 0 if none.
func (s *Store) lastEventID(ctx context.Context, app string) (int64, error) {
	v, err := s.rdb.Get(ctx, s.eventLastKey(app)).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return eventID(v)
}

// waitRecheck is how long WaitEvents waits before it returns anyway (a
// spurious return, which the caller answers by reading again): a safety
// net should a notification ever go astray.
const waitRecheck = 5 * time.Second

// WaitEvents returns once the app's log holds an id above after, woken by
// the Store's subscription to the events channel.
func (s *Store) WaitEvents(ctx context.Context, appKey string, after int64) error {
	// Take the wake channel before reading the last id: an append after
	// the read closes it, so none goes unnoticed.
	wake, err := s.waiters.wait(ctx, s, appKey)
	if err != nil {
		return fmt.Errorf("wait events of %s: %w", appKey, err)
	}
	last, err := s.lastEventID(ctx, appKey)
	if err != nil {
		return fmt.Errorf("wait events of %s: %w", appKey, err)
	}
	if last > after {
		return nil
	}
	t := time.NewTimer(waitRecheck)
	defer t.Stop()
	select {
	case <-wake:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// eventWaiters fans the events channel out to WaitEvents callers: one
// subscription per Store, started by the first waiter.
type eventWaiters struct {
	mu     sync.Mutex
	ps     *goredis.PubSub
	closed bool
	// wakes holds, per app, the channel closed at the app's next append.
	wakes map[string]chan struct{}
}

// wait returns the channel closed at the app's next append (or when the
// subscription reconnects, after which anything may have been missed),
// subscribing first if needed.
func (w *eventWaiters) wait(ctx context.Context, s *Store, app string) (chan struct{}, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, goredis.ErrClosed
	}
	if w.ps == nil {
		ps := s.rdb.Subscribe(context.Background(), s.eventChannel())
		// Wait for the confirmation: from then on no append is missed.
		if _, err := ps.ReceiveTimeout(ctx, 10*time.Second); err != nil {
			ps.Close()
			return nil, fmt.Errorf("subscribe to events: %w", err)
		}
		w.ps, w.wakes = ps, map[string]chan struct{}{}
		go w.run(ps)
	}
	ch := w.wakes[app]
	if ch == nil {
		ch = make(chan struct{})
		w.wakes[app] = ch
	}
	return ch, nil
}

// run reads the subscription until it is closed. A reconnect may have
// missed appends, so it (and any error) wakes every waiter.
func (w *eventWaiters) run(ps *goredis.PubSub) {
	for {
		msg, err := ps.Receive(context.Background())
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		switch m := msg.(type) {
		case *goredis.Message:
			if ch := w.wakes[m.Payload]; ch != nil {
				close(ch)
				delete(w.wakes, m.Payload)
			}
		case *goredis.Subscription, nil:
			for app, ch := range w.wakes {
				close(ch)
				delete(w.wakes, app)
			}
		}
		w.mu.Unlock()
		if err != nil {
			time.Sleep(100 * time.Millisecond) // Redis is away: do not spin
		}
	}
}

// close ends the subscription and wakes every waiter; later waits fail.
func (w *eventWaiters) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.ps != nil {
		w.ps.Close()
	}
	for app, ch := range w.wakes {
		close(ch)
		delete(w.wakes, app)
	}
}

// TrimEvents deletes the app's oldest events by age and count, a budget
// of them per script.
func (s *Store) TrimEvents(ctx context.Context, appKey string, olderThan int64, max int) (int, error) {
	total := 0
	for {
		res, err := s.run(ctx, trimScript, []string{s.eventStreamKey(appKey), s.eventTrimKey(appKey)}, olderThan, max, trimBudget).Int64Slice()
		if err != nil {
			return total, fmt.Errorf("trim events of %s: %w", appKey, err)
		}
		if len(res) != 2 {
			return total, fmt.Errorf("trim events of %s: unexpected script reply %v", appKey, res)
		}
		total += int(res[0])
		if res[1] == 0 {
			return total, nil
		}
	}
}
