package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestExampleConfigLoads(t *testing.T) {
	cfg, err := loadConfig([]string{"--config", "../../configs/devmsg.yaml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Addr != ":8443" || len(cfg.Apps) != 1 || cfg.Callback.FlushInterval != Duration(10*time.Second) {
		t.Errorf("example config loaded as %+v", cfg)
	}
}

// TestBadConfigs loads every testdata/*.bad.yaml; each file's first line,
// "# error: ...", is a substring the error must contain.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad configs in testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(data), "\n")
			want, ok := strings.CutPrefix(first, "# error: ")
			if !ok || want == "" {
				t.Fatalf("first line %q is not \"# error: <expected substring>\"", first)
			}
			_, err = loadConfig([]string{"--config", f}, nil)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not contain %q", err, want)
			}
		})
	}
}

// TestEveryKeyHasEnvAndFlag pins the keys derived from the yaml tags to
// the table of docs/configuration.md, so renaming a tag cannot silently
// change names that deployments depend on (the stable contract stated
// there).
func TestEveryKeyHasEnvAndFlag(t *testing.T) {
	want := []string{
		"data_dir", "log.level", "log.format",
		"http.addr", "http.tls.enabled", "http.tls.cert_file", "http.tls.key_file",
		"http.max_conns_per_source", "http.max_long_polls_per_app",
		"mqtt.tcp_addr", "mqtt.tls_addr", "mqtt.ws_addr", "mqtt.max_conns_per_source",
		"store.type", "store.redis.addrs", "store.redis.master_name", "store.redis.password", "store.redis.db",
		"store.min_free_mb",
		"node_id", "admin.username", "admin.password", "rate_limit.default",
		"callback.batch_size", "callback.flush_interval", "callback.retry_interval",
		"callback.max_retries", "callback.request_timeout", "callback.allow_custom_ports",
		"callback.allowed_networks",
		"events.retention", "events.max_per_app", "events.batch_size", "events.linger",
		"broadcast.rate", "broadcast.yield_rate", "broadcast.chunk",
		"fd_reserve",
	}
	cfg := defaultConfig()
	var got []string
	for _, l := range configLeaves(&cfg) {
		got = append(got, l.path)
		if wantEnv := "DEVMSG_" + strings.ToUpper(strings.ReplaceAll(l.path, ".", "_")); l.env != wantEnv {
			t.Errorf("%s: env %s, want %s", l.path, l.env, wantEnv)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("config keys\n got %v\nwant %v", got, want)
	}
	// Every key round-trips through a flag: its default, set as a flag,
	// gives the default config back.
	var args []string
	for _, l := range configLeaves(&cfg) {
		args = append(args, "--"+l.path+"="+l.val())
	}
	fromFlags, err := loadConfig(args, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromFlags, cfg) {
		t.Errorf("defaults through flags\n got %+v\nwant %+v", fromFlags, cfg)
	}
}

func TestDefaultsValidate(t *testing.T) {
	cfg, err := loadConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RateLimit.Default != 1000 || !cfg.HTTP.TLS.Enabled || cfg.Store.Type != "embedded" || cfg.DataDir != "./data" {
		t.Errorf("defaults: %+v", cfg)
	}
	// docs/configuration.md, events.*.
	if want := (EventsConfig{Duration(24 * time.Hour), 1_000_000, 100, Duration(200 * time.Millisecond)}); cfg.Events != want {
		t.Errorf("events defaults %+v, want %+v", cfg.Events, want)
	}
}

func TestServeHelp(t *testing.T) {
	var errOut bytes.Buffer
	if err := run(context.Background(), []string{"serve", "--help"}, io.Discard, &errOut); err != nil {
		t.Fatalf("serve --help: %v", err)
	}
	for _, want := range []string{"--http.tls.enabled", "DEVMSG_CALLBACK_FLUSH_INTERVAL", `default "10s"`} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("serve --help does not mention %s:\n%s", want, errOut.String())
		}
	}
}

func TestConfigLayers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("http:\n  addr: \":1000\"\nlog:\n  level: warn\nnode_id: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"DEVMSG_HTTP_ADDR=:2000",
		"DEVMSG_HTTP_TLS_ENABLED=false",
		"DEVMSG_STORE_REDIS_ADDRS=a:1, b:2",
		"DEVMSG_CALLBACK_FLUSH_INTERVAL=2s",
		"DEVMSG_LOG_FORMAT=json",
		"DEVMSG_RATE_LIMIT_DEFAULT=0",
		"DEVMSG_CALLBACK_ALLOWED_NETWORKS=127.0.0.0/8, fd00::/8",
		"DEVMSG_EVENTS_RETENTION=2h",
	}
	cfg, err := loadConfig([]string{"--config", file, "--http.addr", ":3000", "--data_dir=/tmp/x", "--callback.allow_custom_ports", "--events.max_per_app=5000"}, env)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"flag beats env and file", cfg.HTTP.Addr, ":3000"},
		{"file value kept", cfg.Log.Level, "warn"},
		{"file int", cfg.NodeID, 3},
		{"env bool", cfg.HTTP.TLS.Enabled, false},
		{"env list", strings.Join(cfg.Store.Redis.Addrs, ","), "a:1,b:2"},
		{"env duration", cfg.Callback.FlushInterval, Duration(2 * time.Second)},
		{"env string", cfg.Log.Format, "json"},
		{"flag", cfg.DataDir, "/tmp/x"},
		{"bool flag without value", cfg.Callback.AllowCustomPorts, true},
		{"default", cfg.Callback.MaxRetries, 3},
		{"env zero means unlimited", cfg.RateLimit.Default, 0},
		{"env CIDR list", strings.Join(cfg.Callback.AllowedNetworks, ","), "127.0.0.0/8,fd00::/8"},
		{"env events duration", cfg.Events.Retention, Duration(2 * time.Hour)},
		{"flag events int", cfg.Events.MaxPerApp, 5000},
		{"events default", cfg.Events.Linger, Duration(200 * time.Millisecond)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	for _, bad := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--node_id=x"}, nil, "node_id"},
		{[]string{"--no-such-key=1"}, nil, "no-such-key"},
		{nil, []string{"DEVMSG_NODE_ID=abc"}, "DEVMSG_NODE_ID"},
		{nil, []string{"DEVMSG_LOG_LEVEL=loud"}, "log.level"},
		{nil, []string{"DEVMSG_CALLBACK_ALLOWED_NETWORKS=10.0.0.0/8,intranet"}, `callback.allowed_networks: "intranet" is not a CIDR`},
		{nil, []string{"DEVMSG_EVENTS_LINGER=-1s"}, "events.linger: -1s is outside"},
		{[]string{"--events.retention=soon"}, nil, "events.retention"},
		{[]string{"stray"}, nil, "stray"},
	} {
		if _, err := loadConfig(bad.args, bad.env); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("args %v env %v: error %v, want mention of %q", bad.args, bad.env, err, bad.want)
		}
	}
}
