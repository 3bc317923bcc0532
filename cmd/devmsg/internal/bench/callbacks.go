package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// CallbackWorkloads measure status-record delivery: how soon a record
// reaches the app's receiver, and how fast a backlog drains. They run only
// when named:
//
//   - callback-lag: Subscribers devices connected and acknowledging; REST
//     sends at Rate (default 2000/s); for each delivery-success record, the
//     time from the device's PUBACK to the record reaching a local
//     receiver.
//   - callback: with the receiver holding its first request, a closed
//     `send` loop builds a backlog of records (0 and 2 per send) for
//     Duration; then the receiver is released and the records/s of the
//     drain, routing included, are measured.
var CallbackWorkloads = []string{"callback-lag", "callback"}

// cbReceiver is the developer's endpoint of the callback workloads.
type cbReceiver struct {
	srv  *http.Server
	url  string
	hold chan struct{} // closed: answer; open: wait

	records atomic.Int64
	mu      sync.Mutex
	acked   map[string]time.Time // msgid → device PUBACK time
	lag     *tally
}

func startReceiver() (*cbReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &cbReceiver{url: "http://" + ln.Addr().String() + "/cb", hold: make(chan struct{}), acked: map[string]time.Time{}, lag: newTally()}
	close(r.hold)
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *cbReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet {
		_, _ = io.WriteString(w, req.URL.Query().Get("echostr"))
		return
	}
	r.mu.Lock()
	hold := r.hold
	r.mu.Unlock()
	<-hold
	var recs []struct {
		Type  int    `json:"type"`
		MsgID string `json:"msgid"`
	}
	if err := json.NewDecoder(req.Body).Decode(&recs); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	now := time.Now()
	r.mu.Lock()
	for _, rec := range recs {
		if rec.Type != 4 {
			continue
		}
		if at, ok := r.acked[rec.MsgID]; ok {
			r.lag.add(true, "", now.Sub(at))
			delete(r.acked, rec.MsgID)
		}
	}
	r.mu.Unlock()
	r.records.Add(int64(len(recs)))
}

func (r *cbReceiver) close() { _ = r.srv.Close() }

// setupCallbacks points the bench app's callbacks at the receiver.
func (b *runner) setupCallbacks(ctx context.Context) (*cbReceiver, error) {
	if b.cb != nil {
		return b.cb, nil
	}
	r, err := startReceiver()
	if err != nil {
		return nil, err
	}
	base := b.target + "/admin/v1/apps/" + b.key + "/callback"
	for _, c := range []struct{ method, url, body string }{
		{http.MethodPost, base + "/urls", fmt.Sprintf(`{"url":%q}`, r.url)},
		{http.MethodPut, base, `{"enabled":true}`},
	} {
		st, body, err := do(ctx, b.admin, c.method, c.url, b.o.AdminUser, b.o.AdminPassword, []byte(c.body))
		if err != nil || st != http.StatusOK {
			r.close()
			return nil, fmt.Errorf("configure callbacks (the server needs callback.allow_custom_ports, and callback.allowed_networks covering 127.0.0.0/8): %s", failure(st, body, err))
		}
	}
	time.Sleep(1500 * time.Millisecond) // settings reach the worker within a second
	b.cb = r
	return r, nil
}

// callbackLag sends to connected devices at rate and measures PUBACK →
// record arrival for each delivery-success record.
func (b *runner) callbackLag(ctx context.Context, workload string, rate int) (Result, error) {
	if b.nodes[0].mqtt == "" {
		return Result{}, errors.New(workload + " needs the server's MQTT address: run without --target, or give --mqtt")
	}
	r, err := b.setupCallbacks(ctx)
	if err != nil {
		return Result{}, err
	}
	r.mu.Lock()
	r.lag = newTally()
	r.mu.Unlock()
	var conns []*mqttConn
	defer func() { closeAll(conns) }()
	for i := range b.o.Subscribers {
		c, topic, err := b.dialDevice(i)
		if err == nil {
			err = c.subscribe(topic)
		}
		if err != nil {
			return Result{}, fmt.Errorf("device %d: %w", i, err)
		}
		conns = append(conns, c)
		go func() {
			_ = c.serve(func(_ string, payload []byte) {
				var m struct {
					MsgID string `json:"msgid"`
				}
				if json.Unmarshal(payload, &m) == nil {
					r.mu.Lock()
					r.acked[m.MsgID] = time.Now() // the PUBACK follows at once
					r.mu.Unlock()
				}
			}, nil)
		}()
	}
	var sent atomic.Int64
	win := b.begin(ctx, workload)
	start := time.Now()
	b.openSchedule(ctx, rate, func(c *conn, dev int, at time.Time) {
		if ok, _ := b.sendAt(ctx, c, dev, at); ok {
			sent.Add(1)
		}
	})
	sendEnd := time.Now()
	// The last records wait for their batch at most the flush interval
	// (10 s by default), which shows in the top of the distribution.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		n := r.lag.n
		r.mu.Unlock()
		if n >= sent.Load() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	r.mu.Lock()
	res := r.lag.result(workload, b.crossNode(loadLabel(rate, 0, b.o.Subscribers)), elapsed)
	arrived := r.lag.n
	clear(r.acked)
	r.mu.Unlock()
	res.Requests, res.PerSecond = sent.Load(), float64(arrived)/sendEnd.Sub(start).Seconds()
	if missing := sent.Load() - arrived; missing > 0 {
		res.Errors = missing
		res.FirstErrors = []string{fmt.Sprintf("%d delivery-success records did not arrive within 15 s", missing)}
	}
	return res, win.end(&res)
}

// callbackDrain builds a backlog while the receiver holds, then measures
// how fast it drains.
func (b *runner) callbackDrain(ctx context.Context, workload string, out io.Writer) (Result, error) {
	r, err := b.setupCallbacks(ctx)
	if err != nil {
		return Result{}, err
	}
	before, err := b.metricSum(ctx, "devmsg_callback_records_queued_total")
	if err != nil {
		return Result{}, err
	}
	hold := make(chan struct{})
	r.mu.Lock()
	r.hold = hold
	r.mu.Unlock()
	load, err := b.closedLoop(ctx, "send")
	if err != nil {
		close(hold)
		return Result{}, err
	}
	// Wait until every record is routed to the receiver's queue.
	var queued float64
	for prev, stable := -1.0, 0; stable < 3 && ctx.Err() == nil; {
		time.Sleep(500 * time.Millisecond)
		if queued, err = b.metricSum(ctx, "devmsg_callback_records_queued_total"); err != nil {
			close(hold)
			return Result{}, err
		}
		if queued == prev {
			stable++
		} else {
			stable = 0
		}
		prev = queued
	}
	backlog := int64(queued - before)
	got0 := r.records.Load()
	fmt.Fprintf(out, "%-16s backlog of %d records from %d sends (%.0f sends/s); receiver released\n", workload, backlog, load.Requests, load.PerSecond)
	win := b.begin(ctx, workload)
	start := time.Now()
	close(hold)
	deadline := start.Add(5 * time.Minute)
	for r.records.Load()-got0 < backlog && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	got := r.records.Load() - got0
	res := Result{Workload: workload, Load: fmt.Sprintf("backlog %d", backlog), Requests: backlog, PerSecond: float64(got) / elapsed.Seconds()}
	if got < backlog {
		res.Errors = backlog - got
		res.FirstErrors = []string{fmt.Sprintf("%d of %d records not delivered within 5 minutes", backlog-got, backlog)}
	}
	return res, win.end(&res)
}
