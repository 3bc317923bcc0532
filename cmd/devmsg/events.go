package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/webhook"
)

// eventsWait is the long-poll of each pull: the most the API allows, so an
// idle tail costs one request every half minute.
const eventsWait = 30 * time.Second

// runEvents is `devmsg events`: tail an app's event log through the pull
// API, printing each event and optionally forwarding each page to a local
// URL as a webhook would.
func runEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: devmsg events --app-key KEY --master-secret S [flags]")
		fmt.Fprintln(stderr, "Tails the app's event log (GET /event/v1/events, long-polling), one event per line, until stopped.")
		fmt.Fprintln(stderr, "With --forward-to it also POSTs each page of events to that URL as an event webhook would (a JSON")
		fmt.Fprintln(stderr, "array; Basic auth with the app key and master secret; webhook-id, webhook-timestamp and a")
		fmt.Fprintln(stderr, "webhook-signature with the app's signing secret), retrying until it answers 2xx.")
		fs.PrintDefaults()
	}
	api := fs.String("api", "https://127.0.0.1:8443", "REST API base URL")
	appKey := fs.String("app-key", "", "app key")
	masterSecret := fs.String("master-secret", os.Getenv(envMasterSecret), "the app's master secret (env DEVMSG_MASTER_SECRET)")
	insecure := fs.Bool("insecure", false, "skip TLS certificate checks (the self-signed certificate of a test server)")
	cacert := fs.String("cacert", "", cacertUsage)
	types := fs.String("types", "", "comma-separated event types to show (default: all), e.g. device.up,device.event")
	device := fs.String("device", "", "show only this device's events")
	after := fs.String("after", "", "start after this event id (default: the oldest kept event)")
	limit := fs.Int("limit", 100, "events per pull, and so per forwarded POST (1 to 1000)")
	asJSON := fs.Bool("json", false, "print each event as its JSON (as pull and webhooks give it) instead of a text line")
	forwardTo := fs.String("forward-to", "", "POST each page of events to this URL, e.g. http://localhost:3000/hook")
	quiet := fs.Bool("quiet", false, "do not print events (with --forward-to)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("events: unexpected arguments %q", fs.Args())
	case *appKey == "" || *masterSecret == "":
		return errors.New("events: --app-key and --master-secret are required")
	case *limit < 1 || *limit > events.MaxPullLimit:
		return fmt.Errorf("events: --limit %d: want 1 to %d", *limit, events.MaxPullLimit)
	case *after != "" && !isEventID(*after):
		return fmt.Errorf("events: --after %q: want an event id (a decimal number)", *after)
	}
	for _, typ := range splitList(*types) {
		if !events.KnownType(typ) {
			return fmt.Errorf("events: --types: unknown event type %q (want %s)", typ, strings.Join(events.Types, ", "))
		}
	}
	tlsConf, err := clientTLS(*cacert, *insecure)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	t := &eventTail{
		client: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}},
		api:    strings.TrimRight(*api, "/"), key: *appKey, secret: *masterSecret,
		types: strings.Join(splitList(*types), ","), device: *device, limit: *limit, after: *after,
		stderr: stderr,
	}
	if *forwardTo != "" {
		u, err := url.Parse(*forwardTo)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("events: --forward-to %q: want an http:// or https:// URL", *forwardTo)
		}
		key, err := t.signingKey(ctx)
		if err != nil {
			return fmt.Errorf("events: the app's signing secret, to sign forwarded events: %w", err)
		}
		t.forward = &forwarder{url: *forwardTo, key: *appKey, secret: *masterSecret, signingKey: key,
			client: &http.Client{Timeout: 30 * time.Second}, stderr: stderr}
	}
	if !*quiet || t.forward == nil {
		t.print = func(raw json.RawMessage) { printEvent(stdout, raw, *asJSON) }
	}
	err = t.run(ctx)
	if t.after != "" {
		fmt.Fprintf(stderr, "events: stopped after event %s; resume with --after %s\n", t.after, t.after)
	}
	if ctx.Err() != nil {
		return nil // stopped by a signal: the normal end of a tail
	}
	return err
}

// eventTail is one tail of an app's event log: its cursor, its filters
// and where each page goes.
type eventTail struct {
	client           *http.Client
	api, key, secret string
	types, device    string
	limit            int
	after            string // the cursor: the last event id handled, "" for the oldest
	print            func(json.RawMessage)
	forward          *forwarder
	stderr           io.Writer
}

