package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CommandWorkloads measure device commands: the backend asks, the device
// answers at once, the backend has the answer. They run only when named,
// each with Mosquitto as its peer in the same run: an MQTT 5
// request/response (Response Topic and Correlation Data) between a
// backend client and the same number of device clients, the same work
// without durability.
//
//   - command-latency: Subscribers devices connected over MQTT 5; REST
//     POST /cmd/v1/cmd with wait at Rate (default 2000/s) round-robin on
//     an open-loop timetable; latency from each command's scheduled
//     instant to the HTTP answer carrying the device's answer. The peer:
//     one backend client publishes the requests at the same rate and
//     times each from its schedule to the response's arrival.
//   - command-batch: the same devices; FanoutWorkers REST workers post
//     POST /cmd/v1/cmds to up to 1000 of them with wait, back to back for
//     Warmup and then Duration, which is measured (measuredWindow):
//     commands answered per second (round trips/s), latency per call. The
//     peer: FanoutWorkers backend clients each publish a request to every
//     device and wait for all the responses, back to back, measured the
//     same way.
var CommandWorkloads = []string{"command-latency", "command-batch"}

// DefaultCommandRate is the open-loop rate of command-latency.
const DefaultCommandRate = 2000

// commandWait is the wait of the bench's commands, in seconds: far above
// any answer's time, below the HTTP client's 30 s timeout. Their ttl is
// 30 s, so a command that waits behind others to be sent is measured,
// not ended expired.
const commandWait = 20

// commandAnswer is what a bench device answers, to either broker.
var commandAnswer = []byte(`{"code":0,"result":"pong"}`)

