package cluster

import (
	"context"
	"errors"

	"github.com/devmsg/devmsg/store"
)

// Fence returns st refusing, with store.ErrFenced, every write and every
// read that hands out work (a device's pending messages, the callback
// outbox and queues, expired messages) while this node does not know its
// claim on its node_id to be valid, and Ping too, so /readyz turns the
// load balancer away. Nothing else changes: the domain packages use it as
// any store. A refusal from Redis's own fence (redis.Store.SetFence) makes
// the node doubt its claim until its next heartbeat settles it.
//
// The check comes before the call, so a node paused between the check and
// its write reaches Redis late: Redis's fence refuses that write where it
// can (standalone, Sentinel); on Redis Cluster it lands (see
// docs/operations.md).
func (n *Node) Fence(st store.Store) store.Store { return &fenced{Store: st, n: n} }

type fenced struct {
	store.Store
	n *Node
}

var _ store.Store = (*fenced)(nil)

func (f *fenced) check() error {
	if !f.n.Valid() {
		return store.ErrFenced
	}
	return nil
}

// done passes err on, doubting the claim when Redis refused the write.
func (f *fenced) done(err error) error {
	if errors.Is(err, store.ErrFenced) {
		f.n.doubt()
	}
	return err
}

func (f *fenced) CreateApp(ctx context.Context, app store.App) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.CreateApp(ctx, app))
}

func (f *fenced) UpdateApp(ctx context.Context, key string, fn func(*store.App) error) (store.App, error) {
	if err := f.check(); err != nil {
		return store.App{}, err
	}
	a, err := f.Store.UpdateApp(ctx, key, fn)
	return a, f.done(err)
}

func (f *fenced) CreateDevices(ctx context.Context, appKey string, devices []store.Device) ([]error, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	res, err := f.Store.CreateDevices(ctx, appKey, devices)
	return res, f.done(err)
}

func (f *fenced) UpdateDevice(ctx context.Context, appKey, name string, fn func(*store.Device) error) (store.Device, error) {
	if err := f.check(); err != nil {
		return store.Device{}, err
	}
	d, err := f.Store.UpdateDevice(ctx, appKey, name, fn)
	return d, f.done(err)
}

func (f *fenced) DeleteDevice(ctx context.Context, appKey, name string, evs ...store.Event) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.DeleteDevice(ctx, appKey, name, evs...))
}

func (f *fenced) SetDesired(ctx context.Context, u store.DesiredUpdate, seqNo int64, seq *store.SeqEntry) (store.Shadow, error) {
	if err := f.check(); err != nil {
		return store.Shadow{}, err
	}
	sh, err := f.Store.SetDesired(ctx, u, seqNo, seq)
	return sh, f.done(err)
}

func (f *fenced) PutSeq(ctx context.Context, appKey string, seqNo int64, e store.SeqEntry) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.PutSeq(ctx, appKey, seqNo, e))
}

func (f *fenced) CreateMessage(ctx context.Context, m store.Message, seqNo int64, seq *store.SeqEntry) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.CreateMessage(ctx, m, seqNo, seq))
}

func (f *fenced) PendingMessages(ctx context.Context, appKey, deviceName string, limit int) ([]store.Message, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.PendingMessages(ctx, appKey, deviceName, limit)
}

func (f *fenced) UpdateMessage(ctx context.Context, appKey string, id int64, fn func(*store.Message) error) (store.Message, error) {
	if err := f.check(); err != nil {
		return store.Message{}, err
	}
	m, err := f.Store.UpdateMessage(ctx, appKey, id, fn)
	return m, f.done(err)
}

func (f *fenced) PendingIDs(ctx context.Context, appKey, deviceName string, limit int) ([]int64, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.PendingIDs(ctx, appKey, deviceName, limit)
}

func (f *fenced) UpdateMessages(ctx context.Context, updates []store.MessageUpdate) ([]error, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	errs, err := f.Store.UpdateMessages(ctx, updates)
	for _, e := range errs {
		f.done(e)
	}
	return errs, f.done(err)
}

func (f *fenced) ExpiredMessages(ctx context.Context, before int64, limit int) ([]store.Message, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.ExpiredMessages(ctx, before, limit)
}

func (f *fenced) ReadOutbox(ctx context.Context, after int64, limit int) ([]store.OutboxHead, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.ReadOutbox(ctx, after, limit)
}

func (f *fenced) RouteOutbox(ctx context.Context, routes []store.OutboxRoute) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.RouteOutbox(ctx, routes))
}

