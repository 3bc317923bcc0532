package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// EventWorkloads measure device events: telemetry from devices to the
// app's event webhook. They run only when named:
//
//   - telemetry: Subscribers devices publish QoS 1 telemetry to
//     up/telemetry for Duration, each as fast as it may: up to
//     telemetryDeviceRate publishes a second (the server refuses a device
//     more than 50) and telemetryWindow unacknowledged; an event webhook
//     of the app points at a receiver in the bench process. It reports
//     PUBACKs/s (events durably ingested) with the publish → PUBACK
//     latency, and events/s reaching the webhook with the publish →
//     arrival latency; then the same at a fixed Rate (default 5,000/s) on
//     an open-loop timetable, timed from each publish's scheduled instant.
//     Then, with one node, Mosquitto relays the same QoS 1 publishes to
//     one subscriber, measured both ways.
var EventWorkloads = []string{"telemetry"}

// telemetryWindow is how many QoS 1 publishes each bench device keeps
// unacknowledged: a device that waited for each PUBACK would measure the
// round trip, not what the server ingests.
const telemetryWindow = 16

// telemetryDeviceRate is the most publishes a second of one bench device:
// under the server's per-device limit (broker.DefaultPublishRate, 50/s),
// past which it refuses publishes, so the offered load is Subscribers ×
// this. The bench imports nothing of the server, hence the copy.
const telemetryDeviceRate = 40

// telemetryDrain bounds the wait, after the publishing stops, for the last
// PUBACKs and the last webhook arrivals.
const telemetryDrain = 30 * time.Second

// reading is what a bench device publishes: its own sequence number and
// the instant the publish was scheduled (Unix ns), which the receiving
// end turns into a latency. Run tells the phases of a run apart.
type reading struct {
	Temp float64 `json:"temp"`
	Seq  int64   `json:"seq"`
	Run  int     `json:"run"`
	At   int64   `json:"at_ns"`
}

// arrivals is what reached the receiving end (the webhook receiver, or
// Mosquitto's subscriber) in the current phase.
type arrivals struct {
	mu    sync.Mutex
	run   int
	lat   *tally
	seen  map[string]struct{} // device/seq of the phase
	dups  int64
	stale int64 // readings of an earlier phase
	last  time.Time
}

func newArrivals() *arrivals { return &arrivals{lat: newTally(), seen: map[string]struct{}{}} }

// begin starts phase run: what arrives from here on counts for it.
func (a *arrivals) begin(run int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.run, a.lat, a.seen, a.dups, a.stale, a.last = run, newTally(), map[string]struct{}{}, 0, 0, time.Time{}
}

// arrive counts one reading of device, arrived at now.
func (a *arrivals) arrive(device string, payload []byte, now time.Time) {
	var r reading
	if json.Unmarshal(payload, &r) != nil {
		return
	}
	key := device + "/" + strconv.FormatInt(r.Seq, 10)
	a.mu.Lock()
	defer a.mu.Unlock()
	switch _, dup := a.seen[key]; {
	case r.Run != a.run:
		a.stale++
	case dup:
		a.dups++
	default:
		a.seen[key] = struct{}{}
		a.lat.add(true, "", now.Sub(time.Unix(0, r.At)))
		a.last = now
	}
}

// count is the phase's distinct readings so far.
func (a *arrivals) count() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int64(len(a.seen))
}

// hookReceiver is the developer's event webhook: plain HTTP/1.1 on a
// loopback port, answering the echostr check and decoding every batch.
type hookReceiver struct {
	srv   *http.Server
	url   string
	got   *arrivals
	posts atomic.Int64
}

func startHookReceiver(got *arrivals) (*hookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &hookReceiver{url: "http://" + ln.Addr().String() + "/events", got: got}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet {
		_, _ = io.WriteString(w, req.URL.Query().Get("echostr"))
		return
	}
	var evs []struct {
		Type       string `json:"type"`
		DeviceName string `json:"device_name"`
		Data       struct {
			Payload  string `json:"payload"`
			Encoding string `json:"encoding"`
		} `json:"data"`
	}
	if err := json.NewDecoder(req.Body).Decode(&evs); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	r.posts.Add(1)
	for _, e := range evs {
		if e.Type == "device.up" && e.Data.Encoding == "utf8" {
			r.got.arrive(e.DeviceName, []byte(e.Data.Payload), now)
		}
	}
}