// commandDevices connects n MQTT 5 devices subscribed to their cmd
// topics through dial; each acknowledges a command and answers it at
// once, to the Response Topic with the Correlation Data; a publish on
// another topic (a message) is only acknowledged. Answers that could not
// be written are counted in failed.
func commandDevices(n int, dial func(i int) (*mqttConn, string, error), failed *atomic.Int64) ([]*mqttConn, error) {
	conns := make([]*mqttConn, 0, n)
	for i := range n {
		c, topic, err := dial(i)
		if err == nil {
			err = c.subscribe(topic)
		}
		if err != nil {
			if c != nil {
				c.close()
			}
			closeAll(conns)
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		conns = append(conns, c)
		go func() {
			_ = c.serveProps(func(topic string, _ []byte, p mqttProps) {
				if !strings.HasSuffix(topic, "/cmd") {
					return
				}
				if p.respTopic == "" {
					failed.Add(1) // an MQTT 5 broker relays the Response Topic
					return
				}
				if _, err := c.publishProps(p.respTopic, commandAnswer, mqttProps{corr: p.corr}); err != nil {
					failed.Add(1)
				}
			}, nil, true)
		}()
	}
	return conns, nil
}

// dialCommandDevice connects devmsg device i over MQTT 5; its topic is
// its cmd topic.
func (b *runner) dialCommandDevice(i int) (*mqttConn, string, error) {
	user := b.key + "/" + deviceName(i)
	c, err := dialMQTT5(b.nodes[b.mqttNode(i)].mqtt, "", user, user, b.secrets[i], 60)
	return c, "d/" + user + "/cmd", err
}

// commands runs a command workload against devmsg and against
// Mosquitto, and prints the ratios. command-latency runs each once;
// command-batch gives each batchTurns turns in alternating order.
func (b *runner) commands(ctx context.Context, workload string, out io.Writer) ([]Result, error) {
	if b.nodes[0].mqtt == "" {
		return nil, errors.New(workload + " needs the server's MQTT address: run without --target, or give --mqtt")
	}
	var failed atomic.Int64
	conns, err := commandDevices(b.o.Subscribers, b.dialCommandDevice, &failed)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	var peer *requestPeer
	if len(b.nodes) == 1 {
		if peer, err = startRequestPeer(ctx, b.o.Subscribers); err != nil {
			return nil, fmt.Errorf("mosquitto: %w", err)
		}
		defer peer.stop()
	}
	var r, mq Result
	if workload == "command-latency" {
		if r, err = b.commandLatencyDevmsg(ctx, workload); err == nil && peer != nil {
			mq, err = b.requestLatencyMosquitto(ctx, peer.m, "mosquitto-"+workload)
		}
	} else {
		r, mq, err = b.commandBatchTurns(ctx, workload, peer)
	}
	if err != nil {
		return nil, err
	}
	if n := failed.Load(); n > 0 {
		r.FirstErrors = append(r.FirstErrors, fmt.Sprintf("%d answers could not be published", n))
	}
	fmt.Fprintln(out, r.text())
	if peer == nil {
		fmt.Fprintln(out, workload+": Mosquitto compares one broker; not run with several nodes")
		return []Result{r}, nil
	}
	if n := peer.failed.Load(); n > 0 {
		mq.FirstErrors = append(mq.FirstErrors, fmt.Sprintf("%d responses could not be published", n))
	}
	mq.ServerCPU, mq.BenchCPU, mq.RedisCPU = -1, -1, -1
	fmt.Fprintln(out, mq.text())
	fmt.Fprintln(out, "devmsg / mosquitto:")
	if mq.PerSecond > 0 {
		fmt.Fprintf(out, "  round trips/s   %.2f (%.0f vs %.0f)\n", r.PerSecond/mq.PerSecond, r.PerSecond, mq.PerSecond)
	}
	if mq.P99 > 0 {
		fmt.Fprintf(out, "  p99             %.2f (%s vs %s)\n", float64(r.P99)/float64(mq.P99), ms(r.P99), ms(mq.P99))
	}
	return []Result{r, mq}, nil
}

// commandRate is the rate of command-latency.
func (b *runner) commandRate() int {
	if b.o.Rate > 0 {
		return b.o.Rate
	}
	return DefaultCommandRate
}

// commandLatencyDevmsg runs command-latency against devmsg.
func (b *runner) commandLatencyDevmsg(ctx context.Context, workload string) (Result, error) {
	rate := b.commandRate()
	t, mu := newTally(), &sync.Mutex{}
	send := func(c *conn, dev int, at time.Time) {
		ok, reason := b.command(ctx, c, dev)
		d := time.Since(at)
		mu.Lock()
		t.add(ok, reason, d)
		t.noteSlow(at, d)
		mu.Unlock()
	}
	win := b.begin(ctx, workload)
	start := time.Now()
	b.openSchedule(ctx, rate, send)
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	r := t.result(workload, b.crossNode(loadLabel(rate, 0, b.o.Subscribers)), elapsed)
	r.slow = t.slow
	return r, win.end(&r)
}

// command sends device i a ping with wait and checks that the answer is
// the device's.
func (b *runner) command(ctx context.Context, c *conn, i int) (bool, string) {
	seq := b.seqBase + b.seq.Add(1)
	body := fmt.Appendf(nil, `{"seq_no":%d,"device_name":%q,"name":"ping","params":{"seq":%d},"ttl":30,"timeout":10,"wait":%d}`, seq, deviceName(i), seq, commandWait)
	st, resp, err := do(ctx, c.c, http.MethodPost, c.base+"/cmd/v1/cmd", b.key, b.secret, body)
	if err != nil || st != http.StatusOK {
		return false, failure(st, resp, err)
	}
	if !bytes.Contains(resp, []byte(`"state":"succeeded"`)) {
		return false, fmt.Sprintf("not succeeded: %.200s", resp)
	}
	return true, ""
}

// batchTurns is how many turns each peer of command-batch takes, in the
// order devmsg, Mosquitto, Mosquitto, devmsg, devmsg, Mosquitto, each
// with the warm-up and a third of Duration measured. Both peers' device
// clients stay connected throughout. On the 2-core bench machine either
// peer's rate moves by up to a fifth from one run to the next, and a
// slow spell of the machine lowers both: turns in alternating order
// share such spells out instead of leaving one peer's whole run in it.
// With --server-pprof there is one turn each, so the profile covers one
// measured window.
const batchTurns = 3

// batchTotal adds up a command-batch peer's turns.
type batchTotal struct {
	t        *tally
	answered int64
	elapsed  time.Duration
	// serverCPU and benchCPU are core-seconds over the turns; negative
	// when a turn could not tell.
	serverCPU, benchCPU float64
}

func newBatchTotal() *batchTotal { return &batchTotal{t: newTally()} }

// add counts a turn of elapsed measured time with answered round trips
// and the CPU its window saw (cores, from window.end).
func (bt *batchTotal) add(t *tally, answered int64, elapsed time.Duration, cpu Result) {
	bt.t.merge(t)
	bt.answered += answered
	bt.elapsed += elapsed
	sec := elapsed.Seconds()
	if cpu.ServerCPU < 0 || bt.serverCPU < 0 {
		bt.serverCPU = -1
	} else {
		bt.serverCPU += cpu.ServerCPU * sec
	}
	if cpu.BenchCPU < 0 || bt.benchCPU < 0 {
		bt.benchCPU = -1
	} else {
		bt.benchCPU += cpu.BenchCPU * sec
	}
}

func (bt *batchTotal) result(workload, load string) Result {
	r := bt.t.result(workload, load, bt.elapsed)
	r.PerSecond = float64(bt.answered) / bt.elapsed.Seconds()
	r.ServerCPU, r.BenchCPU, r.RedisCPU = -1, -1, -1
	if bt.serverCPU >= 0 {
		r.ServerCPU = bt.serverCPU / bt.elapsed.Seconds()
	}
	if bt.benchCPU >= 0 {
		r.BenchCPU = bt.benchCPU / bt.elapsed.Seconds()
	}
	return r
}

// commandBatchTurns runs command-batch against devmsg and, when peer is
// not nil, against Mosquitto, in turns (batchTurns).
func (b *runner) commandBatchTurns(ctx context.Context, workload string, peer *requestPeer) (Result, Result, error) {
	turns := batchTurns
	if peer == nil || b.o.ServerPprof != "" {
		turns = 1
	}
	d := b.o.Duration / time.Duration(turns)
	dev, mq := newBatchTotal(), newBatchTotal()
	for i := range turns {
		for k := range 2 {
			var err error
			if (i+k)%2 == 0 {
				err = b.commandBatchDevmsg(ctx, workload, d, dev)
			} else if peer != nil {
				err = b.requestBatchMosquitto(ctx, peer.m, d, mq)
			}
			if err != nil {
				return Result{}, Result{}, err
			}
		}
	}
	groups := quotedGroups(b.o.Subscribers)
	load := fmt.Sprintf("%d conns × %d, %d dev", FanoutWorkers, len(groups[0]), b.o.Subscribers)
	return dev.result(workload, load), mq.result("mosquitto-"+workload, load), nil
}

// commandBatchDevmsg runs a turn of command-batch against devmsg,
// measured for d after the warm-up, and adds it to tot.
func (b *runner) commandBatchDevmsg(ctx context.Context, workload string, d time.Duration, tot *batchTotal) error {
	groups := quotedGroups(b.o.Subscribers)
	t, mu := newTally(), &sync.Mutex{}
	var answered atomic.Int64
	var wg sync.WaitGroup
	bw := b.batchWindow(d)
	for w := range FanoutWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.workerConn(ctx, w)
			defer c.close()
			var buf bytes.Buffer
			for k := w; time.Now().Before(bw.end) && ctx.Err() == nil; k++ {
				at := time.Now()
				n, reason := b.commandBatch(ctx, c, groups[k%len(groups)], &buf)
				if at.Before(bw.warmEnd) {
					continue
				}
				answered.Add(int64(n))
				mu.Lock()
				t.add(reason == "", reason, time.Since(at))
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Until(bw.warmEnd))
	win := b.begin(ctx, workload)
	wg.Wait()
	elapsed := time.Since(bw.warmEnd)
	var cpu Result
	if err := win.end(&cpu); err != nil {
		return err
	}
	tot.add(t, answered.Load(), elapsed, cpu)
	return nil
}

// measuredWindow is when a command-batch turn's batches count: those
// started from warmEnd until end. Batches run from the start, so the
// pipeline is full when the window opens; the rate is over the time from
// warmEnd until the last counted batch has ended.
type measuredWindow struct{ warmEnd, end time.Time }

// batchWindow is the window of a turn measured for d after the warm-up.
func (b *runner) batchWindow(d time.Duration) measuredWindow {
	warmEnd := time.Now().Add(b.o.Warmup)
	return measuredWindow{warmEnd: warmEnd, end: warmEnd.Add(d)}
}

// quotedGroups is devices 0..n-1's names, quoted, in groups of at most
// 1000: the batches of a batch call.
func quotedGroups(n int) [][]string {
	var groups [][]string
	for from := 0; from < n; from += 1000 {
		var names []string
		for i := from; i < min(from+1000, n); i++ {
			names = append(names, strconv.Quote(deviceName(i)))
		}
		groups = append(groups, names)
	}
	return groups
}

// commandBatch sends a ping with wait to the quoted names and returns how
// many succeeded, and why the call failed ("" when every command did).
// The answer is read into buf, which the worker keeps from call to call.
// Every command's state is checked by counting `"state":"succeeded"` in
// it, which the bench's params and answers cannot hold elsewhere; only an
// answer where not every one did is decoded, to say why. Decoding each
// answer of 1,000 documents took a tenth of the load generator's CPU,
// on the cores the server runs on, where the Mosquitto peer's backend
// reads no more of a response than its Correlation Data.
func (b *runner) commandBatch(ctx context.Context, c *conn, names []string, buf *bytes.Buffer) (int, string) {
	seq := b.seqBase + b.seq.Add(1)
	body := fmt.Appendf(nil, `{"seq_no":%d,"device_names":[%s],"name":"ping","params":{"seq":%d},"ttl":30,"timeout":10,"wait":%d}`,
		seq, strings.Join(names, ","), seq, commandWait)
	st, err := doInto(ctx, c.c, http.MethodPost, c.base+"/cmd/v1/cmds", b.key, b.secret, body, buf)
	if err != nil || st != http.StatusOK {
		return 0, failure(st, buf.Bytes(), err)
	}
	if n := bytes.Count(buf.Bytes(), succeeded); n == len(names) {
		return n, ""
	}
	var out struct {
		Resp []struct {
			State   string `json:"state"`
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"resp"`
	}
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		return 0, err.Error()
	}
	n, reason := 0, ""
	for _, r := range out.Resp {
		if r.State == "succeeded" {
			n++
		} else if reason == "" {
			reason = fmt.Sprintf("state %q code %d %s", r.State, r.Code, r.Message)
		}
	}
	if reason == "" && n != len(names) {
		reason = fmt.Sprintf("%d commands answered for %d devices", n, len(names))
	}
	return n, reason
}

// succeeded is how a succeeded command's state reads in an answer.
var succeeded = []byte(`"state":"succeeded"`)

// requestPeer is the Mosquitto peer of the command workloads: a broker
// and n device clients that answer requests as devmsg's devices answer
// commands.
type requestPeer struct {
	m      *mosquitto
	devs   []*mqttConn
	failed atomic.Int64 // responses that could not be published
}

func startRequestPeer(ctx context.Context, n int) (*requestPeer, error) {
	// No queue limit: a backend client of command-batch has a whole
	// batch's responses coming at once. TCP_NODELAY, as a team running
	// request/response on it would set: a device's connection carries the
	// PUBACK of its response and then the next request, and with Nagle
	// the request waits for the device's delayed ACK of that PUBACK (up
	// to 40 ms). Message delivery has no such pattern, and the other
	// Mosquitto peers run without it.
	m, err := startMosquittoWith(ctx, 0, "set_tcp_nodelay true\n")
	if err != nil {
		return nil, err
	}
	p := &requestPeer{m: m}
	p.devs, err = commandDevices(n, func(i int) (*mqttConn, string, error) {
		c, err := dialMQTT5(m.addr, "", "dev-"+deviceName(i), "", "", 60)
		return c, "d/bench/" + deviceName(i) + "/cmd", err
	}, &p.failed)
	if err != nil {
		m.stop()
		return nil, err
	}
	return p, nil
}

func (p *requestPeer) stop() {
	closeAll(p.devs)
	p.m.stop()
}

// requester is a backend client of the Mosquitto peer: it publishes
// requests with its own Response Topic and reads the responses there.
type requester struct {
	c      *mqttConn
	topic  string
	window chan struct{} // a place per unacknowledged request
}

// requestWindow is how many requests a requester keeps unacknowledged:
// the flow control of MQTT 5 (Receive Maximum) that Mosquitto's
// max_inflight_messages of the bench's configuration matches.
const requestWindow = 64

func newRequester(m *mosquitto, k int, onResponse func(corr []byte)) (*requester, error) {
	c, err := dialMQTT5(m.addr, "", fmt.Sprintf("backend-%d", k), "", "", 60)
	if err != nil {
		return nil, err
	}
	rq := &requester{c: c, topic: fmt.Sprintf("backend/%d/responses", k), window: make(chan struct{}, requestWindow)}
	if err := c.subscribe(rq.topic); err != nil {
		c.close()
		return nil, err
	}
	go func() {
		_ = c.serveProps(func(_ string, _ []byte, p mqttProps) { onResponse(p.corr) }, func(uint16) { <-rq.window }, false)
	}()
	return rq, nil
}

func (rq *requester) request(dev int, corr []byte) error {
	rq.window <- struct{}{}
	_, err := rq.c.publishProps("d/bench/"+deviceName(dev)+"/cmd", []byte(`{"name":"ping"}`), mqttProps{respTopic: rq.topic, corr: corr})
	return err
}

// requestLatencyMosquitto publishes requests at the command rate, each
// with its scheduled instant as Correlation Data, and times each from
// then to its response.
func (b *runner) requestLatencyMosquitto(ctx context.Context, m *mosquitto, name string) (Result, error) {
	rate := b.commandRate()
	t, mu, got := newTally(), &sync.Mutex{}, &atomic.Int64{}
	rq, err := newRequester(m, 0, func(corr []byte) {
		at, ok := parseNanos(string(corr))
		if !ok {
			return
		}
		d := time.Since(at)
		got.Add(1)
		mu.Lock()
		t.add(true, "", d)
		mu.Unlock()
	})
	if err != nil {
		return Result{}, err
	}
	defer rq.c.close()
	var sent, failed int64
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; i < int(b.o.Duration/interval) && ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		if rq.request(i%b.o.Subscribers, strconv.AppendInt(nil, at.UnixNano(), 10)) != nil {
			failed++
		} else {
			sent++
		}
	}
	for deadline := time.Now().Add(10 * time.Second); got.Load() < sent && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	r := t.result(name, loadLabel(rate, 0, b.o.Subscribers), time.Since(start))
	r.Requests, r.Errors = sent+failed, sent+failed-got.Load()
	r.PerSecond = float64(got.Load()) / time.Since(start).Seconds()
	if r.Errors > 0 {
		r.FirstErrors = append(r.FirstErrors, fmt.Sprintf("%d requests got no response within 10 s", r.Errors))
	}
	return r, nil
}

// requestBatchMosquitto runs a turn of the Mosquitto peer of
// command-batch, measured for d after the warm-up, and adds it to tot:
// FanoutWorkers backend clients each publish a request to every device
// and wait for all the responses, back to back. A failed batch ends its
// worker.
func (b *runner) requestBatchMosquitto(ctx context.Context, m *mosquitto, d time.Duration, tot *batchTotal) error {
	t, mu := newTally(), &sync.Mutex{}
	fail := func(at time.Time, err error) {
		mu.Lock()
		defer mu.Unlock()
		t.add(false, err.Error(), time.Since(at))
	}
	var answered atomic.Int64
	var wg sync.WaitGroup
	bw := b.batchWindow(d)
	batch := min(b.o.Subscribers, 1000)
	for w := range FanoutWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A response carries its batch's number; one of an earlier
			// batch (none, unless lost) does not count for this one.
			var current atomic.Int64
			left := make(chan struct{}, batch)
			rq, err := newRequester(m, w, func(corr []byte) {
				if n, _ := strconv.ParseInt(string(corr), 10, 64); n == current.Load() {
					left <- struct{}{}
				}
			})
			if err != nil {
				fail(time.Now(), err)
				return
			}
			defer rq.c.close()
			for k := int64(1); time.Now().Before(bw.end) && ctx.Err() == nil; k++ {
				current.Store(k)
				corr := strconv.AppendInt(nil, k, 10)
				at := time.Now()
				from := (w * batch) % b.o.Subscribers
				for i := range batch {
					if err := rq.request((from+i)%b.o.Subscribers, corr); err != nil {
						fail(at, err)
						return
					}
				}
				for range batch {
					select {
					case <-left:
					case <-time.After(10 * time.Second):
						fail(at, fmt.Errorf("batch %d: responses missing after 10 s", k))
						return
					}
				}
				if at.Before(bw.warmEnd) {
					continue
				}
				answered.Add(int64(batch))
				mu.Lock()
				t.add(true, "", time.Since(at))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	tot.add(t, answered.Load(), time.Since(bw.warmEnd), Result{ServerCPU: -1, BenchCPU: -1})
	return nil
}
