package redis

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/redis/redistest"
)

// TestFullRedisRefusesWritesAtOnce: a Redis at maxmemory (noeviction) or
// whose last snapshot failed to save (MISCONF) refuses writes; the store
// returns store.ErrFull at once, reads go on, and writes succeed again
// once Redis takes them.
func TestFullRedisRefusesWritesAtOnce(t *testing.T) {
	if !redistest.Installed() {
		t.Skip(redistest.NotInstalled)
	}
	dir := t.TempDir()
	srv, err := redistest.Start(dir, "--enable-protected-configs", "yes") // to move dir below
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	s, err := Open(ctx, Options{Addrs: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer admin.Close()
	app := store.App{Key: "full-app", Name: "full", MasterSecret: "s"}
	if err := s.CreateApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	n := 0
	write := func() error {
		n++
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return s.PutMeta(ctx, "full-test", []byte(strings.Repeat("x", n)))
	}
	refused := func(why string) {
		t.Helper()
		start := time.Now()
		err := write()
		if !errors.Is(err, store.ErrFull) || time.Since(start) > time.Second {
			t.Fatalf("%s: a write returned %v after %s, want store.ErrFull at once", why, err, time.Since(start))
		}
		if _, err := s.GetApp(ctx, app.Key); err != nil {
			t.Fatalf("%s: a read failed: %v", why, err)
		}
	}

	must(t, admin.ConfigSet(ctx, "maxmemory", "1").Err())
	refused("maxmemory")
	must(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
	must(t, write())

	// A snapshot that cannot be saved (its directory gone) stops writes.
	gone := filepath.Join(dir, "gone")
	must(t, os.Mkdir(gone, 0o700))
	must(t, admin.ConfigSet(ctx, "dir", gone).Err())
	must(t, admin.ConfigSet(ctx, "stop-writes-on-bgsave-error", "yes").Err())
	must(t, admin.ConfigSet(ctx, "save", "3600 1").Err()) // MISCONF needs snapshots on
	must(t, os.Remove(gone))
	must(t, admin.BgSave(ctx).Err())
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := admin.Info(ctx, "persistence").Result()
		must(t, err)
		if strings.Contains(info, "rdb_last_bgsave_status:err") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot did not fail:\n%s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	refused("MISCONF")
	must(t, admin.ConfigSet(ctx, "dir", dir).Err())
	must(t, admin.ConfigSet(ctx, "stop-writes-on-bgsave-error", "no").Err())
	must(t, write())
}
