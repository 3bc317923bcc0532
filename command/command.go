package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/internal/jsonfast"
	"github.com/devmsg/devmsg/store"
)

// Limits of a command request, as docs/api.md ("Device commands")
// states them.
const (
	MaxNameBytes    = 64
	MaxParamsBytes  = 256 << 10
	MaxResultBytes  = 256 << 10
	MaxDetailsBytes = 4 << 10
	MaxTTL          = 604800
	DefaultTTL      = 0
	MinTimeout      = 1
	MaxTimeout      = 3600
	DefaultTimeout  = 30
	MaxWait         = 300
	DefaultWait     = 30
	MaxBatch        = 1000
)

// Event types the command domain appends to the event log.
const (
	EventProgress = events.TypeCommandProgress
	EventDone     = events.TypeCommandDone
)

// Request is a validated command.
type Request struct {
	Name    string
	Params  json.RawMessage
	TTL     int64
	Timeout int64
}

// ValidName reports whether name is 1 to MaxNameBytes letters, digits
// and - _ . :.
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > MaxNameBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == ':':
		default:
			return false
		}
	}
	return true
}

// Router is what the Service needs of delivery: whether a device can
// take a command now, word that one was queued for it, and word that a
// command it may hold was cancelled. Each is given the device as read
// before the call.
type Router interface {
	CommandOnline(dev store.Device) bool
	NotifyCommand(c store.Command, dev store.Device)
	CancelCommand(c store.Command)
}

// Waker tells the other nodes of a cluster that a command ended, so the
// calls waiting for it there wake (nil on a single node).
type Waker interface {
	CommandEnded(ctx context.Context, appKey string, id int64)
}

// Store is what the Service needs of the store.
type Store interface {
	GetDevice(ctx context.Context, appKey, name string) (store.Device, error)
	GetDevices(ctx context.Context, appKey string, names []string) ([]store.Device, error)
	Barrier(ctx context.Context) error
	StartJob(ctx context.Context, appKey string, id, step, next int64, starts []store.JobStart) ([]store.Command, error)
	store.Commands
}

var _ Store = store.Store(nil)

// Service accepts commands, keeps their states and wakes their waiters.
type Service struct {
	store   Store
	ids     *idgen.Generator
	router  Router
	waker   Waker
	log     *slog.Logger
	now     func() time.Time
	waiters waiters
	answers *answerStage // nil unless the store is a store.CommandBatcher

	// dropped counts answers and progress reports dropped: late,
	// repeated, or for a command that is unknown or ended.
	dropped atomic.Int64
	// lastSend is when the last Send began (Unix ns): jobs give way to
	// commands sent through the API (Sending).
	lastSend atomic.Int64
}

// Sending reports whether a Send began within the last second.
func (s *Service) Sending() bool {
	last := s.lastSend.Load()
	return last != 0 && s.now().UnixNano()-last < int64(time.Second)
}

// NewService returns a Service that stores in st and numbers commands
// with ids (shared with messages, so the ids of both never meet).
func NewService(st Store, ids *idgen.Generator, log *slog.Logger) *Service {
	s := &Service{store: st, ids: ids, router: offline{}, log: log, now: time.Now}
	if b, ok := st.(store.CommandBatcher); ok {
		s.answers = &answerStage{s: s, b: b}
	}
	return s
}

// SetRouter gives the Service its delivery; call before use.
func (s *Service) SetRouter(r Router) { s.router = r }

// SetWaker puts the Service in cluster mode; call before use.
func (s *Service) SetWaker(w Waker) { s.waker = w }

// SetClock has s take the time from now; for tests.
func (s *Service) SetClock(now func() time.Time) { s.now = now }

// Dropped counts the answers and progress reports dropped since start.
func (s *Service) Dropped() int64 { return s.dropped.Load() }

type offline struct{}

func (offline) CommandOnline(store.Device) bool           { return false }
func (offline) NotifyCommand(store.Command, store.Device) {}
func (offline) CancelCommand(store.Command)               {}

