package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// JobWorkloads measure jobs: one command rolled out to a fleet at the
// highest pace the API allows. They run only when named:
//
//   - job: Subscribers of the Devices registered devices are connected
//     over MQTT 5 and answer a command at once (as in CommandWorkloads);
//     the rest are offline. In turn: job, a job to every device (POST
//     /job/v1/jobs, target all, rollout rate JobRate, ttl JobTTL so that
//     the offline devices' commands stay queued) with nothing beside it;
//     job-send-base, single sends (POST /msg/v1/msg) to the connected
//     devices at Rate (default DefaultJobSendRate) on an open-loop
//     timetable for Duration, with no job under way; job-send, the same
//     loop beside a second job to every device, and job-busy, that
//     job's progress. Progress
//     comes from polling GET /job/v1/job: commands started = targets −
//     counts.pending. A job's figure is commands started per second
//     between the first poll that saw one started and the first that saw
//     none pending; its latencies are the POST's (p50 to p99.9) and the
//     time from the POST to the last target started (max).
var JobWorkloads = []string{"job"}

// Defaults of the job workload.
const (
	// DefaultJobDevices is the devices of a run naming job, unless
	// --devices says otherwise.
	DefaultJobDevices = 100_000
	// DefaultJobSendRate is the single sends' rate beside the job.
	DefaultJobSendRate = 500
	// JobRate is the job's rollout rate, commands a minute: the most the
	// API accepts.
	JobRate = 1_000_000
	// JobTTL is the job's commands' ttl (s): far longer than a run, so
	// the offline devices' commands stay queued and none ends expired.
	JobTTL = 600
)

// jobPoll is how often the job's progress is read; jobDeadline bounds a
// job's wait for its last target.
const (
	jobPoll     = 100 * time.Millisecond
	jobDeadline = 10 * time.Minute
)

// jobDevices connects the job workload's devices: command devices (see
// commandDevices) also subscribed to their msg topics, so that the
// single sends beside the job are delivered and acknowledged.
func (b *runner) jobDevices(failed *atomic.Int64) ([]*mqttConn, error) {
	return commandDevices(b.o.Subscribers, func(i int) (*mqttConn, string, error) {
		c, topic, err := b.dialCommandDevice(i)
		if err == nil {
			err = c.subscribe("d/" + b.key + "/" + deviceName(i) + "/msg")
		}
		return c, topic, err
	}, failed)
}

// jobSendRate is the rate of the single sends beside the job.
func (b *runner) jobSendRate() int {
	if b.o.Rate > 0 {
		return b.o.Rate
	}
	return DefaultJobSendRate
}

// jobs runs the job workload and prints its results and comparisons.
func (b *runner) jobs(ctx context.Context, out io.Writer) ([]Result, error) {
	if b.nodes[0].mqtt == "" {
		return nil, errors.New("job needs the server's MQTT address: run without --target, or give --mqtt")
	}
	var failed atomic.Int64
	conns, err := b.jobDevices(&failed)
	if err != nil {
		return nil, err
	}
	defer closeAll(conns)
	rate := b.jobSendRate()
	load := b.crossNode(loadLabel(rate, 0, b.o.Subscribers))

	// First the job alone, to devices with no command yet, as a first
	// rollout finds them.
	alone, err := b.jobRun(ctx, "job", nil)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, alone.r.text())
	b.settle(ctx)

	win := b.begin(ctx, "job-send-base")
	base := b.sendTally(ctx, rate, load, "job-send-base")
	if err := win.end(&base); err != nil {
		return nil, err
	}
	fmt.Fprintln(out, base.text())
	b.settle(ctx)

	// A second job and the sends start together; the sends end after
	// Duration, the job when its last target has a command.
	var send Result
	var sendEnd time.Time
	busy, err := b.jobRun(ctx, "job-busy", func() {
		send = b.sendTally(ctx, rate, load, "job-send")
		sendEnd = time.Now()
	})
	if err != nil {
		return nil, err
	}
	// The sends have no window of their own: the job's covers them.
	send.ServerCPU, send.BenchCPU, send.RedisCPU = busy.r.ServerCPU, busy.r.BenchCPU, busy.r.RedisCPU
	fmt.Fprintln(out, send.text())
	fmt.Fprintln(out, busy.r.text())
	b.jobSummary(out, base, send, busy, alone, sendEnd)
	if n := failed.Load(); n > 0 {
		busy.r.FirstErrors = append(busy.r.FirstErrors, fmt.Sprintf("%d answers could not be published", n))
		busy.r.Errors += n
	}
	return []Result{alone.r, base, send, busy.r}, nil
}

