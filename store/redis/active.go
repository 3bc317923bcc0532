package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// Activity indexes. ReadOutbox, CallbackQueues and ExpiredMessages look
// at every app, but each app's outbox, queues and expiry index live in
// the app's slot, where a script cannot also write a global key. So a
// global set per kind lists the apps that may hold entries of that kind,
// and readers merge those apps' entries. The set may list an idle app
// (readers find nothing there, then prune it); it must never miss an app
// that holds entries, or they would wait until its next write.
//
// Each app has a flag per kind in its own slot: "1" listed, "0" being
// unlisted, absent not listed. The protocol:
//   - a writer that adds entries first adds the app to the global set (in
//     globalStep, before its write); its script then sets the flag to "1"
//     and, if it was not "1", asks for the app to be added again after
//     the write (listApp);
//   - a reader that finds an app idle runs pruneScript, which sets the
//     flag to "0" if the app still holds nothing; removes the app from the
//     set; then runs unlistScript, which deletes the flag, or, if a writer
//     set it to "1" meanwhile, puts the app back.
//
// Whichever way a writer and a pruner interleave, the last change to the
// set after the writer's entries land is an add. Only a crash between a
// writer's script and its add (after a prune raced with it) leaves an app
// out; Open adds every app whose flag is set (repairActive).

// Activity kinds.
const (
	activeCB  = "cb"  // outbox entries or callback delivery queues
	activeExp = "exp" // pending messages in the expiry index
)

func (s *Store) activeKey(kind string) string    { return s.global + ":act:" + kind }
func (s *Store) flagKey(app, kind string) string { return s.app(app) + "act:" + kind }

// idleKeys are the collections of an app that must all be absent (Redis
// deletes an empty set or sorted set) for the app to leave an index.
func (s *Store) idleKeys(app, kind string) []string {
	if kind == activeExp {
		return []string{s.expKey(app)}
	}
	return []string{s.outboxKey(app), s.cbQueuesKey(app)}
}

// globalStep runs globalScript: it raises the highest message id to id
// (unless ""), hands out n Seqs and returns the last, and adds the app
// to the cb index when n > 0 and to the exp index when exp.
func (s *Store) globalStep(ctx context.Context, id string, n int, app string, exp bool) (int64, error) {
	keys := []string{s.maxIDKey(), s.seqCounterKey(), s.activeKey(activeCB), s.activeKey(activeExp)}
	last, err := s.run(ctx, globalScript, keys, id, n, app, boolArg(n > 0), boolArg(exp)).Int64()
	if err != nil {
		return 0, fmt.Errorf("global step: %w", err)
	}
	return last, nil
}

// listApp adds the app to the indexes named by a script's flagList bits.
func (s *Store) listApp(ctx context.Context, app string, bits int64) error {
	if bits <= 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		if bits&flagListCB != 0 {
			p.SAdd(ctx, s.activeKey(activeCB), app)
		}
		if bits&flagListExp != 0 {
			p.SAdd(ctx, s.activeKey(activeExp), app)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("index app %s: %w", app, err)
	}
	return nil
}

// prune drops the idle apps from the kind's index.
func (s *Store) prune(ctx context.Context, kind string, apps []string) error {
	for _, app := range apps {
		flag := s.flagKey(app, kind)
		n, err := s.run(ctx, pruneScript, append([]string{flag}, s.idleKeys(app, kind)...)).Int64()
		if err != nil {
			return fmt.Errorf("prune %s: %w", app, err)
		}
		if n == 0 {
			continue // not idle, or another reader is pruning it
		}
		if err := s.rdb.SRem(ctx, s.activeKey(kind), app).Err(); err != nil {
			return fmt.Errorf("prune %s: %w", app, err)
		}
		back, err := s.run(ctx, unlistScript, []string{flag}).Int64()
		if err != nil {
			return fmt.Errorf("prune %s: %w", app, err)
		}
		if back == 1 {
			if err := s.rdb.SAdd(ctx, s.activeKey(kind), app).Err(); err != nil {
				return fmt.Errorf("prune %s: %w", app, err)
			}
		}
	}
	return nil
}

// repairActive adds every known app whose flag of a kind is "1" to that
// kind's index, repairing what a crash between a write and its listApp
// left out. (A flag left at "0" by a crashed pruner means no writer came
// since the app was idle.)
func (s *Store) repairActive(ctx context.Context) error {
	apps, err := s.rdb.ZRange(ctx, s.appsKey(), 0, -1).Result()
	if err != nil {
		return fmt.Errorf("repair activity indexes: %w", err)
	}
	kinds := []string{activeCB, activeExp}
	cmds := make([]*goredis.StringCmd, 0, len(apps)*len(kinds))
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, app := range apps {
			for _, k := range kinds {
				cmds = append(cmds, p.Get(ctx, s.flagKey(app, k)))
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return fmt.Errorf("repair activity indexes: %w", err)
	}
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, c := range cmds {
			if c.Val() == "1" {
				p.SAdd(ctx, s.activeKey(kinds[i%len(kinds)]), apps[i/len(kinds)])
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("repair activity indexes: %w", err)
	}
	return nil
}