// Result is one device's outcome of a send: the command, or Code and
// Message when the name was refused (unknown or repeated, 1003).
type Result struct {
	Command    store.Command
	DeviceName string
	Code       int
	Message    string
}

// Refused reports whether r is a refused name rather than a command.
func (r Result) Refused() bool { return r.Code != 0 && r.Command.ID == 0 }

// Codes of a refused name in a batch: 1002 an empty name, 1003 an
// unknown or repeated one (as in a batch send of messages).
const (
	CodeMissing = 1002
	CodeInvalid = 1003
)

// Send accepts req for each named device of app, in one durable write
// with the seq_no entry seq builds. single: one device, whose unknown
// name is an *errdefs.NotFoundError rather than a refused result.
// Errors are the store's (store.ErrSeqUsed when the seq_no was recorded
// meanwhile).
func (s *Service) Send(ctx context.Context, app store.App, names []string, req Request, single bool, seqNo int64, seq store.CommandSeq) ([]Result, error) {
	s.lastSend.Store(s.now().UnixNano())
	devs, err := s.store.GetDevices(ctx, app.Key, names)
	if err != nil {
		return nil, fmt.Errorf("read devices: %w", err)
	}
	byName := devicesByName(devs)
	now := s.now().UnixMilli()
	results := make([]Result, len(names))
	cmds := make([]store.Command, 0, len(names))
	at := make([]int, 0, len(names))
	var seen map[string]bool // names taken; a single name needs none
	if len(names) > 1 {
		seen = make(map[string]bool, len(names))
	}
	for i, name := range names {
		dev, ok := byName.get(name)
		switch {
		case name == "" && !single:
			results[i] = Result{DeviceName: name, Code: CodeMissing, Message: "device_names holds an empty name: a device name is required"}
			continue
		case !ok && single:
			return nil, errdefs.NotFound("device", name)
		case !ok:
			results[i] = Result{DeviceName: name, Code: CodeInvalid, Message: "device " + strconv.Quote(name) + " not found"}
			continue
		case seen[name]:
			results[i] = Result{DeviceName: name, Code: CodeInvalid, Message: "device " + strconv.Quote(name) + " repeated in device_names"}
			continue
		}
		if seen != nil {
			seen[name] = true
		}
		cmds = append(cmds, s.newCommand(app.Key, dev, req, now))
		at = append(at, i)
	}
	stored, err := s.store.CreateCommands(ctx, app.Key, cmds, seqNo, func(cs []store.Command) *store.SeqEntry {
		if seq == nil {
			return nil
		}
		rs := make([]Result, len(results))
		copy(rs, results)
		for j, c := range cs {
			rs[at[j]] = Result{Command: c, DeviceName: c.DeviceName}
		}
		return seq(commandsOf(rs))
	})
	if err != nil {
		return nil, err
	}
	for j, c := range stored {
		results[at[j]] = Result{Command: c, DeviceName: c.DeviceName}
	}
	s.notify(stored, byName)
	return results, nil
}

// notify hands the router the queued ones of stored, which are durable,
// with their devices: in one call where it takes many (BatchRouter).
func (s *Service) notify(stored []store.Command, byName deviceIndex) {
	if len(stored) == 1 {
		if c := stored[0]; c.State == store.CmdQueued {
			dev, _ := byName.get(c.DeviceName)
			s.router.NotifyCommand(c, dev)
		}
		return
	}
	n := 0
	for i := range stored {
		if stored[i].State == store.CmdQueued {
			n++
		}
	}
	queued := stored // most often every one is queued
	if n < len(stored) {
		queued = make([]store.Command, 0, n)
		for _, c := range stored {
			if c.State == store.CmdQueued {
				queued = append(queued, c)
			}
		}
	}
	queuedDevs := make([]store.Device, len(queued))
	for i := range queued {
		queuedDevs[i], _ = byName.get(queued[i].DeviceName)
	}
	if br, ok := s.router.(BatchRouter); ok && len(queued) > 1 {
		br.NotifyCommands(queued, queuedDevs)
		return
	}
	for i, c := range queued {
		s.router.NotifyCommand(c, queuedDevs[i])
	}
}