func (f *fenced) CallbackQueues(ctx context.Context) ([]store.CallbackQueue, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.CallbackQueues(ctx)
}

func (f *fenced) ReadCallbacks(ctx context.Context, q store.CallbackQueue, after int64, limit int) ([]store.OutboxEntry, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.ReadCallbacks(ctx, q, after, limit)
}

func (f *fenced) DeleteCallbacks(ctx context.Context, q store.CallbackQueue, seqs []int64) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.DeleteCallbacks(ctx, q, seqs))
}

func (f *fenced) MoveCallbacks(ctx context.Context, from store.CallbackQueue, entries []store.OutboxEntry, toURL string) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.MoveCallbacks(ctx, from, entries, toURL))
}

func (f *fenced) PutDeadLetter(ctx context.Context, d store.DeadLetter) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.PutDeadLetter(ctx, d))
}

func (f *fenced) RedeliverDeadLetter(ctx context.Context, appKey, id string) (store.DeadLetter, error) {
	if err := f.check(); err != nil {
		return store.DeadLetter{}, err
	}
	d, err := f.Store.RedeliverDeadLetter(ctx, appKey, id)
	return d, f.done(err)
}

func (f *fenced) ReportProperties(ctx context.Context, r store.Report) (store.Shadow, error) {
	if err := f.check(); err != nil {
		return store.Shadow{}, err
	}
	sh, err := f.Store.ReportProperties(ctx, r)
	return sh, f.done(err)
}

func (f *fenced) ResetPresence(ctx context.Context, node int, loginBefore, now int64, offline func(store.Device) []store.Event) (int, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	c, err := f.Store.ResetPresence(ctx, node, loginBefore, now, offline)
	return c, f.done(err)
}

func (f *fenced) AppendEvents(ctx context.Context, evs []store.Event) ([]store.Event, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	out, err := f.Store.AppendEvents(ctx, evs)
	return out, f.done(err)
}

func (f *fenced) TrimEvents(ctx context.Context, appKey string, olderThan int64, max int) (int, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	n, err := f.Store.TrimEvents(ctx, appKey, olderThan, max)
	return n, f.done(err)
}

func (f *fenced) PutMeta(ctx context.Context, key string, value []byte) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.PutMeta(ctx, key, value))
}

func (f *fenced) CreateMeta(ctx context.Context, key string, value []byte) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.CreateMeta(ctx, key, value))
}

func (f *fenced) Ping(ctx context.Context) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.Ping(ctx)
}

func (f *fenced) CreateCommands(ctx context.Context, appKey string, cmds []store.Command, seqNo int64, seq store.CommandSeq) ([]store.Command, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	out, err := f.Store.CreateCommands(ctx, appKey, cmds, seqNo, seq)
	return out, f.done(err)
}

func (f *fenced) UpdateCommand(ctx context.Context, appKey string, id int64, fn func(*store.Command) error) (store.Command, error) {
	if err := f.check(); err != nil {
		return store.Command{}, err
	}
	c, err := f.Store.UpdateCommand(ctx, appKey, id, fn)
	return c, f.done(err)
}

// GetCommand is fenced like OpenCommands: a command read to be sent to
// its device (one waiting for a place in the window) is not sent by a
// node that lost its node_id.
func (f *fenced) GetCommand(ctx context.Context, appKey string, id int64) (store.Command, error) {
	if err := f.check(); err != nil {
		return store.Command{}, err
	}
	return f.Store.GetCommand(ctx, appKey, id)
}

// OpenCommands is fenced as PendingMessages is: what it returns is sent
// to devices.
func (f *fenced) OpenCommands(ctx context.Context, appKey, device string, limit int) ([]store.Command, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.OpenCommands(ctx, appKey, device, limit)
}

func (f *fenced) CreateJob(ctx context.Context, j store.Job, targets []string, seqNo int64, seq *store.SeqEntry) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.done(f.Store.CreateJob(ctx, j, targets, seqNo, seq))
}

func (f *fenced) UpdateJob(ctx context.Context, appKey string, id int64, fn func(*store.Job) error) (store.Job, error) {
	if err := f.check(); err != nil {
		return store.Job{}, err
	}
	j, err := f.Store.UpdateJob(ctx, appKey, id, fn)
	return j, f.done(err)
}

func (f *fenced) StartJob(ctx context.Context, appKey string, id, step, next int64, starts []store.JobStart) ([]store.Command, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	out, err := f.Store.StartJob(ctx, appKey, id, step, next, starts)
	return out, f.done(err)
}
