package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// redisServer is a redis-server the bench starts for --store redis, on a
// free loopback port with a temporary dir, persisting through its
// append-only file only, as the store's durability promise needs.
type redisServer struct {
	cmd     *exec.Cmd
	dir     string
	addr    string
	fsync   string // its appendfsync
	version string // e.g. "7.0.15", "" if unknown
	exited  chan struct{}
}

// startRedis starts redis-server from PATH with appendfsync fsync
// ("always" or "everysec") and waits until it answers PING.
func startRedis(ctx context.Context, fsync string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("--store redis: redis-server not found on PATH (Debian package redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "devmsg-bench-redis-")
	if err != nil {
		return nil, err
	}
	r := &redisServer{dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), fsync: fsync, version: redisVersion(bin), exited: make(chan struct{})}
	r.cmd = exec.Command(bin,
		"--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", fsync,
		"--daemonize", "no", "--loglevel", "warning", "--logfile", r.logFile())
	if err := r.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = r.cmd.Wait(); close(r.exited) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := r.ping()
		if err == nil {
			return r, nil
		}
		select {
		case <-r.exited:
			r.stop()
			return nil, fmt.Errorf("redis-server exited: %s%s", r.cmd.ProcessState, r.logTail())
		case <-ctx.Done():
			r.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("redis-server on %s not ready within 10s: %w%s", r.addr, err, r.logTail())
		}
	}
}

func (r *redisServer) logFile() string { return filepath.Join(r.dir, "redis.log") }

// logTail is the end of the server's log, for an error message.
func (r *redisServer) logTail() string {
	b, _ := os.ReadFile(r.logFile())
	if b = bytes.TrimSpace(b); len(b) == 0 {
		return ""
	}
	return "\n" + string(b[max(0, len(b)-2000):])
}

// ping asks the server for PONG over the inline protocol.
func (r *redisServer) ping() error {
	c, err := net.DialTimeout("tcp", r.addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// stop shuts the server down as SHUTDOWN would (SIGTERM: the append-only
// file is flushed), kills it if it does not within 10s, and removes its
// dir.
func (r *redisServer) stop() { terminate(r.cmd.Process, r.exited, 10*time.Second, r.dir) }

// redisVersion reads "v=7.0.15" from `redis-server --version`.
func redisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return ""
}