// deviceIndex finds devices by name: by a scan of a few, by a map of
// many (a map made for every single command was a fiftieth of the
// server's allocations under command load).
type deviceIndex struct {
	devs []store.Device
	m    map[string]store.Device
}

func devicesByName(devs []store.Device) deviceIndex {
	if len(devs) <= 8 {
		return deviceIndex{devs: devs}
	}
	m := make(map[string]store.Device, len(devs))
	for _, d := range devs {
		m[d.Name] = d
	}
	return deviceIndex{m: m}
}

func (x deviceIndex) get(name string) (store.Device, bool) {
	if x.m != nil {
		d, ok := x.m[name]
		return d, ok
	}
	for _, d := range x.devs {
		if d.Name == name {
			return d, true
		}
	}
	return store.Device{}, false
}

// commandsOf flattens results for a CommandSeq: refused names become
// commands with ID 0, DeviceName, Code and Message.
func commandsOf(rs []Result) []store.Command {
	out := make([]store.Command, len(rs))
	for i, r := range rs {
		if r.Refused() {
			out[i] = store.Command{DeviceName: r.DeviceName, Code: r.Code, Message: r.Message}
		} else {
			out[i] = r.Command
		}
	}
	return out
}

// newCommand is req for dev: queued, or already ended when dev is
// disabled (rejected, 3003) or, with ttl 0, not online (offline).
func (s *Service) newCommand(appKey string, dev store.Device, req Request, now int64) store.Command {
	c := store.Command{
		ID: s.ids.Next(), AppKey: appKey, DeviceName: dev.Name, Name: req.Name, Params: req.Params,
		TTL: req.TTL, Timeout: req.Timeout, State: store.CmdQueued, TimeCreate: now,
	}
	switch {
	case dev.Flag == store.FlagDisabled:
		c.State, c.Code, c.Message = store.CmdRejected, store.CodeDeviceDisabled, "device disabled"
	case req.TTL == 0 && !s.router.CommandOnline(dev):
		c.State, c.Message = store.CmdOffline, "device offline and ttl is 0"
	default:
		return c
	}
	c.TimeDone = now
	c.Emit = []store.Event{doneEvent(c, now)}
	return c
}

// Get returns the app's command id; a *errdefs.NotFoundError if the app
// has none.
func (s *Service) Get(ctx context.Context, appKey string, id int64) (store.Command, error) {
	c, err := s.store.GetCommand(ctx, appKey, id)
	if err == nil {
		// Sent is written lazily, and a store lets reads see a synced
		// write before its fsync: durable before shown.
		err = s.store.Barrier(ctx)
	}
	return c, commandErr(id, err)
}

func commandErr(id int64, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return errdefs.NotFound("command", id)
	}
	return fmt.Errorf("command %d: %w", id, err)
}

// Cancel ends the app's command id as cancelled if it is open; a
// command that reached its device is told so (cmd/cancel). An ended
// command is returned as it is.
func (s *Service) Cancel(ctx context.Context, appKey string, id int64) (store.Command, error) {
	var was string
	c, err := s.update(ctx, appKey, id, func(c *store.Command, now int64) bool {
		was = c.State
		if !c.Open() {
			return false
		}
		s.finish(c, store.CmdCancelled, 0, nil, "cancelled", now)
		return true
	})
	if err != nil {
		return c, commandErr(id, err)
	}
	if !store.CmdOpen(was) {
		// Ended already, as read: its end may still be syncing.
		return c, commandErr(id, s.store.Barrier(ctx))
	}
	if was != store.CmdQueued {
		s.router.CancelCommand(c)
	}
	return c, nil
}

// errUnchanged makes UpdateCommand write nothing.
var errUnchanged = errors.New("command unchanged")

