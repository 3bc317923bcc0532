package webhook

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/devmsg/devmsg/internal/netguard"
)

// NewClient returns the HTTP client of deliveries to apps' URLs: every
// dial goes through the address guard (networks in allowed exempt), a
// request ends after timeout, and a redirect is not followed (a receiver
// must answer itself). Callbacks and event webhooks use it.
func NewClient(allowed []netip.Prefix, timeout time.Duration, idlePerHost int) *http.Client {
	transport := netguard.New(allowed).Transport()
	transport.MaxIdleConnsPerHost = idlePerHost
	return &http.Client{
		Timeout:       timeout,
		Transport:     transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Signer holds what signs a delivery POST: the Basic credentials (the
// app's key and master secret) and the Standard Webhooks key. A receiver
// may check either (docs/callbacks.md, "Verify that a callback came from
// devmsg").
type Signer struct {
	User, Password string
	Key            []byte
}

// NewPost returns a signed POST of the JSON body to url: Content-Type,
// User-Agent agent, Basic auth, and the Standard Webhooks headers with
// the delivery id and timestamp now. Callbacks, event webhooks and
// `devmsg events --forward-to` send their deliveries with it.
func NewPost(ctx context.Context, url, agent string, s Signer, id string, now time.Time, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", agent)
	req.SetBasicAuth(s.User, s.Password)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", Sign(s.Key, id, ts, body))
	return req, nil
}

// Do sends req with client and returns the answer's HTTP status (0 and
// the error without an answer). It reads a little of the answer's body,
// so the connection can be reused, and closes it. Which statuses count as
// delivered is the caller's rule.
func Do(client *http.Client, req *http.Request) (int, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}
