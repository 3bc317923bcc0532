package openapitest_test

import (
	"crypto/sha256"
	"github.com/devmsg/devmsg/restapi/restapitest"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devmsg/devmsg/internal/openapitest"
	"github.com/devmsg/devmsg/restapi"
	"github.com/devmsg/devmsg/store/pebble"
)

// TestServerRoutesDocumented compares the routes restapi registers with the
// document's paths, so a route added on either side alone fails here even
// if no test calls it.
func TestServerRoutesDocumented(t *testing.T) {
	doc := openapitest.Load(t, "../../docs/openapi.yaml").Doc()
	st, err := pebble.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg, err := restapitest.Config(st, restapi.Config{AdminUsername: "admin", AdminPasswordSHA256: sha256.Sum256([]byte("x"))})
	if err != nil {
		t.Fatal(err)
	}
	api, err := restapi.New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`[:*]([A-Za-z_]+)`)
	var served []string
	for _, r := range api.Routes() {
		if strings.HasPrefix(r.Path, "/debug/pprof") { // operator profiles, deliberately undocumented
			continue
		}
		served = append(served, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("the server serves %s, which docs/openapi.yaml does not describe", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("docs/openapi.yaml describes %s, which the server does not serve", r)
		}
	}
}