func (r *hookReceiver) close() { _ = r.srv.Close() }

// publisher is one bench device publishing telemetry.
type publisher struct {
	c      *mqttConn
	name   string // the device name, as the receiving end sees it
	topic  string
	window chan struct{} // one token per unacknowledged publish
	seq    int64         // this device's readings so far, over every phase

	mu       sync.Mutex
	inflight map[uint16]time.Time // packet id → scheduled instant
	ackLat   *tally
	acked    int64
	sent     int64
	failed   int64
	firstErr string
}

func newPublisher(c *mqttConn, name, topic string) *publisher {
	p := &publisher{c: c, name: name, topic: topic, window: make(chan struct{}, telemetryWindow),
		inflight: map[uint16]time.Time{}, ackLat: newTally()}
	go func() {
		_ = c.serve(nil, func(id uint16) {
			now := time.Now()
			p.mu.Lock()
			if at, ok := p.inflight[id]; ok {
				delete(p.inflight, id)
				p.ackLat.add(true, "", now.Sub(at))
				p.acked++
				<-p.window
			}
			p.mu.Unlock()
		})
	}()
	return p
}

// publish sends one reading scheduled at at (zero: when the window has
// room, as a closed loop sends), once the window has room.
func (p *publisher) publish(ctx context.Context, run int, at time.Time) {
	select {
	case p.window <- struct{}{}:
	case <-ctx.Done():
		return
	}
	if at.IsZero() {
		at = time.Now()
	}
	p.seq++
	payload, _ := json.Marshal(reading{Temp: 20 + float64(p.seq%100)/10, Seq: p.seq, Run: run, At: at.UnixNano()})
	p.mu.Lock()
	defer p.mu.Unlock()
	id, err := p.c.publish(p.topic, payload)
	if err != nil {
		<-p.window
		p.failed++
		if p.firstErr == "" {
			p.firstErr = err.Error()
		}
		return
	}
	p.sent++
	p.inflight[id] = at
}

// reset starts a phase's counts.
func (p *publisher) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ackLat, p.acked, p.sent, p.failed, p.firstErr = newTally(), 0, 0, 0, ""
}

// fleet is the publishers of one broker.
type fleet []*publisher

func (f fleet) close() {
	for _, p := range f {
		p.c.close()
	}
}

// counts sums the phase's counts, cheaply: the drain polls it.
func (f fleet) counts() (sent, acked int64) {
	for _, p := range f {
		p.mu.Lock()
		sent, acked = sent+p.sent, acked+p.acked
		p.mu.Unlock()
	}
	return sent, acked
}

// totals sums the phase's counts and PUBACK latencies.
func (f fleet) totals() (sent, acked, failed int64, lat *tally, firstErr string) {
	lat = newTally()
	for _, p := range f {
		p.mu.Lock()
		sent, acked, failed = sent+p.sent, acked+p.acked, failed+p.failed
		lat.merge(p.ackLat)
		if firstErr == "" {
			firstErr = p.firstErr
		}
		p.mu.Unlock()
	}
	return sent, acked, failed, lat, firstErr
}

// phase is one measured run of a fleet: back to back (rate 0) or at rate.
type phase struct {
	workload, hookWorkload string // names of the PUBACK and arrival results
	broker                 string // the receiving end, for the report: "webhook" or "subscriber"
	rate                   int
}

