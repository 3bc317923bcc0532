package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// ErrEventsTrimmed means a read asked for events after an id that is
// older than the oldest event the app's log still keeps: some events in
// between are gone (retention or max_per_app).
var ErrEventsTrimmed = errors.New("events trimmed")

// Event is one entry of an app's event log (docs/events.md).
type Event struct {
	// ID is assigned by the store when the event is appended: it
	// increases per app, and events become visible to readers in ID
	// order (a reader that has seen ID n never later sees a new event
	// with an ID below n). IDs need not be consecutive (on Redis an ID
	// is its stream id's ms*1,000,000+seq), and a reader only ever sees
	// durable events.
	ID         int64  `json:"id"`
	Type       string `json:"type"`
	AppKey     string `json:"app_key"`
	DeviceName string `json:"device_name"`
	Time       int64  `json:"time"` // Unix ms
	// Data is the type's data object (docs/events.md, "Event types"),
	// stored as is.
	Data json.RawMessage `json:"data"`
}

// EventQuery selects events of one app's log.
type EventQuery struct {
	AppKey string
	// After is the cursor: only events with a higher ID; 0 starts at
	// the oldest kept event.
	After int64
	// Limit is the most events returned (1 to 1000).
	Limit int
	// Types keeps only events of these types; empty keeps all.
	Types []string
	// DeviceName keeps only the device's events; "" keeps all.
	DeviceName string
}

// EventPage is what ReadEvents returns.
type EventPage struct {
	// Events match the query, in ID order.
	Events []Event
	// Next is the cursor of the following read: the ID of the last
	// event examined (matching or not), or the query's After when none
	// was. A filtered read examines a bounded number of events, so it may
	// return fewer than Limit (even none) with Next moved on; any read
	// may return fewer than Limit when MaxEventPageBytes cut it short.
	Next int64
	// Oldest is the ID of the oldest kept event, 0 when the log is empty.
	Oldest int64
	// Newest is the highest ID ever handed out to a reader of the app's
	// log: the newest event's, or when trims emptied the log the last
	// trimmed one's; 0 for a log never appended to. It comes from the same
	// view of the log as Events, so a cursor above it is one no read ever
	// returned, and an event read later has a higher ID.
	Newest int64
}

// EventLog is the part of the storage contract that keeps every app's
// event log: durable, per app, ordered, trimmed by age and count.
//
// Events can also be appended in the same atomic, durable write as a
// state change, so that a crash never keeps the one without the other:
// see Device.Emit (CreateDevices, UpdateDevice), Report.Emit
// (ReportProperties), DeleteDevice's events and ResetPresence's offline.
type EventLog interface {
	// AppendEvents stores the events durably and atomically, in slice
	// order, assigning each its ID; it returns them with IDs set. Events
	// may belong to different apps (on Redis Cluster, whose apps live on
	// different shards, the call is atomic per app only). Empty Data is
	// stored as {}; other Data is stored byte for byte.
	AppendEvents(ctx context.Context, evs []Event) ([]Event, error)
	// ReadEvents returns events of q.AppKey's log after q.After: it
	// examines up to q.Examine() events and returns those that match.
	// It stops early, before the matching event whose Data would take
	// the returned events' Data over MaxEventPageBytes, but returns at
	// least one event when one matches, so a reader always moves on.
	// It returns ErrEventsTrimmed (with the page's Oldest set) when
	// q.After is not 0 and an event with an ID above q.After has been
	// trimmed away: the app's highest trimmed ID is above q.After. (IDs
	// need not be dense, so "q.After below Oldest-1" would not do.) An
	// error for a query that fails q.Check.
	ReadEvents(ctx context.Context, q EventQuery) (EventPage, error)
	// WaitEvents returns once the app's log may hold an event with an ID
	// above after (at once if it does), or when ctx is done (ctx.Err()).
	// A spurious return is allowed; a missed one is not. In cluster
	// mode it sees events appended by every node.
	WaitEvents(ctx context.Context, appKey string, after int64) error
	// TrimEvents deletes the app's events older than the Unix ms
	// olderThan and, beyond those, the oldest ones until at most max are
	// kept; it returns how many it deleted. It only ever deletes the
	// oldest events: the age trim stops at the first event (in ID order)
	// whose Time is not before olderThan. olderThan <= 0 trims nothing by
	// age, max <= 0 nothing by count.
	TrimEvents(ctx context.Context, appKey string, olderThan int64, max int) (int, error)
}

// Limits of an event read.
const (
	// MaxEventLimit is the highest EventQuery.Limit.
	MaxEventLimit = 1000
	// MaxEventsExamined is the most events one filtered ReadEvents call
	// examines, so that a read for a rare type or device costs a bounded
	// amount however long the log is.
	MaxEventsExamined = 10_000
	// MaxEventPageBytes bounds the Data one ReadEvents call returns, in
	// total: 1000 events of 64 KiB would otherwise make one read (and
	// one pull's answer, escaped as JSON) tens of megabytes.
	MaxEventPageBytes = 4 << 20
)

// Check reports whether q is a valid query: an app key, an After that is
// not negative and a Limit of 1 to MaxEventLimit.
func (q EventQuery) Check() error {
	switch {
	case q.AppKey == "":
		return errors.New("read events: no app key")
	case q.After < 0:
		return fmt.Errorf("read events: after %d is negative", q.After)
	case q.Limit < 1 || q.Limit > MaxEventLimit:
		return fmt.Errorf("read events: limit %d is not 1 to %d", q.Limit, MaxEventLimit)
	}
	return nil
}

// Filtered reports whether q keeps only some events (by type or device).
func (q EventQuery) Filtered() bool { return len(q.Types) > 0 || q.DeviceName != "" }

// Examine is how many events a ReadEvents call for q looks at, at most:
// Limit when q is not filtered, otherwise 10 times Limit, at most
// MaxEventsExamined. Every backend examines exactly this many when the
// log holds them, so a filtered read always moves Next on.
func (q EventQuery) Examine() int {
	if !q.Filtered() {
		return q.Limit
	}
	return min(10*q.Limit, MaxEventsExamined)
}

// Match reports whether e passes q's filters.
func (q EventQuery) Match(e Event) bool {
	if q.DeviceName != "" && e.DeviceName != q.DeviceName {
		return false
	}
	return len(q.Types) == 0 || slices.Contains(q.Types, e.Type)
}

// NormalData returns the Data an event is stored with: d, or {} when d
// is empty, so every backend reads back the same bytes.
func NormalData(d json.RawMessage) json.RawMessage {
	if len(d) == 0 {
		return json.RawMessage("{}")
	}
	return d
}

// Stamp returns a copy of evs, emitted with a write of appKey's device,
// with an empty AppKey or DeviceName set to the device's.
func Stamp(evs []Event, appKey, device string) []Event {
	if len(evs) == 0 {
		return nil
	}
	out := slices.Clone(evs)
	for i := range out {
		if out[i].AppKey == "" {
			out[i].AppKey = appKey
		}
		if out[i].DeviceName == "" {
			out[i].DeviceName = device
		}
	}
	return out
}
