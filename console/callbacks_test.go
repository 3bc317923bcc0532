package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/devmsg/devmsg/callback"
	"github.com/devmsg/devmsg/store"
)

func TestCallbacks(t *testing.T) {
	e := newEnv(t)
	a := e.createApp("greenhouse")
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Query().Get("echostr"))
	}))
	defer echo.Close()
	broken := httptest.NewServer(http.NotFoundHandler())
	defer broken.Close()
	b := e.browser()
	b.loginApp(a)
	base := "/console/apps/" + a.Key + "/callbacks"
	settings := func() (s struct {
		Enabled bool
		Types   []int
	}) {
		e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/callback", nil, &s)
		return s
	}

	t.Run("switch", func(t *testing.T) {
		p := b.get(base)
		if p.text("callback-state") != "off" || p.text("callback-switch-submit") != "Turn callbacks on" {
			t.Fatalf("state %q button %q", p.text("callback-state"), p.text("callback-switch-submit"))
		}
		p = b.post(base+"/switch", url.Values{"enabled": {"1"}})
		if p.text("callback-state") != "on" || !settings().Enabled {
			t.Fatal("the switch did not turn on")
		}
		p = b.post(base+"/switch", url.Values{"enabled": {"0"}})
		if p.text("callback-state") != "off" || settings().Enabled {
			t.Fatal("the switch did not turn off")
		}
	})
	t.Run("types", func(t *testing.T) {
		p := b.post(base+"/types", url.Values{"types": {"5", "4", "6"}})
		p.want(t, 200, "Record types saved.", `id="callback-type-4" name="types" type="checkbox" value="4" checked`)
		if p.has(`value="0" checked`) || !slices.Equal(settings().Types, []int{4, 5, 6}) {
			t.Errorf("types %v", settings().Types)
		}
		b.post(base+"/types", nil)
		if got := settings().Types; len(got) != 0 {
			t.Errorf("no box ticked: types %v", got)
		}
	})
	t.Run("urls", func(t *testing.T) {
		p := b.post(base+"/urls/add", url.Values{"url": {echo.URL + "/cb"}})
		p.want(t, 200, "Verified and added", `data-url="`+echo.URL+`/cb"`, "url-default")
		p = b.post(base+"/urls/add", url.Values{"url": {broken.URL + "/cb"}})
		p.want(t, 200, "verification failed", "HTTP 404")
		p = b.post(base+"/urls/add", url.Values{"url": {"ftp://example.com/x"}})
		p.want(t, 200, "callback URL must begin with http:// or https://")

		second := echo.URL + "/second?x=1&y=2"
		b.post(base+"/urls/add", url.Values{"url": {second}}).want(t, 200, "Verified and added")
		b.post(base+"/urls/test", url.Values{"url": {second}}).want(t, 200, "Test passed")
		b.post(base+"/urls/delete", url.Values{"url": {echo.URL + "/cb"}}).want(t, 200, "the default URL cannot be deleted")
		b.post(base+"/urls/default", url.Values{"url": {second}}).want(t, 200, "is now the default URL.")
		p = b.post(base+"/urls/delete", url.Values{"url": {echo.URL + "/cb"}})
		p.want(t, 200, "Deleted "+echo.URL+"/cb")
		var urls struct{ URLs []struct{ URL string } }
		e.apiCall(a.Key, a.Secret, "GET", "/admin/v1/apps/"+a.Key+"/callback/urls", nil, &urls)
		if len(urls.URLs) != 1 || urls.URLs[0].URL != second {
			t.Errorf("urls %+v", urls)
		}
	})
	t.Run("deliveries and dead letters", func(t *testing.T) {
		e.events.d = []callback.Delivery{
			{Time: time.Unix(1_790_000_100, 0), URL: echo.URL + "/cb", Records: 3, Attempt: 1, Status: 503, LatencyMS: 12.5, Error: "HTTP 503"},
		}
		err := e.st.PutDeadLetter(t.Context(), store.DeadLetter{
			ID: "7", AppKey: a.Key, URL: echo.URL + "/cb", Attempts: 4, LastError: "HTTP 503", Time: 1_790_000_200,
			Entries: []store.OutboxEntry{{Seq: 7, ID: "123-0", AppKey: a.Key, Record: store.Record{Type: 4, MsgID: "123", UserID: "dev-0001"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		p := b.get(base)
		p.want(t, 200, `<td class="num delivery-status">503</td>`, `<td class="num">12.5</td>`, `data-id="7"`, `id="deadletter-7-redeliver"`)
		p = b.post(base+"/deadletters/7/redeliver", nil)
		p.want(t, 200, "Dead letter 7 queued again (1 records).")
		if p.has(`data-id="7"`) {
			t.Error("the redelivered dead letter is still listed")
		}
		b.post(base+"/deadletters/7/redeliver", nil).want(t, 200, `dead letter &#34;7&#34; not found`)
	})
}