// runPhase publishes for Duration, waits for the PUBACKs and arrivals, and
// returns the PUBACK result (ingest) and the arrival result (delivery).
func (b *runner) runPhase(ctx context.Context, f fleet, got *arrivals, run int, ph phase) (ingest, delivered Result) {
	// A device whose PUBACKs stop (a refusal) must not hold the run past
	// its drain.
	ctx, cancel := context.WithTimeout(ctx, b.o.Duration+telemetryDrain)
	defer cancel()
	for _, p := range f {
		p.reset()
	}
	got.begin(run)
	start := time.Now()
	var wg sync.WaitGroup
	if ph.rate > 0 {
		// A queue per device, filled on the timetable; each device
		// publishes its own in order.
		queues := make([]chan time.Time, len(f))
		for i, p := range f {
			queues[i] = make(chan time.Time, max(64, ph.rate/len(f)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for at := range queues[i] {
					p.publish(ctx, run, at)
				}
			}()
		}
		interval := time.Second / time.Duration(ph.rate)
		for i := 0; i < int(b.o.Duration/interval) && ctx.Err() == nil; i++ {
			at := start.Add(time.Duration(i) * interval)
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
			queues[i%len(f)] <- at
		}
		for _, q := range queues {
			close(q)
		}
	} else {
		end := start.Add(b.o.Duration)
		pace := time.Second / telemetryDeviceRate
		for i, p := range f {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Devices start spread over one interval, not in step.
				next := start.Add(pace * time.Duration(i) / time.Duration(len(f)))
				for ; next.Before(end) && ctx.Err() == nil; next = next.Add(pace) {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					p.publish(ctx, run, time.Time{})
				}
			}()
		}
	}
	wg.Wait()
	sendEnd := time.Now()
	deadline := sendEnd.Add(telemetryDrain)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		sent, acked := f.counts()
		if acked == sent && got.count() >= acked {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	sent, acked, failed, ackLat, firstErr := f.totals()
	load := fmt.Sprintf("%d dev ≤ %d/s", len(f), telemetryDeviceRate)
	if ph.rate > 0 {
		load = fmt.Sprintf("%d/s, %d dev", ph.rate, len(f))
	}
	window := sendEnd.Sub(start)
	if ph.rate > 0 {
		window = max(window, b.o.Duration)
	}
	ingest = ackLat.result(ph.workload, load, window)
	ingest.Requests, ingest.Errors = sent+failed, sent+failed-acked
	ingest.PerSecond = float64(acked) / window.Seconds()
	if firstErr != "" {
		ingest.FirstErrors = append(ingest.FirstErrors, firstErr)
	}
	if unacked := sent - acked; unacked > 0 {
		ingest.FirstErrors = append(ingest.FirstErrors, fmt.Sprintf("%d publishes not acknowledged within %s", unacked, telemetryDrain))
	}
	got.mu.Lock()
	n := int64(len(got.seen))
	span := got.last.Sub(start)
	delivered = got.lat.result(ph.hookWorkload, load, span)
	dups := got.dups
	got.mu.Unlock()
	delivered.Requests = acked
	delivered.Errors = max(0, acked-n)
	if span > 0 {
		// Over the whole time the events took to arrive: a receiving end
		// slower than the publishing shows its own rate.
		delivered.PerSecond = float64(n) / span.Seconds()
	}
	if lost := acked - n; lost > 0 {
		delivered.FirstErrors = []string{fmt.Sprintf("%d acknowledged events did not reach the %s end within %s", lost, ph.broker, telemetryDrain)}
	}
	if dups > 0 {
		delivered.Load += fmt.Sprintf(", %d dup", dups)
	}
	return ingest, delivered
}

// telemetry runs the telemetry workload: devmsg back to back and at the
// open-loop rate, then Mosquitto the same two ways.
func (b *runner) telemetry(ctx context.Context, out io.Writer) ([]Result, error) {
	if b.nodes[0].mqtt == "" {
		return nil, errors.New("telemetry needs the server's MQTT address: run without --target, or give --mqtt")
	}
	got := newArrivals()
	recv, err := startHookReceiver(got)
	if err != nil {
		return nil, err
	}
	defer recv.close()
	remove, err := b.addEventWebhook(ctx, recv.url)
	if err != nil {
		return nil, err
	}
	defer remove()
	f := make(fleet, 0, b.o.Subscribers)
	defer func() { f.close() }()
	for i := range b.o.Subscribers {
		c, _, err := b.dialDevice(i)
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		f = append(f, newPublisher(c, deviceName(i), "d/"+b.key+"/"+deviceName(i)+"/up/telemetry"))
	}
	rate := b.o.Rate
	if rate == 0 {
		rate = DefaultRate
	}
	var results []Result
	report := func(rs ...Result) {
		for _, r := range rs {
			fmt.Fprintln(out, r.text())
			results = append(results, r)
		}
	}

	refused0 := b.refusedPublishes(ctx)
	win := b.begin(ctx, "telemetry")
	ingest, hook := b.runPhase(ctx, f, got, 1, phase{workload: "telemetry", hookWorkload: "telemetry-webhook", broker: "webhook"})
	if err := win.end(&ingest); err != nil {
		return nil, err
	}
	b.noteRefused(ctx, &ingest, refused0)
	hook.ServerCPU, hook.BenchCPU, hook.RedisCPU = ingest.ServerCPU, ingest.BenchCPU, ingest.RedisCPU
	report(ingest, hook)
	b.settle(ctx)

	refused0 = b.refusedPublishes(ctx)
	win = b.begin(ctx, "telemetry-latency")
	lingest, lhook := b.runPhase(ctx, f, got, 2, phase{workload: "telemetry-puback", hookWorkload: "telemetry-latency", broker: "webhook", rate: rate})
	if err := win.end(&lhook); err != nil {
		return nil, err
	}
	b.noteRefused(ctx, &lingest, refused0)
	lingest.ServerCPU, lingest.BenchCPU, lingest.RedisCPU = lhook.ServerCPU, lhook.BenchCPU, lhook.RedisCPU
	report(lhook, lingest)
	f.close()
	f = nil

	if len(b.nodes) > 1 {
		fmt.Fprintln(out, "telemetry: Mosquitto compares one broker; not run with several nodes")
		return results, nil
	}
	mq, err := b.telemetryMosquitto(ctx, rate)
	if err != nil {
		return nil, fmt.Errorf("mosquitto: %w", err)
	}
	report(mq.ingest, mq.relay, mq.latency, mq.latencyAck)
	fmt.Fprintln(out, "devmsg / mosquitto:")
	if mq.ingest.PerSecond > 0 && mq.relay.PerSecond > 0 {
		fmt.Fprintf(out, "  events/s acknowledged  %.2f (%.0f vs %.0f)\n", ingest.PerSecond/mq.ingest.PerSecond, ingest.PerSecond, mq.ingest.PerSecond)
		fmt.Fprintf(out, "  events/s delivered     %.2f (%.0f to a webhook vs %.0f to a subscriber)\n", hook.PerSecond/mq.relay.PerSecond, hook.PerSecond, mq.relay.PerSecond)
	}
	if mq.latency.P99 > 0 {
		fmt.Fprintf(out, "  p99 at %d/s          %.2f (%s vs %s)\n", rate, float64(lhook.P99)/float64(mq.latency.P99), ms(lhook.P99), ms(mq.latency.P99))
	}
	return results, nil
}

// mosquittoTelemetry is Mosquitto's side of the telemetry workload.
type mosquittoTelemetry struct {
	ingest, relay       Result // back to back: PUBACKs, and arrivals at the subscriber
	latency, latencyAck Result // at the rate: arrivals, and PUBACKs
}

// telemetryMosquitto has Mosquitto relay the same publishes to one
// subscriber of d/bench/+/up/#, back to back and at rate.
func (b *runner) telemetryMosquitto(ctx context.Context, rate int) (mosquittoTelemetry, error) {
	var mt mosquittoTelemetry
	// One subscriber takes every device's publishes: no queue limit, as a
	// team relaying telemetry to one consumer would configure it.
	m, err := startMosquitto(ctx, 0)
	if err != nil {
		return mt, err
	}
	defer m.stop()
	got := newArrivals()
	sub, err := dialMQTT(m.addr, "", "telemetry-consumer", "", "", 60)
	if err != nil {
		return mt, err
	}
	defer sub.close()
	if err := sub.subscribe("d/bench/+/up/#"); err != nil {
		return mt, err
	}
	go func() {
		_ = sub.serve(func(topic string, payload []byte) {
			// d/bench/{device}/up/telemetry
			if parts := strings.SplitN(topic, "/", 4); len(parts) == 4 {
				got.arrive(parts[2], payload, time.Now())
			}
		}, nil)
	}()
	f := make(fleet, 0, b.o.Subscribers)
	defer func() { f.close() }()
	for i := range b.o.Subscribers {
		c, err := dialMQTT(m.addr, "", "pub-"+deviceName(i), "", "", 60)
		if err != nil {
			return mt, fmt.Errorf("publisher %d: %w", i, err)
		}
		f = append(f, newPublisher(c, deviceName(i), "d/bench/"+deviceName(i)+"/up/telemetry"))
	}
	// The broker's and the bench's CPU over each phase, as devmsg's are.
	measured := func(run int, ph phase) (Result, Result) {
		t0, m0, b0 := time.Now(), procCPU(m.cmd.Process.Pid), selfCPU()
		ack, arrived := b.runPhase(ctx, f, got, run, ph)
		secs := time.Since(t0).Seconds()
		for _, r := range []*Result{&ack, &arrived} {
			r.ServerCPU, r.BenchCPU, r.RedisCPU = -1, -1, -1
			if m1 := procCPU(m.cmd.Process.Pid); m0 >= 0 && m1 >= 0 {
				r.ServerCPU = (m1 - m0) / secs
			}
			if b1 := selfCPU(); b0 >= 0 && b1 >= 0 {
				r.BenchCPU = (b1 - b0) / secs
			}
		}
		return ack, arrived
	}
	mt.ingest, mt.relay = measured(1, phase{workload: "mosquitto-telemetry", hookWorkload: "mosquitto-relay", broker: "subscriber"})
	mt.latencyAck, mt.latency = measured(2, phase{workload: "mosquitto-puback", hookWorkload: "mosquitto-relay-latency", broker: "subscriber", rate: rate})
	return mt, nil
}

// refusedPublishes is the servers' count of refused device publishes
// (the PUBACKs that never came, over MQTT 3.1.1); -1 when unknown.
func (b *runner) refusedPublishes(ctx context.Context) float64 {
	n, err := b.metricSum(ctx, "devmsg_mqtt_publishes_refused_total")
	if err != nil {
		return -1
	}
	return n
}

// noteRefused adds to r's errors how many publishes the servers refused
// since they counted before, so a missing PUBACK is told from a slow one.
func (b *runner) noteRefused(ctx context.Context, r *Result, before float64) {
	if after := b.refusedPublishes(ctx); before >= 0 && after > before {
		r.FirstErrors = append(r.FirstErrors, fmt.Sprintf("the server refused %.0f publishes (devmsg_mqtt_publishes_refused_total)", after-before))
	}
}

// addEventWebhook adds url as an event webhook of the bench app for
// device.up events, through the admin API, and returns its removal.
func (b *runner) addEventWebhook(ctx context.Context, hook string) (func(), error) {
	base := b.target + "/admin/v1/apps/" + b.key + "/events/webhooks"
	st, body, err := do(ctx, b.admin, http.MethodPost, base, b.o.AdminUser, b.o.AdminPassword,
		fmt.Appendf(nil, `{"url":%q,"types":["device.up"]}`, hook))
	if err != nil || st != http.StatusOK {
		return nil, fmt.Errorf("add event webhook (the server must allow loopback webhook URLs on any port): %s", failure(st, body, err))
	}
	return func() {
		_, _, _ = do(context.Background(), b.admin, http.MethodDelete, base+"?url="+url.QueryEscape(hook), b.o.AdminUser, b.o.AdminPassword, nil)
	}, nil
}
