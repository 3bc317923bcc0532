package main

import (
	"os"
	"path/filepath"
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

func TestBadConfigs(t *testing.T) {
	want := map[string]string{
		"bad-log-level.bad.yaml":     `log.level: "verbose" is not one of`,
		"unknown-key.bad.yaml":       "field htp not found",
		"node-id.bad.yaml":           "node_id: 2048 is outside 0..1023",
		"store-type.bad.yaml":        `store.type: "etcd"`,
		"duration.bad.yaml":          `"soon" is not a duration`,
		"cert-without-key.bad.yaml":  "cert_file and key_file must be set together",
		"duplicate-app-key.bad.yaml": `apps[1].key: "k1" appears twice`,
		"app-no-secret.bad.yaml":     "apps[0].master_secret: must not be empty",
		"batch-size.bad.yaml":        "callback.batch_size: 0 is outside 1..1000",
		"wrong-type.bad.yaml":        "cannot unmarshal",
	}
	files, _ := filepath.Glob("testdata/*.bad.yaml")
	if len(files) != len(want) {
		t.Fatalf("%d bad configs in testdata, %d expectations", len(files), len(want))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := loadConfig([]string{"--config", f}, nil)
			if err == nil {
				t.Fatal("accepted")
			}
			if w := want[filepath.Base(f)]; !strings.Contains(err.Error(), w) {
				t.Fatalf("error %q does not contain %q", err, w)
			}
		})
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
	}
	cfg, err := loadConfig([]string{"--config", file, "--http.addr", ":3000", "--data_dir=/tmp/x", "--callback.allow_custom_ports"}, env)
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
		{[]string{"stray"}, nil, "stray"},
	} {
		if _, err := loadConfig(bad.args, bad.env); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("args %v env %v: error %v, want mention of %q", bad.args, bad.env, err, bad.want)
		}
	}
}
