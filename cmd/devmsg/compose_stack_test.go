package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// composeStack is the repository's docker-compose.yml, run as a user runs
// it, under a project name of its own with every published port moved to
// a free one (the PUBLISH_* variables), so that it never meets a user's
// stack. An override file gives every node one certificate (as
// docs/operations.md describes) and lets callbacks reach the test's
// receivers on the Docker host.
type composeStack struct {
	t        *testing.T
	root     string   // the repository
	tool     []string // docker compose, or docker-compose
	project  string
	override string
	env      []string
	ports    map[string]int // PUBLISH_* → host port
	adminPW  string
	certPool *x509.CertPool
	hostIP   string            // the Docker host's address, seen from the containers
	ids      map[string]string // service → container id, until the next up
}

// composeServices are the services of docker-compose.yml.
var composeServices = []string{"redis", "node1", "node2", "node3", "haproxy"}

// composeTool finds Compose: the docker CLI plugin, else the docker-compose
// command. It skips the test when the engine does not answer or neither
// is installed.
func composeTool(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers (docker info: %v: %s): the compose test needs one", err, bytes.TrimSpace(out))
	}
	if exec.CommandContext(ctx, "docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	t.Skip("neither `docker compose` nor docker-compose is installed: the compose test needs one")
	return nil
}

// composeImages runs `make images`' script, which builds the devmsg
// image from this tree (from the layer cache when nothing changed) and
// the base images' stand-ins when no registry answers. Exit status 3
// means a prerequisite is missing (debootstrap, the Go toolchain): the
// test is skipped.
func composeImages(t *testing.T, root string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "deploy", "images", "build.sh"))
	cmd.Dir = root
	start := time.Now()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		t.Skipf("the images cannot be built here: %s", bytes.TrimSpace(out))
	}
	if err != nil {
		t.Fatalf("make images: %v\n%s", err, out)
	}
	t.Logf("make images: %.0fs", time.Since(start).Seconds())
}

