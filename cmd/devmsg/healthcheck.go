package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// runHealthcheck asks the devmsg serving on this machine whether it is
// ready: GET /readyz on its HTTP address, read from the same config file,
// environment and flags as `devmsg serve`. It exits 0 on 200 and 1
// otherwise, so a container's HEALTHCHECK can run it where the image has
// no shell or curl (docker-compose.yml does).
func runHealthcheck(ctx context.Context, args []string, stdout, _ io.Writer) error {
	cfg, err := loadConfig(args, os.Environ())
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("http.addr %q: %w", cfg.HTTP.Addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "http"
	if cfg.HTTP.TLS.Enabled {
		scheme = "https"
	}
	client := &http.Client{
		Timeout: 5 * time.Second,
		// The node's own certificate, reached on this machine's address:
		// what is checked is that it answers, not who it is.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, port)+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s %s", resp.Status, body)
	}
	_, err = fmt.Fprintf(stdout, "ready\n")
	return err
}
