package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/apitypes"
)

// TestEventWebhooksPage lists, adds (verified live by a real receiver
// answering the echostr), refuses (with the API's reason shown) and
// deletes an app's event webhooks.
func TestEventWebhooksPage(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("hooks")
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Query().Get("echostr"))
	}))
	defer echo.Close()
	broken := httptest.NewServer(http.NotFoundHandler())
	defer broken.Close()
	b := e.browser()
	b.loginApp(a)
	base := "/console/apps/" + a.Key + "/webhooks"
	list := func() (v apitypes.EventWebhooks) {
		e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/events/webhooks", nil, &v)
		return v
	}

	p := b.get(base)
	p.want(t, 200, `id="webhooks-empty"`, `id="webhook-add-url"`, `aria-current="page">Event webhooks`)
	if s := p.text("webhooks-signing-secret"); s == "" || s != list().SigningSecret {
		t.Errorf("signing secret %q", s)
	}

	all := echo.URL + "/all"
	p = b.post(base+"/add", url.Values{"url": {all}})
	p.want(t, 200, "Verified and added", `data-url="`+all+`"`)
	if got := p.text("webhooks-table"); !strings.Contains(got, "every type") || !strings.Contains(got, "JSON array") {
		t.Errorf("the all-types webhook shows %q", got)
	}
	jiot := echo.URL + "/jiot?x=1&y=2"
	p = b.post(base+"/add", url.Values{"url": {jiot}, "format": {"jiot"}, "types": {"device.event"}})
	p.want(t, 200, "Verified and added", `data-url="`+echo.URL+`/jiot?x=1&amp;y=2"`)
	some := echo.URL + "/some"
	b.post(base+"/add", url.Values{"url": {some}, "types": {"device.online", "device.offline", "device.online"}}).want(t, 200, "Verified and added")
	hooks := list().Webhooks
	if len(hooks) != 3 || hooks[1].Format != "jiot" || len(hooks[2].Types) != 2 || hooks[2].Types[0] != "device.online" || hooks[2].Types[1] != "device.offline" {
		t.Fatalf("webhooks %+v", hooks)
	}

	// The verification fails: the API's reason is on the page, nothing
	// is added.
	p = b.post(base+"/add", url.Values{"url": {broken.URL + "/hook"}})
	p.want(t, 200, `id="flash"`, "HTTP 404")
	if p.text("flash") == "" || len(list().Webhooks) != 3 {
		t.Errorf("a failing URL: flash %q, webhooks %+v", p.text("flash"), list().Webhooks)
	}
	b.post(base+"/add", url.Values{"url": {"ftp://example.com/x"}}).want(t, 200, "http://")

	p = b.post(base+"/delete", url.Values{"url": {jiot}})
	p.want(t, 200, "Deleted "+echo.URL+"/jiot?x=1&amp;y=2")
	if hooks := list().Webhooks; len(hooks) != 2 || hooks[0].URL != all || hooks[1].URL != some {
		t.Errorf("after deleting: %+v", hooks)
	}
}
