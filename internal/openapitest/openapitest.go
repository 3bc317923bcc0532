// Package openapitest checks real HTTP responses against docs/openapi.yaml,
// so the document cannot drift from what the server sends.
package openapitest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// Validator checks exchanges against one OpenAPI document.
type Validator struct {
	router routers.Router
}

// Load reads and validates the document at path.
func Load(t testing.TB, path string) *Validator {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", path, err)
	}
	// Match on paths only: tests serve on random loopback ports.
	doc.Servers = nil
	r, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatalf("router for %s: %v", path, err)
	}
	return &Validator{router: r}
}

// Check validates the response to req: its status must be documented for
// the route, and its headers and body must match the documented schema.
// Requests are not validated: tests send invalid ones on purpose. A
// request to an undocumented route must have been answered 404 or 405.
func (v *Validator) Check(t testing.TB, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	u := *req.URL
	u.Scheme, u.Host = "", ""
	r2 := req.Clone(context.Background())
	r2.URL = &url.URL{Path: u.Path, RawQuery: u.RawQuery}
	route, params, err := v.router.FindRoute(r2)
	if err != nil {
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("openapi: %s %s is not documented but answered %d", req.Method, req.URL.Path, resp.StatusCode)
		}
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    r2,
			PathParams: params,
			Route:      route,
			Options:    &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: resp.StatusCode,
		Header: resp.Header,
		Body:   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true, // an undocumented status is an error
			MultiError:            true,
		},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("openapi: %s %s answered %d %s:\n%v", req.Method, req.URL.Path, resp.StatusCode, truncate(body), err)
	}
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