// update applies fn, which reports whether it changed the command, and
// wakes the command's waiters when it ended. A command fn leaves alone
// is returned as it is.
func (s *Service) update(ctx context.Context, appKey string, id int64, fn func(c *store.Command, now int64) bool) (store.Command, error) {
	// What the closure keeps lives on the heap: a flag for every write,
	// and a copy of the command only when fn leaves it alone.
	var seen struct {
		wasOpen   bool
		unchanged *store.Command
	}
	c, err := s.store.UpdateCommand(ctx, appKey, id, func(c *store.Command) error {
		seen.wasOpen = c.Open()
		before := *c
		if !fn(c, s.now().UnixMilli()) {
			unchanged := before
			seen.unchanged = &unchanged
			return errUnchanged
		}
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return *seen.unchanged, nil
	}
	if err != nil {
		return c, err
	}
	if seen.wasOpen && !c.Open() {
		s.ended(ctx, c)
	}
	return c, nil
}

// finish ends c in state with its answer, and emits command.done.
func (s *Service) finish(c *store.Command, state string, code int, result json.RawMessage, msg string, now int64) {
	c.State, c.Code, c.Result, c.Message, c.TimeDone = state, code, result, msg, now
	c.Emit = append(c.Emit, doneEvent(*c, now))
}

// ended wakes the calls waiting for c, here and on the other nodes.
func (s *Service) ended(ctx context.Context, c store.Command) {
	s.waiters.wakeEnded(c)
	if s.waker != nil {
		s.waker.CommandEnded(ctx, c.AppKey, c.ID)
	}
}

// Woken wakes the calls here waiting for command id, which ended on
// another node.
func (s *Service) Woken(id int64) { s.waiters.wake(id) }

// Recheck reads every command a call here waits for and wakes the calls
// of those that have ended. An end on another node reaches the calls
// here as an event (Woken); Recheck finds the ends whose event was lost,
// because the node that stored the end died before sending it or the
// events did not reach this node for a while.
func (s *Service) Recheck(ctx context.Context) {
	var ended []int64
	for id, app := range s.waiters.watched() {
		c, err := s.store.GetCommand(ctx, app, id)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue // left to the call, which reads it when its wait ends
		}
		if !c.Open() {
			ended = append(ended, id)
		}
	}
	if len(ended) == 0 || s.store.Barrier(ctx) != nil {
		return
	}
	for _, id := range ended {
		s.waiters.wake(id)
	}
}

// doneEvent is c's command.done event: {"cmd_id","name","state","code",
// "result"?,"message","job_id"?} (docs/events.md), written by hand as
// json.Marshal would write it: every command ends with one.
func doneEvent(c store.Command, now int64) store.Event {
	b := make([]byte, 0, 128+len(c.Name)+len(c.Result)+len(c.Message))
	b = append(b, `{"cmd_id":"`...)
	b = strconv.AppendInt(b, c.ID, 10)
	b = append(b, `","name":`...)
	b = jsonfast.AppendString(b, c.Name)
	b = append(b, `,"state":`...)
	b = jsonfast.AppendString(b, c.State)
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(c.Code), 10)
	if len(c.Result) > 0 {
		if r, err := jsonfast.AppendRaw(append(b, `,"result":`...), c.Result); err == nil {
			b = r // results are JSON checked on their way in
		}
	}
	b = append(b, `,"message":`...)
	b = jsonfast.AppendString(b, c.Message)
	if c.Job != 0 {
		b = append(b, `,"job_id":"`...)
		b = strconv.AppendInt(b, c.Job, 10)
		b = append(b, '"')
	}
	b = append(b, '}')
	return store.Event{Type: EventDone, AppKey: c.AppKey, DeviceName: c.DeviceName, Time: now, Data: b}
}

func progressEvent(c store.Command, details json.RawMessage, now int64) store.Event {
	data := struct {
		CmdID    string          `json:"cmd_id"`
		Name     string          `json:"name"`
		Progress int             `json:"progress"`
		Details  json.RawMessage `json:"details,omitempty"`
	}{strconv.FormatInt(c.ID, 10), c.Name, c.Progress, details}
	b, _ := json.Marshal(data)
	return store.Event{Type: EventProgress, AppKey: c.AppKey, DeviceName: c.DeviceName, Time: now, Data: b}
}
