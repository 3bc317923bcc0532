package restapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

// Error codes of spec section 7.
const (
	CodeInternal     = 1000
	CodeMissingParam = 1002
	CodeInvalidParam = 1003
	CodeAuthFailed   = 1004
	CodeRateLimited  = 2002
)

// apiError is an error with its place in the error table of docs/api.md.
type apiError struct {
	status     int
	code       int
	message    string
	retryAfter int // seconds; only for 429
}

func (e *apiError) Error() string { return e.message }

func errMissing(field string) *apiError {
	return &apiError{http.StatusBadRequest, CodeMissingParam, field + " is required", 0}
}

func errInvalid(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, CodeInvalidParam, fmt.Sprintf(format, args...), 0}
}

func errAuth(message string) *apiError {
	return &apiError{http.StatusUnauthorized, CodeAuthFailed, message, 0}
}

type errorBody struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError is the one place errors become HTTP responses. The domain's
// typed errors (package errdefs) are 400/1003 with their message (spec
// section 7; docs/api.md, "Errors"); anything that is neither one of them
// nor an *apiError is an internal error: logged, and reported as 1000
// without its details. The error is also recorded for an in-process
// caller (the console) that asked for it with errdefs.WithRecorder.
func (a *API) writeError(c *gin.Context, err error) {
	errdefs.Record(c.Request.Context(), err)
	e := apiErrorOf(err)
	if e == nil {
		a.log.Error("request failed", "method", c.Request.Method, "route", c.FullPath(), "err", err)
		e = &apiError{http.StatusInternalServerError, CodeInternal, "internal error; retry later", 0}
	}
	if e.status == http.StatusUnauthorized {
		c.Header("WWW-Authenticate", `Basic realm="devmsg"`)
	}
	if e.retryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(e.retryAfter))
	}
	c.Data(e.status, "application/json", ErrorBody(e.code, e.message))
	c.Abort()
}

// apiErrorOf returns err's place in the error table of docs/api.md, nil for an
// internal error.
func apiErrorOf(err error) *apiError {
	var e *apiError
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, store.ErrFull) {
		// Not logged per request: the store logs the state, rate-limited.
		return &apiError{http.StatusInternalServerError, CodeInternal,
			"storage full: the service refuses writes until space is freed (reads go on); retry later", 0}
	}
	var (
		nf *errdefs.NotFoundError
		cf *errdefs.ConflictError
		iv *errdefs.InvalidError
	)
	switch {
	case errors.As(err, &nf):
		return errInvalid("%s", nf.Error())
	case errors.As(err, &cf):
		return errInvalid("%s", cf.Error())
	case errors.As(err, &iv):
		return errInvalid("%s", iv.Error())
	}
	return nil
}

// ErrorBody returns the API's error body, {"error":{"code","message"}},
// for the rare answer written outside the API's handlers (plain HTTP sent
// to the HTTPS port).
func ErrorBody(code int, message string) []byte {
	var body errorBody
	body.Error.Code = code
	body.Error.Message = message
	b, _ := json.Marshal(body)
	return b
}

// handlerFunc is a handler that reports failure by returning an error.
type handlerFunc func(c *gin.Context) error

func (a *API) wrap(h handlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := h(c); err != nil {
			a.writeError(c, err)
		}
	}
}

// writeJSON writes a 200 with v encoded as JSON.
// writeRead writes v, a 200 built from what the handler read, once every
// write that read could see is durable: a state reported to a client must
// not be taken back by a crash (store.Store.Barrier). Answers built from a
// write's own result need not wait, as the write returned durable.
func (a *API) writeRead(c *gin.Context, v any) error {
	if err := a.readsDurable(c); err != nil {
		return err
	}
	return writeJSON(c, v)
}

// readsDurable returns once every write the handler's reads could see is
// durable (writeRead).
func (a *API) readsDurable(c *gin.Context) error {
	if err := a.store.Barrier(c.Request.Context()); err != nil {
		return fmt.Errorf("wait for durable reads: %w", err)
	}
	return nil
}

func writeJSON(c *gin.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	c.Data(http.StatusOK, "application/json", b)
	return nil
}
