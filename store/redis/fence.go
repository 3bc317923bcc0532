package redis

import (
	"context"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
)

// The fence. In cluster mode a node's writes must stop landing the moment
// another process takes its node_id (a node paused past its heartbeat TTL
// and then resumed would otherwise write with ids and presence entries
// that are no longer its own). Package cluster keeps, per node_id, a key
// holding the token of the process that claimed it last; SetFence makes
// every script and every optimistic transaction of this Store check,
// inside Redis and atomically with its writes, that the key still holds
// this process's token.
//
// Only where a script may read that key: on standalone Redis and Sentinel.
// On Redis Cluster the key lives in another slot than the app's keys, so
// the fence is the node's local lease alone (see package cluster).

// fenceLua starts every script. It takes the fence token off ARGV and,
// when the token is not empty, the fence key off KEYS, so the script
// proper sees its own KEYS and ARGV as before, and refuses to run unless
// the key holds the token.
const fenceLua = `
local fence = table.remove(ARGV, 1)
if fence ~= '' and redis.call('GET', table.remove(KEYS, 1)) ~= fence then
  return redis.error_reply('FENCED this node does not hold its node_id')
end
`

// fencedPrefix starts the error of a script refused by fenceLua.
const fencedPrefix = "FENCED "

func newScript(src string) *goredis.Script { return goredis.NewScript(fenceLua + src) }

// SetFence fences every later script and transaction of the Store with
// key, which must hold token for them to write; they fail with
// store.ErrFenced otherwise. It reports whether Redis enforces the fence:
// false on Redis Cluster, where it is a no-op. Call it before the Store is
// used by more than one goroutine.
func (s *Store) SetFence(key, token string) bool {
	if !s.inline {
		return false
	}
	s.fenceKey, s.fenceToken = key, token
	return true
}

// run runs a script with the fence's key and token in front of its own.
func (s *Store) run(ctx context.Context, sc *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	if s.fenceKey != "" {
		keys = append([]string{s.fenceKey}, keys...)
		args = append([]any{s.fenceToken}, args...)
	} else {
		args = append([]any{""}, args...)
	}
	cmd := sc.Run(ctx, s.rdb, keys, args...)
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), fencedPrefix) {
		cmd.SetErr(store.ErrFenced)
	}
	return cmd
}

// checkFence is the fence inside an optimistic transaction: the key is
// watched with the others (watch), so if it changes before EXEC nothing
// is written.
func (s *Store) checkFence(ctx context.Context, tx *goredis.Tx) error {
	if s.fenceKey == "" {
		return nil
	}
	v, err := tx.Get(ctx, s.fenceKey).Result()
	if err != nil && err != goredis.Nil {
		return err
	}
	if v != s.fenceToken {
		return store.ErrFenced
	}
	return nil
}
