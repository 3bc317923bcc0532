package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// ItemResultsExtension marks an operation that answers 200 with one result
// per element even when elements break the request schema (batch create):
// for it, a schema-breaking request answered 2xx is not reported.
const ItemResultsExtension = "x-devmsg-item-results"

// Validator checks exchanges against one OpenAPI document. It is safe for
// concurrent use.
type Validator struct {
	path   string
	doc    *openapi3.T
	router routers.Router
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*Validator{}
)

// Load reads the OpenAPI document at path (relative to the test's package
// directory, e.g. "../docs/openapi.yaml"), validates it, and returns a
// Validator. The document is loaded once per process; later calls with the
// same file return the same Validator. A document that does not load or
// validate fails the test.
func Load(t testing.TB, path string) *Validator {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatalf("openapi: %s: %v", path, err)
	}
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if v, ok := cache[abs]; ok {
		return v
	}
	v, err := load(abs)
	if err != nil {
		t.Fatalf("openapi: %v", err)
	}
	cache[abs] = v
	return v
}

func load(path string) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", path, err)
	}
	// Match on paths only: tests serve on random loopback ports, and the
	// document's server is the production default.
	doc.Servers = nil
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
	}
	r, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("router for %s: %w", path, err)
	}
	return &Validator{path: path, doc: doc, router: r}, nil
}

// Doc returns the loaded document, for tests that inspect it. Callers must
// not modify it.
func (v *Validator) Doc() *openapi3.T { return v.doc }

// Check validates one exchange: req as sent with body reqBody (nil for
// none; if nil and req.GetBody is set, the body is read from it) and resp
// as received with body respBody. Only req's method, path, query and
// headers are used, so any scheme and host match. A request with a body
// and no Content-Type is checked as application/json, which is how the
// server reads it. Mismatches are reported with t.Errorf.
//
// A request to a path the document does not describe must have been
// answered 404, and a method the document does not describe for the path
// 405, each with the document's Error body.
func (v *Validator) Check(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	t.Helper()
	if reqBody == nil && req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			reqBody, _ = io.ReadAll(rc)
			rc.Close()
		}
	}
	r := pathOnly(req, reqBody)
	what := fmt.Sprintf("%s %s answered %d", req.Method, req.URL.RequestURI(), resp.StatusCode)

	route, params, err := v.router.FindRoute(r)
	if err != nil {
		v.checkUnrouted(t, what, v.pathDocumented(r), resp, respBody)
		return
	}

	opts := &openapi3filter.Options{
		AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc,
		MultiError:          true,
		SkipSettingDefaults: true,
	}
	opts.WithCustomSchemaErrorFunc(schemaError)
	reqIn := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), reqIn)
	ok2xx := resp.StatusCode >= 200 && resp.StatusCode < 300
	switch {
	case reqErr != nil && ok2xx && route.Operation.Extensions[ItemResultsExtension] != true:
		t.Errorf("openapi: %s, but the request breaks %s:\n%v\nrequest body: %s",
			what, filepath.Base(v.path), indent(reqErr), truncate(reqBody))
	case reqErr == nil && resp.StatusCode == http.StatusBadRequest && errorCode(respBody) == 1002:
		t.Errorf("openapi: %s with code 1002 (required field missing), but the request satisfies %s; is a field not marked required?\nrequest body: %s\nresponse body: %s",
			what, filepath.Base(v.path), truncate(reqBody), truncate(respBody))
	}

	respIn := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqIn,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true, // an undocumented status is an error
			MultiError:            true,
		},
	}
	respIn.Options.WithCustomSchemaErrorFunc(schemaError)
	if err := openapi3filter.ValidateResponse(context.Background(), respIn); err != nil {
		t.Errorf("openapi: %s, which %s does not allow:\n%v\nresponse body: %s",
			what, filepath.Base(v.path), indent(err), truncate(respBody))
	}
}

// pathDocumented reports whether the document describes r's path for some
// other method. (The legacy router does not tell "no such path" from "no
// such method" for templated paths.)
func (v *Validator) pathDocumented(r *http.Request) bool {
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		r2 := r.Clone(context.Background())
		r2.Method = m
		if _, _, err := v.router.FindRoute(r2); err == nil {
			return true
		}
	}
	return false
}

// checkUnrouted checks the answer to a request the document does not
// describe.
func (v *Validator) checkUnrouted(t testing.TB, what string, pathDocumented bool, resp *http.Response, body []byte) {
	t.Helper()
	want, reason := http.StatusNotFound, "its path is not documented"
	if pathDocumented {
		want, reason = http.StatusMethodNotAllowed, "its method is not documented for the path"
	}
	if resp.StatusCode != want {
		t.Errorf("openapi: %s, but %s in %s: want %d (document the route if it is real)",
			what, reason, filepath.Base(v.path), want)
		return
	}
	errSchema := v.doc.Components.Schemas["Error"]
	if errSchema == nil {
		return
	}
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		t.Errorf("openapi: %s with a body that is not JSON: %v\nresponse body: %s", what, err, truncate(body))
		return
	}
	if err := errSchema.Value.VisitJSON(value, openapi3.MultiErrors()); err != nil {
		t.Errorf("openapi: %s with a body that is not the Error schema:\n%v\nresponse body: %s", what, indent(err), truncate(body))
	}
}

// pathOnly rebuilds req for route matching: no scheme or host, the given
// body, and Content-Type application/json when a body has none.
func pathOnly(req *http.Request, body []byte) *http.Request {
	r := req.Clone(context.Background())
	r.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
	r.Host = ""
	r.RequestURI = ""
	r.Body = http.NoBody
	r.GetBody = nil
	r.ContentLength = int64(len(body))
	if len(body) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Header.Get("Content-Type") == "" {
			r.Header.Set("Content-Type", "application/json")
		}
	}
	return r
}

// schemaError words a schema mismatch as where and why, without the
// schema and value dumps kin-openapi adds by default.
func schemaError(err *openapi3.SchemaError) string {
	msg := fmt.Sprintf("at %q: %s", "/"+strings.Join(err.JSONPointer(), "/"), err.Reason)
	if err.Origin != nil { // why each branch of a oneOf failed
		msg += " (" + strings.ReplaceAll(err.Origin.Error(), "\n", "; ") + ")"
	}
	return msg
}

// errorCode returns error.code of an Error body, or 0.
func errorCode(body []byte) int {
	var e struct {
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return 0
	}
	return e.Error.Code
}

func indent(err error) string {
	return "  " + strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "\n  ")
}

func truncate(b []byte) string {
	const max = 500
	if len(b) > max {
		return string(b[:max]) + fmt.Sprintf("... (%d bytes)", len(b))
	}
	return string(b)
}
