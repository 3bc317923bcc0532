package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/devmsg/devmsg/apitypes"
	sdk "github.com/devmsg/devmsg/sdk/device"
)

// runSim is `devmsg sim`: simulated devices of an app, for demos and load.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: devmsg sim --app-key KEY (--secrets-file FILE | --create --master-secret S) [flags]")
		fmt.Fprintln(stderr, "Connects simulated devices over MQTT: they acknowledge messages, print what they receive, report properties")
		fmt.Fprintln(stderr, "and, with --telemetry, publish readings. They answer the commands ping (params back as the result),")
		fmt.Fprintln(stderr, "reboot (offline for --reboot-time, then answered), fail (code 1) and ota (progress 0 to 100 over")
		fmt.Fprintln(stderr, "--ota-time, then answered; --fail-rate of the devices fail it halfway).")
		fs.PrintDefaults()
	}
	broker := fs.String("broker", "tcp://127.0.0.1:1883", "MQTT address of the service (tcp://, ssl://, ws://host:port/mqtt)")
	appKey := fs.String("app-key", "", "app key")
	prefix := fs.String("prefix", "sim-", "device name prefix; devices are PREFIX0001, PREFIX0002, ...")
	count := fs.Int("count", 10, "number of devices")
	secretsFile := fs.String("secrets-file", "", "CSV of name,secret lines: simulate exactly these devices")
	create := fs.Bool("create", false, "create the devices through the REST API first, reusing those that exist (needs --master-secret)")
	api := fs.String("api", "https://127.0.0.1:8443", "REST API base URL, for --create")
	masterSecret := fs.String("master-secret", os.Getenv(envMasterSecret), "the app's master secret, for --create (env DEVMSG_MASTER_SECRET)")
	insecure := fs.Bool("insecure", false, "skip TLS certificate checks (the self-signed certificate of a test server)")
	cacert := fs.String("cacert", "", cacertUsage)
	reportEvery := fs.Duration("report-every", 30*time.Second, "report uptime_s every interval; 0 never")
	telemetry := fs.Duration("telemetry", 0, `publish a reading {"temp":..,"seq":N} to up/telemetry at QoS 1 every interval; 0 never`)
	quiet := fs.Bool("quiet", false, "do not print received messages, properties and commands")
	failRate := fs.Float64("fail-rate", 0, "share of the devices (0 to 1, spread evenly) whose ota command fails halfway with code 1")
	rebootTime := fs.Duration("reboot-time", 3*time.Second, "how long a reboot command keeps a device offline")
	otaTime := fs.Duration("ota-time", 5*time.Second, "how long an ota command takes, reporting progress 0 to 100")
	mqttVersion := fs.Int("mqtt-version", 4, "MQTT protocol version of the devices: 4 (3.1.1) or 5")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
		return err
	}
	if *appKey == "" {
		return errors.New("sim: --app-key is required")
	}
	if *failRate < 0 || *failRate > 1 {
		return fmt.Errorf("sim: --fail-rate %g: want 0 to 1", *failRate)
	}
	if *mqttVersion != 4 && *mqttVersion != 5 {
		return fmt.Errorf("sim: --mqtt-version %d: want 4 or 5", *mqttVersion)
	}
	tlsConf, err := clientTLS(*cacert, *insecure)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	var devs [][2]string
	switch {
	case *secretsFile != "":
		devs, err = readSecrets(*secretsFile)
	case *create:
		devs, err = createSimDevices(ctx, *api, *appKey, *masterSecret, *prefix, *count, tlsConf)
	default:
		return errors.New("sim: give --secrets-file, or --create with --master-secret")
	}
	if isCertError(err) {
		return fmt.Errorf("%w\n%s", err, certHint)
	}
	if err != nil {
		return err
	}
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		if !*quiet {
			outMu.Lock()
			fmt.Fprintf(stdout, format+"\n", a...)
			outMu.Unlock()
		}
	}
	var wg sync.WaitGroup
	connected := make(chan error, len(devs))
	for i, nd := range devs {
		sd := &simDevice{
			cfg: sdk.Config{
				Broker: *broker, AppKey: *appKey, DeviceName: nd[0], DeviceSecret: nd[1], TLSConfig: tlsConf,
				SDKVersion: "devmsg-sim", AppVersion: version, ProtocolVersion: byte(*mqttVersion),
			},
			say: say, reportEvery: *reportEvery, telemetry: *telemetry,
			rebootTime: *rebootTime, otaTime: *otaTime,
			// Spread evenly: device i fails when the running count of
			// failing devices steps up at i.
			failOTA: int(float64(i+1)**failRate) > int(float64(i)**failRate),
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sd.run(ctx, connected)
		}()
	}
	var failed int
	var certErr error
	for range devs {
		if err := <-connected; err != nil {
			failed++
			if isCertError(err) {
				certErr = err // said once below, not once per device
				continue
			}
			fmt.Fprintln(stderr, "sim:", err)
		}
	}
	if certErr != nil && failed == len(devs) {
		return fmt.Errorf("sim: %w\n%s", certErr, certHint)
	}
	if certErr != nil {
		fmt.Fprintf(stderr, "sim: %v\n%s\n", certErr, certHint)
	}
	fmt.Fprintf(stderr, "sim: %d devices connected, %d failed\n", len(devs)-failed, failed)
	wg.Wait()
	// Stopped while connecting (the device may be online already, its
	// subscriptions not yet made) is a stop, not a failure.
	if failed == len(devs) && ctx.Err() == nil {
		return errors.New("sim: no device connected")
	}
	return nil
}