// run pulls until ctx ends. A page is printed and forwarded before the
// cursor moves past it, so a forward that fails is retried, never skipped.
func (t *eventTail) run(ctx context.Context) error {
	backoff := time.Second
	for ctx.Err() == nil {
		evs, next, err := t.pull(ctx)
		var gone *trimmedError
		switch {
		case errors.As(err, &gone):
			fmt.Fprintf(t.stderr, "events: %s; going on from the oldest kept event\n", gone.message)
			t.after = ""
			continue
		case errors.Is(err, errEventsRefused):
			return err
		case isCertError(err):
			return fmt.Errorf("events: %w\n%s", err, certHint)
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintf(t.stderr, "events: %v; retrying in %s\n", err, backoff)
			if !sleepCtx(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if len(evs) > 0 {
			if t.print != nil {
				for _, e := range evs {
					t.print(e)
				}
			}
			if t.forward != nil && !t.forward.send(ctx, evs) {
				return nil // stopped while retrying
			}
		}
		if next != "" {
			t.after = next
		}
	}
	return nil
}

// signingKey reads the app's signing secret (the app's own credentials
// may read its callback settings) and returns the HMAC key it stands for.
func (t *eventTail) signingKey(ctx context.Context) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, t.api+"/admin/v1/apps/"+url.PathEscape(t.key)+"/callback", nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(t.key, t.secret)
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var v apitypes.CallbackSettings
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &v) != nil || !strings.HasPrefix(v.SigningSecret, "whsec_") {
		return nil, fmt.Errorf("GET /admin/v1/apps/%s/callback: HTTP %d %s", t.key, resp.StatusCode, bytes.TrimSpace(body))
	}
	return base64.StdEncoding.DecodeString(strings.TrimPrefix(v.SigningSecret, "whsec_"))
}

// errEventsRefused is an answer that trying again will not change: bad
// credentials, a bad filter.
var errEventsRefused = errors.New("events: refused")

// trimmedError is the 400 of a cursor older than the log.
type trimmedError struct{ message string }

func (e *trimmedError) Error() string { return e.message }

// pull makes one long-polling read after the cursor.
func (t *eventTail) pull(ctx context.Context) ([]json.RawMessage, string, error) {
	q := url.Values{"limit": {strconv.Itoa(t.limit)}, "wait": {strconv.Itoa(int(eventsWait / time.Second))}}
	if t.after != "" {
		q.Set("after", t.after)
	}
	if t.types != "" {
		q.Set("types", t.types)
	}
	if t.device != "" {
		q.Set("device_name", t.device)
	}
	rctx, cancel := context.WithTimeout(ctx, eventsWait+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, t.api+"/event/v1/events?"+q.Encode(), nil)
	if err != nil {
		return nil, "", err
	}
	req.SetBasicAuth(t.key, t.secret)
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		var e apitypes.ErrorBody
		_ = json.Unmarshal(body, &e)
		switch {
		case resp.StatusCode == http.StatusBadRequest && t.after != "" && strings.HasPrefix(e.Error.Message, "after ") &&
			!strings.Contains(e.Error.Message, "beyond the newest"):
			// A trimmed cursor; one beyond the newest id is refused below:
			// going on from the oldest would repeat the whole log.
			return nil, "", &trimmedError{e.Error.Message}
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			return nil, "", fmt.Errorf("pull: HTTP %d %s", resp.StatusCode, bytes.TrimSpace(body))
		default:
			return nil, "", fmt.Errorf("%w: HTTP %d %s", errEventsRefused, resp.StatusCode, bytes.TrimSpace(body))
		}
	}
	var page struct {
		Events []json.RawMessage `json:"events"`
		Next   string            `json:"next"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, "", fmt.Errorf("pull: %w", err)
	}
	return page.Events, page.Next, nil
}

// printEvent prints one event: its JSON, or a line of id, time, type,
// device and data.
func printEvent(w io.Writer, raw json.RawMessage, asJSON bool) {
	if asJSON {
		fmt.Fprintf(w, "%s\n", raw)
		return
	}
	var e events.Wire
	if json.Unmarshal(raw, &e) != nil {
		fmt.Fprintf(w, "%s\n", raw)
		return
	}
	var data bytes.Buffer
	if json.Compact(&data, e.Data) != nil {
		data.Reset()
		data.Write(e.Data)
	}
	fmt.Fprintf(w, "%s  %-8s %-17s %-20s %s\n", time.UnixMilli(e.Time).UTC().Format("2006-01-02T15:04:05.000Z"), e.ID, e.Type, e.DeviceName, data.Bytes())
}

// forwarder POSTs pages of events to a local URL as an event webhook
// would (docs/events.md, "What is sent"): a JSON array, the app's Basic credentials,
// webhook-id the first event's id, and the Standard Webhooks signature
// with the app's signing key.
type forwarder struct {
	url, key, secret string
	signingKey       []byte
	client           *http.Client
	stderr           io.Writer
}

// send POSTs evs until the URL answers 2xx, with backoff from a second to
// 30 s between attempts; false when ctx ended first.
func (f *forwarder) send(ctx context.Context, evs []json.RawMessage) bool {
	body, _ := json.Marshal(evs) // raw messages from a decoded page: they marshal
	var first struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(evs[0], &first)
	backoff := time.Second
	for {
		err := f.post(ctx, first.ID, body)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		fmt.Fprintf(f.stderr, "events: forward %d events from %s to %s: %v; retrying in %s\n", len(evs), first.ID, f.url, err, backoff)
		if !sleepCtx(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (f *forwarder) post(ctx context.Context, id string, body []byte) error {
	req, err := webhook.NewPost(ctx, f.url, "devmsg-events", webhook.Signer{User: f.key, Password: f.secret, Key: f.signingKey}, id, time.Now(), body)
	if err != nil {
		return err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func isEventID(s string) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n >= 0
}
