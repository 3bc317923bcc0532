package restapi

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/events"
)

// Defaults of a pull (docs/events.md, "Pull").
const (
	DefaultPullLimit = 100
	// pullGrace is the time a long-poll's connection is given beyond its
	// wait to read, render and write the answer.
	pullGrace = 10 * time.Second
)

// pullEvents serves GET /event/v1/events (docs/events.md, "Pull"): the app's
// events after a cursor, filtered, long-polling up to wait seconds when
// none is there yet.
func (a *API) pullEvents(c *gin.Context) error {
	q, err := parsePull(c.Request.URL.Query())
	if err != nil {
		return err
	}
	q.AppKey = currentApp(c).Key
	if q.Wait > 0 {
		leave, err := a.enterWait(c)
		if err != nil {
			return err
		}
		defer leave()
		// The server's read and write timeouts would cut a long wait
		// short: a read deadline that passes cancels the request. The
		// deadlines move for this request only; a writer that has none
		// (the console calls in-process) reports ErrNotSupported.
		rc := http.NewResponseController(c.Writer)
		deadline := time.Now().Add(q.Wait + pullGrace)
		_ = rc.SetReadDeadline(deadline)
		_ = rc.SetWriteDeadline(deadline)
	}
	ctx := c.Request.Context()
	p, err := a.events.Pull(ctx, q)
	if ctx.Err() != nil {
		// The client went away: nobody reads an answer, and that is no
		// failure to log.
		c.Abort()
		return nil
	}
	if err != nil {
		return err
	}
	// No Barrier: the event log shows a reader only durable events
	// (store.EventLog; Pebble holds each app's reads at its synced
	// watermark, and a Redis read never sees an unsynced write).
	evs := make([]apitypes.Event, len(p.Events))
	for i, e := range p.Events {
		evs[i] = apitypes.Event(events.ToWire(e))
	}
	return writeJSON(c, apitypes.EventPage{Events: evs, Next: strconv.FormatInt(p.Next, 10), Newest: strconv.FormatInt(p.Newest, 10)})
}

// parsePull reads a pull's query parameters; the app key is left to the
// caller. Every error names its parameter.
func parsePull(v url.Values) (events.Query, error) {
	q := events.Query{}
	q.Limit = DefaultPullLimit
	if s, ok := first(v, "after"); ok && s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || strings.HasPrefix(s, "+") {
			return q, errInvalid("after must be an event id (the decimal string of an event's id or a pull's next), got %q", s)
		}
		q.After = n
	}
	if s, ok := first(v, "limit"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > events.MaxPullLimit {
			return q, errInvalid("limit must be an integer from 1 to %d, got %q", events.MaxPullLimit, s)
		}
		q.Limit = n
	}
	if s, ok := first(v, "wait"); ok {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > events.MaxPullWait.Seconds() {
			return q, errInvalid("wait must be a number of seconds from 0 to %d, got %q", int(events.MaxPullWait.Seconds()), s)
		}
		q.Wait = time.Duration(f * float64(time.Second))
	}
	if s, ok := first(v, "types"); ok && s != "" {
		for _, t := range strings.Split(s, ",") {
			if !events.KnownType(t) {
				return q, errInvalid("types: %q is not an event type (%s)", t, strings.Join(events.Types, ", "))
			}
			q.Types = append(q.Types, t)
		}
	}
	if s, ok := first(v, "device_name"); ok && s != "" {
		if err := devices.ValidateName(s); err != nil {
			return q, errInvalid("device_name: %v", err)
		}
		q.DeviceName = s
	}
	return q, nil
}

// first returns the first value of the query parameter.
func first(v url.Values, key string) (string, bool) {
	vs, ok := v[key]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}
