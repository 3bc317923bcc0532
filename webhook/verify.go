package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/devmsg/devmsg/internal/netguard"
	"github.com/devmsg/devmsg/internal/secret"
	"github.com/devmsg/devmsg/store"
)

// MaxURLBytes bounds a callback URL.
const MaxURLBytes = 2048

// DefaultVerifyTimeout bounds a verification when the caller's client
// sets no timeout (callback.request_timeout's default).
const DefaultVerifyTimeout = 10 * time.Second

// echostrLen is the length of the random echostr value.
const echostrLen = 32

// CheckURL applies the rules a callback or event webhook URL must meet
// before it is verified (the URL rules of docs/api.md, "Callback URLs").
// Each broken rule has its own message, naming the rule, so a console can
// show it as is. Unless allowCustomPorts, a URL may name a port only if it
// is its scheme's default.
func CheckURL(raw string, allowCustomPorts bool) error {
	if len(raw) > MaxURLBytes {
		return fmt.Errorf("callback URL must be at most %d bytes, got %d", MaxURLBytes, len(raw))
	}
	// Before parsing: url.Parse refuses control characters with a message
	// that names no rule.
	for i := 0; i < len(raw); i++ {
		if b := raw[i]; b <= ' ' || b == 0x7f {
			return fmt.Errorf("callback URL must not contain spaces or control characters (byte 0x%02x at offset %d)", b, i)
		}
	}
	// The scheme is checked on the text: url.Parse lowercases it, and
	// accepts "http:host" without the "//".
	var scheme, defaultPort string
	switch {
	case strings.HasPrefix(raw, "http://"):
		scheme, defaultPort = "http", "80"
	case strings.HasPrefix(raw, "https://"):
		scheme, defaultPort = "https", "443"
	default:
		return errors.New("callback URL must begin with http:// or https://")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("callback URL is not a valid absolute URL: %v", err)
	}
	if u.User != nil {
		return errors.New("callback URL must not contain user info (user:password@)")
	}
	if u.Hostname() == "" {
		return errors.New("callback URL must have a host")
	}
	if strings.Contains(raw, "#") {
		return errors.New("callback URL must not contain a fragment (#...)")
	}
	if port := u.Port(); port != "" {
		// url.Parse has checked that the port is digits only.
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("callback URL: port must be 1 to 65535, got %s", port)
		}
		if !allowCustomPorts && strconv.Itoa(n) != defaultPort {
			return fmt.Errorf("callback URL: custom ports are not allowed (callback.allow_custom_ports is off): port %s; use %s:// without a port (%s)",
				port, scheme, defaultPort)
		}
	}
	return nil
}

// Verify performs the echostr check on rawURL (docs/callbacks.md,
// "Configure"): a GET with the query parameter echostr set to a fresh
// random string, which passes only if the answer is HTTP 200 with exactly
// that string as its body (no newline, no whitespace). Redirects are not
// followed: the URL itself must answer. The GET carries the headers of the
// record POSTs: Basic app key and master secret, and the Standard Webhooks
// signature (of an empty body), so a receiver that checks them on every
// request accepts it. client bounds the time (nil means one with
// DefaultVerifyTimeout and the address guard with no exemption), as does
// ctx. Call CheckURL first. A URL the client's guard refuses gives an
// error wrapping netguard.ErrNotAllowed.
func Verify(ctx context.Context, client *http.Client, rawURL string, app store.App) error {
	echostr := secret.Alnum(echostrLen)
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("verification failed: %w", err)
	}
	// Appended to the query as written, so the receiver sees its own
	// parameters unchanged (url.Values.Encode would reorder them).
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += url.Values{"echostr": {echostr}}.Encode()

	c := http.Client{Timeout: DefaultVerifyTimeout, Transport: netguard.New(nil).Transport()}
	if client != nil {
		c = *client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	limit := c.Timeout
	if d, ok := ctx.Deadline(); ok && (limit <= 0 || time.Until(d) < limit) {
		limit = time.Until(d).Round(time.Millisecond)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("verification failed: %w", err)
	}
	req.Header.Set("User-Agent", "devmsg-callback")
	req.SetBasicAuth(app.Key, app.MasterSecret)
	id, ts := "verify_"+echostr, strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", Sign(SigningKey(app), id, ts, nil))
	resp, err := c.Do(req)
	if err != nil {
		return verifyError(ctx, err, limit)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			return fmt.Errorf("verification failed: HTTP %d (redirects are not followed; the URL itself must answer 200)", resp.StatusCode)
		}
		return fmt.Errorf("verification failed: HTTP %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, echostrLen+1))
	if err != nil {
		return verifyError(ctx, err, limit)
	}
	if string(body) == echostr {
		return nil
	}
	const prefix = "verification failed: body did not equal echostr"
	switch {
	case len(body) > echostrLen && bytes.HasPrefix(body, []byte(echostr)):
		return fmt.Errorf("%s: it has more after the echostr value (a newline or whitespace?); answer the value alone", prefix)
	case strings.TrimSpace(string(body)) == echostr:
		return fmt.Errorf("%s: it has whitespace around the echostr value; answer the value alone", prefix)
	case len(body) > echostrLen:
		return fmt.Errorf("%s (got more than %d bytes, want %d)", prefix, echostrLen, echostrLen)
	}
	return fmt.Errorf("%s (got %d bytes, want %d)", prefix, len(body), echostrLen)
}

// verifyError words a failed exchange: a timeout says how long was
// waited; anything else says what went wrong without repeating the URL.
func verifyError(ctx context.Context, err error, limit time.Duration) error {
	var ne interface{ Timeout() bool }
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		if limit > 0 {
			return fmt.Errorf("verification failed: no response within %s", limit)
		}
		return errors.New("verification failed: no response in time")
	}
	if ctx.Err() != nil {
		return fmt.Errorf("verification failed: %w", ctx.Err())
	}
	if errors.Is(err, netguard.ErrNotAllowed) {
		return netguard.ErrNotAllowed // no address, no dial detail
	}
	return fmt.Errorf("verification failed: %s", Reason(err))
}