// simulate reports uptime_s every interval until ctx is done.
func simulate(ctx context.Context, d *sdk.Device, name string, every time.Duration, say func(string, ...any)) {
	if every <= 0 {
		<-ctx.Done()
		return
	}
	start := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := d.Report(rctx, map[string]any{"uptime_s": int(time.Since(start).Seconds())}, 0)
			cancel()
			if err != nil && ctx.Err() == nil {
				say("%s report: %v", name, err)
			}
		}
	}
}

// publishReadings publishes a temperature reading to up/telemetry every
// interval until ctx is done, each at QoS 1 (so stored once it returns).
// seq counts the device's readings from 1, so a reader can see a gap or a
// repeat; a reading that was not acknowledged is reported, not resent.
func publishReadings(ctx context.Context, d *sdk.Device, name string, every time.Duration, say func(string, ...any)) {
	t := time.NewTicker(every)
	defer t.Stop()
	temp := 20 + rand.Float64()*5
	for seq := 1; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		temp += rand.Float64() - 0.5
		payload := fmt.Appendf(nil, `{"temp":%.2f,"seq":%d}`, temp, seq)
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.PublishUp(pctx, "telemetry", payload, 1)
		cancel()
		if err != nil && ctx.Err() == nil {
			say("%s telemetry %d: %v", name, seq, err)
		}
	}
}

// readSecrets reads name,secret lines.
func readSecrets(path string) ([][2]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = 2
	r.TrimLeadingSpace = true
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("sim: %s: %w", path, err)
	}
	out := make([][2]string, len(recs))
	for i, rec := range recs {
		out[i] = [2]string{rec[0], rec[1]}
	}
	return out, nil
}

// createSimDevices creates PREFIX0001.. through the REST API, up to 1000
// per request, and returns their names and secrets. A device that exists
// already (3001) is reused: its secret comes from the base-info query, so
// running sim --create again simulates the same devices.
func createSimDevices(ctx context.Context, api, appKey, masterSecret, prefix string, count int, tlsConf *tls.Config) ([][2]string, error) {
	if masterSecret == "" {
		return nil, errors.New("sim: --create needs --master-secret")
	}
	c := &simAPI{
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}},
		base:   strings.TrimRight(api, "/"), key: appKey, secret: masterSecret,
	}
	out := make([][2]string, 0, count)
	var existing []int // indexes in out of devices that were there already
	var refused []string
	for from := 1; from <= count; from += 1000 {
		var names []map[string]string
		for i := from; i < min(from+1000, count+1); i++ {
			names = append(names, map[string]string{"name": fmt.Sprintf("%s%04d", prefix, i)})
		}
		body, _ := json.Marshal(map[string]any{"device": names})
		var r apitypes.CreateDevicesAnswer
		if err := c.call(ctx, http.MethodPost, "/device/v1/devices", body, &r); err != nil {
			return nil, fmt.Errorf("sim: create devices: %w", err)
		}
		for _, d := range r.Resp {
			switch d.Code {
			case 0:
				out = append(out, [2]string{d.DeviceName, d.DeviceSecret})
			case 3001: // exists already: reused
				existing = append(existing, len(out))
				out = append(out, [2]string{d.DeviceName, ""})
			default:
				refused = append(refused, fmt.Sprintf("%s: %d %s", d.DeviceName, d.Code, d.Message))
			}
		}
	}
	if len(refused) > 0 {
		more := ""
		if len(refused) > 3 {
			more = fmt.Sprintf(" (and %d more)", len(refused)-3)
			refused = refused[:3]
		}
		return nil, fmt.Errorf("sim: create %s%s", strings.Join(refused, "; "), more)
	}
	// The secrets of the existing devices, a few queries at a time.
	var mu sync.Mutex
	var firstErr error
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(8, len(existing)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var info apitypes.BaseInfo
				err := c.call(ctx, http.MethodGet, "/device/v1/baseinfo?device_name="+url.QueryEscape(out[i][0]), nil, &info)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("sim: existing device %s: %w", out[i][0], err)
				}
				out[i][1] = info.DeviceSecret
				mu.Unlock()
			}
		}()
	}
	for _, i := range existing {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// simAPI calls the REST API with an app's credentials.
type simAPI struct {
	client            *http.Client
	base, key, secret string
}

// call sends body (nil: none) and decodes a 200 answer into out. Over the
// rate limit (429) it waits as Retry-After says and tries again.
func (c *simAPI) call(ctx context.Context, method, path string, body []byte, out any) error {
	for {
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.SetBasicAuth(c.key, c.secret)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.client.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil || wait < 1 {
				wait = 1
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(wait) * time.Second):
			}
		case resp.StatusCode != http.StatusOK:
			return fmt.Errorf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
		default:
			return json.Unmarshal(b, out)
		}
	}
}