// sendTally runs the single sends' open loop at rate for Duration and
// returns their result, without a window of its own.
func (b *runner) sendTally(ctx context.Context, rate int, load, name string) Result {
	t, mu := newTally(), &sync.Mutex{}
	start := time.Now()
	b.openSchedule(ctx, rate, func(c *conn, dev int, at time.Time) {
		ok, reason := b.send(ctx, c, dev)
		d := time.Since(at)
		mu.Lock()
		t.add(ok, reason, d)
		mu.Unlock()
	})
	mu.Lock()
	defer mu.Unlock()
	return t.result(name, load, max(time.Since(start), b.o.Duration))
}

// jobSample is the job's progress at one poll.
type jobSample struct {
	at      time.Time
	started int64
}

// jobRunResult is one job's measurement: its Result, when it was
// accepted and its progress.
type jobRunResult struct {
	r        Result
	posted   time.Time
	accepted time.Duration
	samples  []jobSample
	counts   map[string]int64
}

// startedBy is how many commands the job had started at the last poll
// at or before t, and that poll's time.
func (j jobRunResult) startedBy(t time.Time) (int64, time.Time) {
	var n int64
	at := j.posted
	for _, s := range j.samples {
		if s.at.After(t) {
			break
		}
		n, at = s.started, s.at
	}
	return n, at
}

// jobRun posts a job to every device, runs beside (if not nil) in a
// goroutine of its own, and polls the job until every target has a
// command and beside has returned. Its Result is measured over the whole.
func (b *runner) jobRun(ctx context.Context, name string, beside func()) (jobRunResult, error) {
	c := b.workerConn(ctx, 0)
	defer c.close()
	win := b.begin(ctx, name)
	var wg sync.WaitGroup
	if beside != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			beside()
		}()
	}
	res, err := b.jobProgress(ctx, c, name)
	wg.Wait()
	if err != nil {
		return res, err
	}
	return res, win.end(&res.r)
}

// jobProgress posts the job and polls it until every target has a
// command.
func (b *runner) jobProgress(ctx context.Context, c *conn, name string) (jobRunResult, error) {
	res := jobRunResult{posted: time.Now()}
	body := fmt.Appendf(nil, `{"seq_no":%d,"target":{"all":true},"command":{"name":"ping","params":{"job":%q},"timeout":10},"ttl":%d,"rollout":{"rate":%d}}`,
		b.seqBase+b.seq.Add(1), name, JobTTL, JobRate)
	st, resp, err := do(ctx, c.c, http.MethodPost, c.base+"/job/v1/jobs", b.key, b.secret, body)
	if err != nil || st != http.StatusOK {
		return res, fmt.Errorf("%s: create job: %s", name, failure(st, resp, err))
	}
	res.accepted = time.Since(res.posted)
	var acc struct {
		ID      flexInt `json:"job_id"`
		Targets int64   `json:"targets"`
	}
	if err := json.Unmarshal(resp, &acc); err != nil {
		return res, fmt.Errorf("%s: create job: %w in %.200s", name, err, resp)
	}
	logTimeline := b.o.Timeline > 0
	log := b.o.Log
	if log == nil {
		log = os.Stderr
	}
	var view jobView
	for view.started() < acc.Targets || view.Targets == 0 {
		if ctx.Err() != nil || time.Since(res.posted) > jobDeadline {
			return res, fmt.Errorf("%s: job %d not all started after %s: %d of %d", name, acc.ID, time.Since(res.posted).Round(time.Second), view.started(), acc.Targets)
		}
		time.Sleep(jobPoll)
		v, err := b.getJob(ctx, c, int64(acc.ID))
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		view = v
		res.samples = append(res.samples, jobSample{at: time.Now(), started: view.started()})
		if logTimeline {
			fmt.Fprintf(log, "timeline %s %6.2f s %8d started of %d\n", name, time.Since(res.posted).Seconds(), view.started(), view.Targets)
		}
	}
	res.counts = view.Counts
	res.r = b.jobResult(name, acc.Targets, res)
	return res, nil
}

// jobResult is the Result of a job all of whose targets have a command.
func (b *runner) jobResult(name string, targets int64, res jobRunResult) Result {
	last := res.samples[len(res.samples)-1]
	i := slices.IndexFunc(res.samples, func(s jobSample) bool { return s.started > 0 })
	first := res.samples[i]
	// Between two polls when the first saw commands started; when one
	// poll saw them all, from the POST.
	from, n := first.at, targets-first.started
	if i == len(res.samples)-1 {
		from, n = res.posted, targets
	}
	r := Result{
		Workload: name, Load: fmt.Sprintf("%d targets, %d online", targets, b.o.Subscribers), Requests: targets,
		PerSecond: float64(n) / last.at.Sub(from).Seconds(),
		P50:       res.accepted, P99: res.accepted, P999: res.accepted, Max: last.at.Sub(res.posted),
	}
	for st, k := range res.counts {
		if !slices.Contains(jobFine, st) {
			r.Errors += k
			r.FirstErrors = append(r.FirstErrors, fmt.Sprintf("%d commands %s", k, st))
		}
	}
	sort.Strings(r.FirstErrors)
	return r
}

// jobFine are the states a bench job's command may be in once started:
// queued for an offline device, on its way to or answered by an online
// one.
var jobFine = []string{"pending", "queued", "sent", "delivered", "in_progress", "succeeded"}

// jobView is what the bench reads of GET /job/v1/job.
type jobView struct {
	State   string           `json:"state"`
	Targets int64            `json:"targets"`
	Counts  map[string]int64 `json:"counts"`
}

// started is how many targets have a command.
func (v jobView) started() int64 { return v.Targets - v.Counts["pending"] }

func (b *runner) getJob(ctx context.Context, c *conn, id int64) (jobView, error) {
	var v jobView
	st, resp, err := do(ctx, c.c, http.MethodGet, c.base+"/job/v1/job?job_id="+strconv.FormatInt(id, 10), b.key, b.secret, nil)
	if err != nil || st != http.StatusOK {
		return v, fmt.Errorf("job progress: %s", failure(st, resp, err))
	}
	if err := json.Unmarshal(resp, &v); err != nil {
		return v, fmt.Errorf("job progress: %w in %.200s", err, resp)
	}
	if _, ok := v.Counts["pending"]; !ok {
		return v, fmt.Errorf("job progress: no pending count in %.200s", resp)
	}
	return v, nil
}

// flexInt is an id the API may write as a number or a string of digits.
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	n, err := strconv.ParseInt(string(bytes.Trim(b, `"`)), 10, 64)
	*f = flexInt(n)
	return err
}

// jobSummary prints what the job workload compares: the job's pace
// while the single sends ran and after, and their p99 beside it.
func (b *runner) jobSummary(out io.Writer, base, send Result, busy, alone jobRunResult, sendEnd time.Time) {
	n, at := busy.startedBy(sendEnd)
	fmt.Fprintf(out, "job-busy: %d commands started in the %.1f s the single sends ran (%.0f/s); all %d after %.1f s\n",
		n, at.Sub(busy.posted).Seconds(), float64(n)/max(at.Sub(busy.posted).Seconds(), 1e-3), busy.r.Requests, busy.r.Max.Seconds())
	fmt.Fprintf(out, "job: all %d started %.2f s after the POST (answered in %s); %s\n",
		alone.r.Requests, alone.r.Max.Seconds(), ms(alone.accepted), countsText(alone.counts))
	if base.P99 > 0 {
		fmt.Fprintf(out, "job-send / job-send-base p99: %.2f (%s vs %s)\n", float64(send.P99)/float64(base.P99), ms(send.P99), ms(base.P99))
	}
}

// countsText is a job's counts in a stable order.
func countsText(counts map[string]int64) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return "counts: " + strings.Join(parts, ", ")
}
