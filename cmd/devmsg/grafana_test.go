package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("../../deploy/grafana/devmsg.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("deploy/grafana/devmsg.json: %v", err)
	}
	return d
}

// TestGrafanaDashboard: a real Prometheus scrapes a running devmsg (on
// Redis, so the cluster gauges exist) while devices connect, publish and
// report, messages are sent and delivered, and callbacks and an event
// webhook are delivered; then every query of every panel of the Grafana
// dashboard returns data through Prometheus's HTTP API.
func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (Debian package prometheus; CI installs it)")
	}
	rdb := redisForTest(t)
	f := callbackFleet(t, "--store.type", "redis", "--store.redis.addrs", rdb.Addr, "--events.linger", "50ms")
	rcv := newReceiver(t)
	f.addURL(rcv.url("/cb"))
	f.setCallback(`{"enabled":true,"types":[0,1,2,3,4,5,6,7,8]}`)
	ercv := newEventReceiver(t)
	f.restOK("POST", "/admin/v1/apps/"+demoKey+"/events/webhooks", fmt.Sprintf(`{"url":%q}`, ercv.url("/events")), nil)

	// A second app whose callback URL fails: retries and dead letters.
	var failing struct {
		Key          string `json:"key"`
		MasterSecret string `json:"master_secret"`
	}
	f.restOK("POST", "/admin/v1/apps", `{"name":"grafana-failing"}`, &failing)
	bad := newReceiver(t)
	f.restOK("POST", "/admin/v1/apps/"+failing.Key+"/callback/urls", fmt.Sprintf(`{"url":%q}`, bad.url("/cb")), nil)
	f.restOK("PUT", "/admin/v1/apps/"+failing.Key+"/callback", `{"enabled":true,"types":[0,1]}`, nil)
	bad.status.Store(500)
	if st, b := f.restAs(failing.Key, failing.MasterSecret, "POST", "/device/v1/devices", `{"device":[{"name":"lost-1"}]}`); st != 200 {
		t.Fatalf("create lost-1: %d %s", st, b)
	}

	base := startPrometheus(t, prom, f.s.addr)

	// Traffic until every query has data: a device online that
	// publishes telemetry and reports a property, messages to it, to an
	// offline device, and a bad request (a 4xx).
	secret := f.createDevice("graf-1")
	f.createDevice("graf-offline")
	dev := f.mustConnect("graf-1", secret, "msg")
	ctx, cancel := context.WithCancel(context.Background())
	traffic := make(chan struct{})
	go func() {
		defer close(traffic)
		for i := 0; ctx.Err() == nil; i++ {
			dev.c.Publish(dev.prefix+"up/temp", 1, false, strconv.Itoa(20+i%5)).WaitTimeout(5 * time.Second)
			dev.c.Publish(dev.prefix+"property/report", 1, false, fmt.Sprintf(`{"properties":{"level":%d}}`, i)).WaitTimeout(5 * time.Second)
			f.rest("POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":"graf-1","msg_body":"m%d"}`, f.seq.Add(1), i))
			f.rest("POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":"graf-offline","msg_body":"m%d","ttl":0}`, f.seq.Add(1), i))
			f.rest("GET", "/device/v1/baseinfo?device_name=", "")
			f.restAs(failing.Key, failing.MasterSecret, "POST", "/msg/v1/msg", fmt.Sprintf(`{"seq_no":%d,"device_name":"lost-1","msg_body":"x"}`, f.seq.Add(1)))
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { cancel(); <-traffic }()

	type query struct{ panel, ref, expr string }
	var pending []query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			pending = append(pending, query{p.Title, tg.RefID, tg.Expr})
		}
	}
	if len(pending) < 20 {
		t.Fatalf("the dashboard has %d queries", len(pending))
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(pending) > 0 {
		var still []query
		var last string
		for _, q := range pending {
			if ok, why := promHasData(t, base, q.expr); !ok {
				still = append(still, q)
				last = why
			}
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, q := range pending {
				t.Errorf("panel %q query %s returns no data: %s", q.panel, q.ref, q.expr)
			}
			t.Fatalf("last answer: %s", last)
		}
		time.Sleep(time.Second)
	}
}

// grafanaVars are the dashboard's variables as the test fills them in.
var grafanaVars = strings.NewReplacer("$__rate_interval", "10s", "$job", "devmsg")

// promHasData runs an instant query and reports whether it returned at
// least one sample that is a number.
func promHasData(t *testing.T, base, expr string) (bool, string) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(grafanaVars.Replace(expr)))
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return false, err.Error()
	}
	if out.Status != "success" {
		t.Fatalf("query %s: %s", expr, out.Error) // a query Prometheus refuses never gets data
	}
	for _, r := range out.Data.Result {
		s, _ := r.Value[1].(string)
		if v, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(v) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("%d series, none a number", len(out.Data.Result))
}

// startPrometheus runs prometheus scraping target's /metrics every
// second as job devmsg, and returns its base URL once it is ready.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: devmsg
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", b)
		}
	})
	base := "http://" + addr
	waitFor(t, 20*time.Second, "prometheus ready", func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}
