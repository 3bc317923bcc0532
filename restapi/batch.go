package restapi

import (
	"math"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/message"
	"github.com/devmsg/devmsg/store"
)

// sendBatch serves POST /msg/v1/msgs (docs/api.md, "Send to many
// devices"): one message
// to each of up to 1000 devices, stored in one durable write, answered
// with a result per name in request order. Each message takes one token
// of the app's message rate, all at once before the write: a batch that
// does not fit in the bucket now is refused whole (429/2002, nothing
// sent), and one larger than a second's worth of the app's rate never
// fits and must be split. A seq_no already recorded is replayed before
// anything else, taking no token.
func (a *API) sendBatch(c *gin.Context) error {
	var names []string
	f, done, err := a.openFanSend(c, "POST /msg/v1/msgs", func(obj object) (err error) {
		names, err = parseDeviceNames(obj)
		return err
	})
	if done || err != nil {
		return err
	}
	app := currentApp(c)
	ctx := c.Request.Context()
	seqNo, req, fp := f.seqNo, f.req, f.fp
	plan, err := a.messages.Plan(ctx, app, message.BatchSend{Devices: names, SendRequest: req})
	if err != nil {
		return err
	}
	if err := a.takeTokens(c, app, store.CategoryMessage, max(plan.Messages(), 1)); err != nil {
		return err
	}
	body, err := a.messages.Commit(ctx, plan, seqNo, a.seqEntry(fp, nil))
	if err != nil {
		return a.seqFailed(c, app.Key, seqNo, fp, err)
	}
	c.Data(http.StatusOK, "application/json", body)
	return nil
}

// parseDeviceNames reads device_names: an array of 1 to MaxBatch strings.
func parseDeviceNames(obj object) ([]string, error) {
	if !obj.has("device_names") {
		return nil, errMissing("device_names")
	}
	names, ok := stringArray(obj["device_names"])
	if !ok {
		return nil, errInvalid("device_names must be an array of device names")
	}
	if !validJSONText(obj["device_names"]) {
		return nil, errNotText("device_names")
	}
	if len(names) == 0 || len(names) > message.MaxBatch {
		return nil, errInvalid("device_names must hold 1 to %d names, got %d", message.MaxBatch, len(names))
	}
	return names, nil
}

// takeTokens takes n tokens of the app's category at once (429/2002 when
// they are not all there).
func (a *API) takeTokens(c *gin.Context, app store.App, category string, n int) error {
	perSecond := a.cfg.DefaultRateLimit
	if r, ok := app.RateLimits[category]; ok {
		perSecond = r
	}
	if perSecond <= 0 {
		return nil
	}
	if n > perSecond {
		return &apiError{http.StatusTooManyRequests, CodeRateLimited,
			"the batch needs " + strconv.Itoa(n) + " " + category + " tokens, more than the app's limit of " +
				strconv.Itoa(perSecond) + " per second; send smaller batches", 1}
	}
	ok, wait, err := a.limits.AllowN(c.Request.Context(), app.Key+"\x00"+category, n, perSecond)
	if err != nil {
		a.log.Error("rate limit", "app", app.Key, "category", category, "err", err)
		return nil // as in limit: an unreachable limiter does not stop the API
	}
	if !ok {
		return &apiError{http.StatusTooManyRequests, CodeRateLimited,
			"API call frequency exceeds the app's limit of " + strconv.Itoa(perSecond) + " " + category +
				" requests per second (this batch needs " + strconv.Itoa(n) + " tokens)", int(math.Ceil(wait.Seconds()))}
	}
	return nil
}