// newComposeStack prepares a stack; up starts it.
func newComposeStack(t *testing.T) *composeStack {
	t.Helper()
	tool := composeTool(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	composeImages(t, root)
	s := &composeStack{t: t, root: root, tool: tool, project: fmt.Sprintf("devmsgtest%d", os.Getpid()),
		ports: map[string]int{}, adminPW: "compose-test-admin"}
	s.hostIP = s.bridgeGateway()
	dir := t.TempDir()
	s.override = filepath.Join(dir, "compose.override.yml")
	tlsDir := filepath.Join(dir, "tls")
	s.certPool = writeNodeCert(t, tlsDir)
	if err := os.WriteFile(s.override, []byte(composeOverride(tlsDir)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.env = append(os.Environ(), "DEVMSG_ADMIN_PASSWORD="+s.adminPW, "COMPOSE_PROJECT_NAME="+s.project)
	for _, name := range []string{"HTTPS", "CONSOLE", "MQTT", "MQTTS", "MQTT_WS", "STATS", "NODE1", "NODE2", "NODE3"} {
		s.ports[name] = freePort(t)
		s.env = append(s.env, fmt.Sprintf("PUBLISH_%s=%d", name, s.ports[name]))
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := s.composeOut("logs", "--no-color", "--tail", "60")
			t.Logf("the stack's last logs:\n%s", out)
		}
		if out, err := s.composeOut("down", "--volumes", "--remove-orphans", "--timeout", "5"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	return s
}

// composeOverride is the test's override file: one certificate for every
// node, callbacks allowed to the Docker host's private address, and a
// callback worker that flushes fast.
func composeOverride(tlsDir string) string {
	var b strings.Builder
	b.WriteString("services:\n")
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&b, `  node%d:
    environment:
      DEVMSG_HTTP_TLS_CERT_FILE: /etc/devmsg/tls/cert.pem
      DEVMSG_HTTP_TLS_KEY_FILE: /etc/devmsg/tls/key.pem
      DEVMSG_CALLBACK_ALLOW_CUSTOM_PORTS: "true"
      DEVMSG_CALLBACK_ALLOWED_NETWORKS: "172.16.0.0/12,192.168.0.0/16,10.0.0.0/8"
      DEVMSG_CALLBACK_FLUSH_INTERVAL: 200ms
      DEVMSG_CALLBACK_RETRY_INTERVAL: 1s
      DEVMSG_CALLBACK_REQUEST_TIMEOUT: 2s
      DEVMSG_EVENTS_LINGER: 50ms
      DEVMSG_RATE_LIMIT_DEFAULT: "0"
    volumes:
      - %s:/etc/devmsg/tls:ro
    extra_hosts:
      - "host.docker.internal:host-gateway"
`, i, tlsDir)
	}
	return b.String()
}

// writeNodeCert writes one self-signed certificate and key for every
// node into dir, readable by the image's user, and returns a pool that
// trusts it. It names localhost and 127.0.0.1, where the test meets
// HAProxy.
func writeNodeCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "devmsg"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.Chmod(filepath.Dir(dir), 0o755)) // the container's user (65532) must reach it
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	must(t, os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	must(t, os.Chown(filepath.Join(dir, "key.pem"), 65532, 65532))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return pool
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// bridgeGateway is the Docker host's address on the default bridge
// (docker0), which host.docker.internal (host-gateway) names inside the
// containers.
func (s *composeStack) bridgeGateway() string {
	if ifc, err := net.InterfaceByName("docker0"); err == nil {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	out, err := exec.Command("docker", "network", "inspect", "bridge", "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}").Output()
	ip := strings.TrimSpace(string(out))
	if err != nil || net.ParseIP(ip) == nil {
		s.t.Skipf("the Docker host's address on the default bridge is unknown (no docker0, no gateway: %q %v): the compose test's receivers need it", out, err)
	}
	return ip
}

func (s *composeStack) composeOut(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	full := append(append([]string{}, s.tool[1:]...), "-p", s.project, "-f", filepath.Join(s.root, "docker-compose.yml"), "-f", s.override)
	cmd := exec.CommandContext(ctx, s.tool[0], append(full, args...)...)
	cmd.Dir = s.root
	cmd.Env = s.env
	return cmd.CombinedOutput()
}

func (s *composeStack) compose(args ...string) {
	s.t.Helper()
	if out, err := s.composeOut(args...); err != nil {
		s.t.Fatalf("compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (s *composeStack) docker(args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// container is the id of a service's container.
func (s *composeStack) container(service string) string {
	s.t.Helper()
	if id, ok := s.ids[service]; ok {
		return id
	}
	out, err := s.composeOut("ps", "-q", service)
	id := strings.TrimSpace(string(out))
	if err != nil || id == "" {
		s.t.Fatalf("the container of %s: %v %s", service, err, out)
	}
	s.ids[service] = id
	return id
}

// network is the compose project's network.
func (s *composeStack) network() string { return s.project + "_default" }

// up starts the stack and waits until every node is healthy and HAProxy
// routes to them: `up -d --wait` with the Compose plugin, which waits for
// the health checks; docker-compose 1 has no --wait, so the test waits on
// the same health checks itself.
func (s *composeStack) up() time.Duration {
	s.t.Helper()
	start := time.Now()
	s.ids = map[string]string{}
	if s.tool[0] == "docker" {
		s.compose("up", "-d", "--wait")
	} else {
		s.compose("up", "-d")
	}
	s.waitHealthy(3 * time.Minute)
	return time.Since(start)
}

// waitHealthy waits until every node's health check passes and a request
// through HAProxy reaches a ready node.
func (s *composeStack) waitHealthy(within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for _, svc := range []string{"node1", "node2", "node3"} {
		id := s.container(svc)
		for {
			st := s.docker("inspect", "-f", "{{.State.Health.Status}}", id)
			if st == "healthy" {
				break
			}
			if time.Now().After(deadline) {
				s.t.Fatalf("%s is %s after %s", svc, st, within)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	for {
		st, _, err := s.call("", "", "GET", "/readyz", "")
		if err == nil && st == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("HAProxy's /readyz: %d %v", st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// client is an HTTPS client that trusts the nodes' one certificate,
// opening a connection per request so that HAProxy spreads them.
func (s *composeStack) client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: s.certPool, ServerName: "localhost"},
		DisableKeepAlives: true,
	}}
}

// call sends a request through HAProxy's HTTPS port, as admin for
// /admin paths when user is "".
func (s *composeStack) call(user, pass, method, path, body string) (int, []byte, error) {
	if user == "" && strings.HasPrefix(path, "/admin/") {
		user, pass = "admin", s.adminPW
	}
	req, err := http.NewRequest(method, s.url("HTTPS", path), strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// ok calls through HAProxy and fails the test unless the answer is 200.
func (s *composeStack) ok(user, pass, method, path, body string) []byte {
	s.t.Helper()
	st, b, err := s.call(user, pass, method, path, body)
	if err != nil || st != http.StatusOK {
		s.t.Fatalf("%s %s: %d %s %v", method, path, st, b, err)
	}
	return b
}

func (s *composeStack) url(port, path string) string {
	return "https://localhost:" + strconv.Itoa(s.ports[port]) + path
}

func (s *composeStack) mqttAddr() string { return "127.0.0.1:" + strconv.Itoa(s.ports["MQTT"]) }

// ready runs the node's own health check inside its container: it works
// while the container is cut off from the network.
func (s *composeStack) ready(service string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "exec", s.container(service),
		"/devmsg", "healthcheck", "--config", "/etc/devmsg/devmsg.yaml").Run() == nil
}
