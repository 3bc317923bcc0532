package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// NotInstalled is the skip message when redis-server is missing.
const NotInstalled = "redis-server is not installed (CI installs it: Debian package redis-server)"

// Installed reports whether redis-server is on the PATH.
func Installed() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Server is a redis-server process.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	args []string
}

// Start starts redis-server on a free loopback port with its files (and
// an append-only file) in dir, and waits until it answers PING. extra
// are more config arguments.
func Start(dir string, extra ...string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "yes", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
	}, extra...)
	srv := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, args: args}
	if err := srv.start(); err != nil {
		return nil, err
	}
	return srv, nil
}

// Restart kills the server (SIGKILL: a crash) and starts it again on the
// same port and files; what the append-only file holds survives.
func (s *Server) Restart() error {
	s.Stop()
	return s.start()
}

// RestartLoading kills the server and starts it again on the same port
// and files, with extra config arguments, without waiting for it to
// answer: clients see it as it comes back (LOADING while it reads its
// files).
func (s *Server) RestartLoading(extra ...string) error {
	s.Stop()
	return s.spawn(extra...)
}

func (s *Server) spawn(extra ...string) error {
	cmd := exec.Command("redis-server", append(slices.Clone(s.args), extra...)...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd = cmd
	return nil
}

func (s *Server) start() error {
	if err := s.spawn(); err != nil {
		return err
	}
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on %s does not answer: %v\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Pause stops the server without closing its connections (SIGSTOP), as
// a stalled or unreachable Redis looks to its clients; Resume continues it.
func (s *Server) Pause() error  { return s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }
