package console

import (
	"sync"
	"time"
)

// The broadcast page draws a broadcast's delivery over time. The API
// gives a broadcast's counts now; the console keeps, in memory on this
// node, the counts it read each time it showed the broadcast (the page
// refreshes every 2 s while the broadcast is live), so the chart covers
// the time someone watched it, from its acceptance.
const (
	// progressKept is how many broadcasts' (and jobs') samples are kept.
	progressKept = 50
	// progressSamples is the most samples kept of one broadcast; when
	// full, every other one is dropped.
	progressSamples = 240
	// progressBuckets is the points of a broadcast's chart.
	progressBuckets = 30
)

type progressSample struct {
	At                        time.Time
	Queued, Delivered, Failed int64
}

type progressLog struct {
	mu   sync.Mutex
	runs map[string][]progressSample // by app key and broadcast id
}

func newProgressLog() *progressLog { return &progressLog{runs: map[string][]progressSample{}} }

// record adds what the page read of a broadcast and returns its samples.
func (l *progressLog) record(id string, s progressSample) []progressSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	run, ok := l.runs[id]
	if !ok && len(l.runs) >= progressKept {
		// Forget the broadcast shown longest ago.
		var oldest string
		var at time.Time
		for k, r := range l.runs {
			if last := r[len(r)-1].At; oldest == "" || last.Before(at) {
				oldest, at = k, last
			}
		}
		delete(l.runs, oldest)
	}
	if len(run) >= progressSamples {
		half := run[:0:0]
		for i := 0; i < len(run); i += 2 {
			half = append(half, run[i])
		}
		run = half
	}
	run = append(run, s)
	l.runs[id] = run
	return append([]progressSample(nil), run...)
}

// progressFresh is how soon after its acceptance a broadcast must first
// be read for its chart to start at the acceptance (with nothing queued);
// one first read later starts there.
const progressFresh = 10 * time.Second

// progressChart draws a broadcast's counts in equal steps up to the
// newest sample; each step shows the counts last read by its end.
func progressChart(created time.Time, run []progressSample) Chart {
	c := Chart{ID: "broadcast-chart", Title: "Delivery over time",
		Empty: "The chart fills in while this page is open: this node's console draws what it reads of the broadcast every 2 seconds."}
	return drawProgress(c, [3]string{"queued", "delivered", "failed"}, created, run)
}

// drawProgress fills c with run's three counts (named names: Queued,
// Delivered, Failed) in equal steps from created, as progressChart
// describes. The job page draws its executions started, succeeded and
// failed with it.
func drawProgress(c Chart, names [3]string, created time.Time, run []progressSample) Chart {
	if len(run) == 0 {
		return c
	}
	if run[0].At.Sub(created) < progressFresh {
		run = append([]progressSample{{At: created}}, run...)
	}
	start, end := run[0].At, run[len(run)-1].At
	if !start.Before(end) {
		return c
	}
	step := end.Sub(start) / (progressBuckets - 1)
	c.From, c.To = start.UTC().Format("15:04:05"), end.UTC().Format("15:04:05 UTC")
	q, d, f := make([]float64, progressBuckets), make([]float64, progressBuckets), make([]float64, progressBuckets)
	i := 0
	for b := range progressBuckets {
		at := start.Add(time.Duration(b) * step)
		if b == progressBuckets-1 {
			at = end
		}
		for i < len(run) && !run[i].At.After(at) {
			i++
		}
		s := run[max(i-1, 0)]
		q[b], d[b], f[b] = float64(s.Queued), float64(s.Delivered), float64(s.Failed)
	}
	c.Series = []Series{{names[0], q}, {names[1], d}, {names[2], f}}
	return c
}
