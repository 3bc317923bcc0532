package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClientsTrustServerCertificate: devmsg events and devmsg sim trust
// the self-signed certificate of devmsg serve with --cacert, and by
// default when data/tls/cert.pem is where they run; without it they stop
// at once on the verification error with a hint, not retry forever.
func TestClientsTrustServerCertificate(t *testing.T) {
	top := t.TempDir()
	dataDir := filepath.Join(top, "data")
	s := startServer(t, "--data_dir", dataDir, "--config", "../../configs/devmsg.yaml", "--admin.password", "pw")
	api := "https://" + s.addr
	cert := filepath.Join(dataDir, "tls", "cert.pem")
	// 127.0.0.1 is in the certificate; the MQTT TLS listener serves it too.
	mqtts := "ssl://" + s.mqtt["tls"]
	eventsArgs := []string{"events", "--api", api, "--app-key", demoKey, "--master-secret", demoSecret, "--limit", "1"}
	simArgs := []string{"sim", "--api", api, "--broker", mqtts, "--app-key", demoKey, "--master-secret", demoSecret,
		"--create", "--count", "1", "--prefix", "tls-sim-", "--report-every", "0"}

	untrusted := func(name string, args []string) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out bytes.Buffer
			err := run(ctx, args, &out, &out)
			if ctx.Err() != nil {
				t.Fatalf("still retrying after 20 s: %s", out.String())
			}
			if err == nil || !strings.Contains(err.Error(), "--cacert") || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("error %v, want the certificate error with a --cacert hint; output %s", err, out.String())
			}
		})
	}
	// trusted runs args until the event or device shows up in the output.
	trusted := func(name string, args []string, want string) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &syncBuffer{}
			done := make(chan error, 1)
			go func() { done <- run(ctx, args, out, out) }()
			deadline := time.After(30 * time.Second)
			for !strings.Contains(out.String(), want) {
				select {
				case err := <-done:
					t.Fatalf("ended: %v; output %s", err, out.String())
				case <-deadline:
					t.Fatalf("no %q in 30 s; output %s", want, out.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			cancel()
			<-done
		})
	}

	untrustedDir := t.TempDir()
	t.Chdir(untrustedDir)
	untrusted("events without the certificate", eventsArgs)
	untrusted("sim without the certificate", simArgs)
	trusted("sim --cacert", append(simArgs, "--cacert", cert), "1 devices connected") // makes an event
	trusted("events --cacert", append(eventsArgs, "--cacert", cert), "device")
	// Run where devmsg serve keeps its data: data/tls/cert.pem is trusted.
	t.Chdir(top)
	if _, err := os.Stat(defaultCACert); err != nil {
		t.Fatal(err)
	}
	trusted("events, default certificate", eventsArgs, "device")
	trusted("sim, default certificate", simArgs, "1 devices connected")
}
