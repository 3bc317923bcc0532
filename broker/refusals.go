package broker

import (
	"log/slog"
	"sync/atomic"

	"golang.org/x/time/rate"
)

// Refusal warnings: at most RefusalLogRate lines a second, in bursts of
// RefusalLogBurst, for the whole broker. A refused publish is otherwise
// silent to the operator (MQTT 3.1.1 cannot tell the device either), but a
// device looping on a bad publish must not flood the log; the metrics
// count every refusal, logged or not.
const (
	RefusalLogRate  = 5
	RefusalLogBurst = 20
)

// refusalLog writes the warnings of refused publishes, rate-limited; the
// lines left out are counted and said by the next line written.
type refusalLog struct {
	log     *slog.Logger
	lim     *rate.Limiter
	skipped atomic.Int64
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	return &refusalLog{log: log, lim: rate.NewLimiter(RefusalLogRate, RefusalLogBurst)}
}

// warn logs one refused publish of device (app/device) on topic, with
// why, unless over the rate.
func (r *refusalLog) warn(app, device, topic, reason string) {
	if !r.lim.Allow() {
		r.skipped.Add(1)
		return
	}
	args := []any{"app", app, "device", device, "topic", topic, "reason", reason}
	if n := r.skipped.Swap(0); n > 0 {
		args = append(args, "not_logged_before", n)
	}
	r.log.Warn("device publish refused", args...)
}
