package console

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/devmsg/devmsg/apitypes"
	"github.com/devmsg/devmsg/errdefs"
)

// creds are HTTP Basic credentials: the admin account, or an app key and
// its master secret.
type creds struct{ user, pass string }

// apiError is an error answer of the API: {"error":{"code","message"}},
// and the domain's typed error behind it, if the API reported one.
type apiError struct {
	Status  int
	Code    int
	Message string
	cause   error
}

func (e *apiError) Error() string { return e.Message }

// Unwrap returns the typed error (package errdefs) behind the answer.
func (e *apiError) Unwrap() error { return e.cause }

// notFound tells an unknown app, device, message or dead letter from
// other refusals.
func (e *apiError) notFound() bool {
	var nf *errdefs.NotFoundError
	return errors.As(e.cause, &nf)
}

// recorder collects the API's answer to an in-process request.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *recorder) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// call performs one API request in-process with cr, on behalf of r (its
// context and client address), and decodes a 200 answer into out. Any
// other answer is an *apiError carrying the API's message.
func (c *Console) call(r *http.Request, cr creds, method, path string, query url.Values, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
	}
	target := path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	ctx, cause := errdefs.WithRecorder(r.Context())
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("build %s %s: %w", method, path, err)
	}
	req.RemoteAddr = r.RemoteAddr
	req.Host = r.Host
	req.SetBasicAuth(cr.user, cr.pass)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}}
	c.api.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status != http.StatusOK {
		var eb apitypes.ErrorBody
		if json.Unmarshal(rec.body.Bytes(), &eb) != nil || eb.Error.Message == "" {
			return &apiError{rec.status, 0, fmt.Sprintf("%s %s answered HTTP %d", method, path, rec.status), cause.Err()}
		}
		return &apiError{rec.status, eb.Error.Code, eb.Error.Message, cause.Err()}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}

// api calls the API with the session's credentials.
func (q *req) api(method, path string, query url.Values, body, out any) error {
	return q.c.call(q.r, q.s.cr, method, path, query, body, out)
}

// appAPI calls the API with the app's own key and master secret, which
// /device/v1 and /msg/v1 require. The admin's session loads them through
// the admin API.
func (q *req) appAPI(method, path string, query url.Values, body, out any) error {
	if q.appCreds == nil {
		if !q.s.admin {
			q.appCreds = &q.s.cr
		} else {
			var app apitypes.App
			if err := q.api(http.MethodGet, q.appPath(""), nil, nil, &app); err != nil {
				return err
			}
			q.appCreds = &creds{app.Key, app.MasterSecret}
		}
	}
	return q.c.call(q.r, *q.appCreds, method, path, query, body, out)
}

// appPath is the admin API path of the request's app plus suffix.
func (q *req) appPath(suffix string) string {
	return "/admin/v1/apps/" + url.PathEscape(q.key) + suffix
}

// consolePath is the console path of the request's app plus suffix.
func (q *req) consolePath(suffix string) string {
	return Prefix + "apps/" + url.PathEscape(q.key) + suffix
}

// seqNo returns a random positive int63 for a seq_no.
func seqNo() int64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("crypto/rand: " + err.Error())
		}
		if n := int64(binary.BigEndian.Uint64(b[:]) >> 1); n > 0 {
			return n
		}
	}
}
