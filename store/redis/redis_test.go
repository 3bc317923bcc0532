package redis

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/redis/redistest"
	"github.com/devmsg/devmsg/store/storetest"
)

// The tests run against a real redis-server that TestMain starts on a
// free loopback port, with AOF on, in a temporary directory. Each test
// gets its own key prefix, so they share the server without seeing one
// another's keys. DEVMSG_TEST_REDIS=host:port uses a running server
// instead (its keys are left behind under "devmsgtest:").
var (
	standalone []string // addresses of the standalone server
	skipReason string   // why there is none
	runID      = strconv.FormatInt(time.Now().UnixNano(), 36)
	prefixes   atomic.Int64
)

const noServer = redistest.NotInstalled

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if addr := os.Getenv("DEVMSG_TEST_REDIS"); addr != "" {
		standalone = []string{addr}
		return m.Run()
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		skipReason = noServer
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "devmsg-redis-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.Start(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Stop()
	standalone = []string{srv.Addr}
	return m.Run()
}

// newPrefix returns a key prefix no other store of this run uses.
func newPrefix() string {
	return fmt.Sprintf("devmsgtest:%s:%d:", runID, prefixes.Add(1))
}

func open(t testing.TB, addrs []string, prefix string) *Store {
	t.Helper()
	if len(addrs) == 0 {
		t.Skip(skipReason)
	}
	s, err := Open(context.Background(), Options{Addrs: addrs, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newStore(addrs []string, split bool) func(t *testing.T) store.Store {
	return func(t *testing.T) store.Store {
		prefix := newPrefix()
		s := open(t, addrs, prefix)
		if split {
			s.inline = false
		}
		// Fenced as a cluster node's store is, where Redis allows it: the
		// suite shows every script and transaction works through a fence
		// that holds.
		if s.SetFence(prefix+"fence", "holder") {
			if err := s.rdb.Set(context.Background(), prefix+"fence", "holder", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
		return s
	}
}

// requireServer skips t when there is no server to test against.
func requireServer(t testing.TB) {
	if len(standalone) == 0 {
		t.Skip(skipReason)
	}
}

func TestConformance(t *testing.T) {
	requireServer(t)
	storetest.RunTests(t, newStore(standalone, false))
}

// TestConformanceSplit runs the suite with the global step of message
// writes apart from the app's script, as on Redis Cluster.
func TestConformanceSplit(t *testing.T) {
	requireServer(t)
	storetest.RunTests(t, newStore(standalone, true))
}

// TestReopen closes the client and opens a new one on the same server and
// prefix, which is what reopening means for a store that lives in Redis.
func TestReopen(t *testing.T) {
	requireServer(t)
	storetest.RunReopenTests(t, func(t *testing.T, dir string) store.Store {
		sum := sha256.Sum256([]byte(runID + dir))
		return open(t, standalone, fmt.Sprintf("devmsgtest:reopen:%x:", sum[:8]))
	})
}

// TestCluster runs the suite on a three-node Redis Cluster, where every
// script and transaction must keep to one hash slot.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node Redis Cluster")
	}
	requireServer(t)
	if os.Getenv("DEVMSG_TEST_REDIS") != "" {
		t.Skip("DEVMSG_TEST_REDIS is set: not starting servers")
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli is not installed (Debian package redis-tools)")
	}
	var addrs []string
	for i := range 3 {
		dir := filepath.Join(t.TempDir(), strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		srv, err := redistest.Start(dir, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		addrs = append(addrs, srv.Addr)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	waitCluster(t, addrs)
	if s := open(t, addrs, newPrefix()); s.inline {
		s.Close()
		t.Fatal("a Cluster client writes messages inline")
	} else {
		s.Close()
	}
	storetest.RunTests(t, newStore(addrs, false))
	storetest.RunReopenTests(t, func(t *testing.T, dir string) store.Store {
		sum := sha256.Sum256([]byte(runID + dir))
		return open(t, addrs, fmt.Sprintf("devmsgtest:reopen:%x:", sum[:8]))
	})
}

// waitCluster waits until every node reports cluster_state:ok.
func waitCluster(t *testing.T, addrs []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("cluster node %s not ready: %v %s", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
}

func TestOpenRejectsBracesInPrefix(t *testing.T) {
	_, err := Open(context.Background(), Options{Addrs: []string{"127.0.0.1:1"}, Prefix: "a{b}:"})
	if err == nil {
		t.Fatal("a prefix with a hash tag was accepted")
	}
}

// The benchmarks mirror store/pebble's: each op is one write as the REST
// API issues it, from many goroutines at once. The sub-benchmark names
// give Redis's appendfsync (always: every acknowledged write is fsync'd,
// as Pebble does; everysec: up to a second may be lost in a crash) and
// the number of writing goroutines.

// benchmarks runs fn for each appendfsync setting and writer count.
func benchmarks(b *testing.B, fn func(b *testing.B, s *Store, n int)) {
	requireServer(b)
	admin := goredis.NewClient(&goredis.Options{Addr: standalone[0]})
	defer admin.Close()
	for _, fsync := range []string{"always", "everysec"} {
		if err := admin.ConfigSet(context.Background(), "appendfsync", fsync).Err(); err != nil {
			b.Fatal(err)
		}
		for _, n := range storetest.Writers {
			b.Run(fmt.Sprintf("fsync=%s/goroutines=%d", fsync, n), func(b *testing.B) {
				s := open(b, standalone, newPrefix())
				defer s.Close()
				fn(b, s, n)
			})
		}
	}
	if err := admin.ConfigSet(context.Background(), "appendfsync", "everysec").Err(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkCreateMessageParallel(b *testing.B) {
	benchmarks(b, func(b *testing.B, s *Store, n int) { storetest.BenchCreateMessage(b, s, n) })
}

func BenchmarkSetDesiredParallel(b *testing.B) {
	benchmarks(b, func(b *testing.B, s *Store, n int) { storetest.BenchSetDesired(b, s, n) })
}

func BenchmarkAppendEventsParallel(b *testing.B) {
	benchmarks(b, func(b *testing.B, s *Store, n int) { storetest.BenchAppendEvents(b, s, n) })
}

// TestBarrier runs the Barrier suite on a redis-server of its own with
// appendfsync always, the setting docs/operations.md asks for; a crash is
// SIGKILL and a restart on the same append-only file. Fewer rounds than
// on Pebble: each restarts Redis, and Redis never shows a write before
// its fsync, so this checks the contract rather than hunting a window.
func TestBarrier(t *testing.T) {
	requireServer(t)
	if os.Getenv("DEVMSG_TEST_REDIS") != "" {
		t.Skip("needs a redis-server it can kill; DEVMSG_TEST_REDIS names a running one")
	}
	srv, err := redistest.Start(t.TempDir(), "--appendfsync", "always")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	storetest.RunBarrierTests(t, 3, func(t *testing.T) storetest.Crashable {
		prefix := newPrefix()
		s := open(t, []string{srv.Addr}, prefix)
		t.Cleanup(func() { s.Close() })
		return storetest.Crashable{Store: s, Crash: func(t *testing.T) store.Store {
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			after := open(t, []string{srv.Addr}, prefix)
			t.Cleanup(func() { after.Close() })
			return after
		}}
	})
}
