package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store/redis/redistest"
)

// TestOpenWaitsWhileLoading: a Redis restarted together with devmsg (a
// host reboot) answers LOADING until it has read its files back; Open
// waits for it rather than failing the start.
func TestOpenWaitsWhileLoading(t *testing.T) {
	if !redistest.Installed() {
		t.Skip(redistest.NotInstalled)
	}
	srv, err := redistest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	const keys = 1500
	pipe := c.Pipeline()
	for i := range keys {
		pipe.Set(ctx, fmt.Sprintf("k%d", i), "v", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// Into the AOF's base snapshot, whose loading key-load-delay slows.
	if err := c.BgRewriteAOF(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		info, err := c.Info(ctx, "persistence").Result()
		if err == nil && strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("AOF rewrite did not finish: %v\n%s", err, info)
		}
	}
	// 2 ms a key: some 3 s of LOADING, answering clients every KiB read.
	if err := srv.RestartLoading("--key-load-delay", "2000", "--loading-process-events-interval-bytes", "1024"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := c.Get(ctx, "k0").Err()
		if goredis.HasErrorPrefix(err, "LOADING") {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("redis-server never answered LOADING (last: %v); the test cannot tell", err)
		}
	}
	s, err := Open(ctx, Options{Addrs: []string{srv.Addr}, Prefix: "loading"})
	if err != nil {
		t.Fatalf("Open during LOADING: %v", err)
	}
	s.Close()
	if n, err := c.DBSize(ctx).Result(); err != nil || n < keys {
		t.Fatalf("after Open, DBSIZE = %d, %v; want the %d keys loaded", n, err, keys)
	}
}
