package command

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/devmsg/devmsg/store"
)

// answerBatch is the most answers one store write takes.
const answerBatch = 256

// answerReq is a device's answer waiting for its store write.
type answerReq struct {
	app    string
	device string
	r      Reply
	took   bool
	err    error
	done   chan struct{}
}

// answerStage stores the answers of many devices in shared store writes
// (store.CommandBatcher). One write applies at a time and takes every
// answer that came while the one before it applied; a write's fsync
// wait overlaps the next one's apply. An answer that finds no write
// applying starts one at once, so an answer alone is stored as soon as
// it would be on its own; under load the answers share commits, events
// lock and memtable apply (docs/perf-notes.md, "Commands and their
// answers").
type answerStage struct {
	s *Service
	b store.CommandBatcher

	mu       sync.Mutex
	queue    []*answerReq
	applying bool // a write is applying; it starts the next when visible
	// unsupported is set once the store turned batches down
	// (errors.ErrUnsupported): answers are then written one by one.
	unsupported atomic.Bool
}

// answer stores r as Service.Answer does, in a shared write, and
// returns once it is durable.
func (st *answerStage) answer(ctx context.Context, app, device string, r Reply) (bool, error) {
	if st.unsupported.Load() {
		return st.s.answerAlone(ctx, app, device, r)
	}
	req := &answerReq{app: app, device: device, r: r, done: make(chan struct{})}
	st.mu.Lock()
	st.queue = append(st.queue, req)
	start := !st.applying
	st.applying = true
	st.mu.Unlock()
	if start {
		go st.write()
	}
	select {
	case <-req.done:
		return req.took, req.err
	case <-ctx.Done():
		// The write goes on; its outcome is not waited for.
		return false, ctx.Err()
	}
}

// visible hands the apply on: to a new write of the answers queued
// meanwhile, if any.
func (st *answerStage) visible() {
	st.mu.Lock()
	next := len(st.queue) > 0
	st.applying = next
	st.mu.Unlock()
	if next {
		go st.write()
	}
}

// take removes up to answerBatch answers from the queue.
func (st *answerStage) take() []*answerReq {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := min(len(st.queue), answerBatch)
	batch := st.queue[:n:n]
	st.queue = st.queue[n:]
	if len(st.queue) == 0 {
		st.queue = nil
	}
	return batch
}

// write stores a batch of queued answers and tells each its outcome.
func (st *answerStage) write() {
	batch := st.take()
	s := st.s
	now := s.now().UnixMilli()
	updates := make([]store.CommandUpdate, len(batch))
	for i, req := range batch {
		updates[i] = store.CommandUpdate{AppKey: req.app, ID: req.r.ID, Fn: func(c *store.Command) error {
			req.took = s.answerFn(c, req.device, req.r, now) // fn runs again when a store retries the write
			if !req.took {
				return errUnchanged
			}
			return nil
		}}
	}
	ctx := context.Background()
	out, errs, err := st.b.UpdateCommands(ctx, updates, st.visible)
	if errors.Is(err, errors.ErrUnsupported) {
		st.unsupported.Store(true)
		for _, req := range batch {
			go func() {
				req.took, req.err = s.answerAlone(ctx, req.app, req.device, req.r)
				close(req.done)
			}()
		}
		return
	}
	dropped := false
	for i, req := range batch {
		e := err
		if e == nil {
			e = errs[i]
		}
		switch {
		case e == nil: // an answer taken ends its command
			s.ended(ctx, out[i])
		case errors.Is(e, errUnchanged), errors.Is(e, store.ErrNotFound):
			req.took = false
		default:
			req.took, req.err = false, e
		}
		dropped = dropped || req.err == nil && !req.took
	}
	var berr error
	if dropped {
		// As in answerAlone: the answer that ended such a command may
		// still be syncing.
		berr = s.store.Barrier(ctx)
	}
	for _, req := range batch {
		if req.err == nil && !req.took {
			s.dropped.Add(1)
			req.err = berr
		}
		close(req.done)
	}
}
