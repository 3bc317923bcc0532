package restapi_test

import (
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

func TestCallbackDeadLetters(t *testing.T) {
	events := &redeliveries{}
	e := callbackEnv(t, callbackEvents(events))
	f := &deadLettersTest{
		e: e, events: events, other: e.createApp("other"), adm: adminCreds(), own: e.appCreds(),
		base: "/admin/v1/apps/" + e.app.Key + "/callback/deadletters", hook: "http://127.0.0.1:9/cb",
	}

	t.Run("empty", f.empty)

	e.putDeadLetter(t, e.app.Key, f.hook, 1000, 3)
	e.putDeadLetter(t, e.app.Key, f.hook, 2000, 1)
	e.putDeadLetter(t, e.app.Key, f.hook, 3000, 2)
	e.putDeadLetter(t, f.other.Key, f.hook, 4000, 1)

	t.Run("list", f.listed)
	t.Run("pages", f.pages)
	t.Run("bad parameters", f.badParameters)
	t.Run("redeliver", f.redeliver)
	t.Run("redeliver unknown", f.redeliverUnknown)
}

// deadLettersTest holds TestCallbackDeadLetters' apps; its subtests run
// in order on them.
type deadLettersTest struct {
	e        *env
	events   *redeliveries
	other    store.App
	adm, own creds
	base     string
	hook     string
}

func (f *deadLettersTest) list(t *testing.T, query string) deadLetterPage {
	t.Helper()
	r := f.e.do("GET", f.base+query, nil, &f.own)
	r.wantOK(t)
	var p deadLetterPage
	r.decode(t, &p)
	return p
}

func (f *deadLettersTest) empty(t *testing.T) {
	r := f.e.do("GET", f.base, nil, &f.own)
	r.wantOK(t)
	if string(r.body) != `{"dead_letters":[],"next":""}` {
		t.Fatalf("empty list %s", r.body)
	}
}

func (f *deadLettersTest) listed(t *testing.T) {
	p := f.list(t, "")
	if len(p.DeadLetters) != 3 || p.Next != "" {
		t.Fatalf("list %+v, want 3 dead letters of this app and no next page", p)
	}
	d := p.DeadLetters[0]
	if d.ID != "1000" || d.URL != f.hook || d.Attempts != 4 || d.LastError != "HTTP 503" || d.Time != 1767225900 || len(d.Records) != 3 {
		t.Fatalf("first dead letter %+v", d)
	}
	r := d.Records[1]
	if r.ID != "1188240153776620520-1" || r.Type != 5 || r.MsgID != "1188240153776620520" || r.Error == nil || r.Error.Code != 3005 {
		t.Fatalf("record %+v", r)
	}
}

func (f *deadLettersTest) pages(t *testing.T) {
	p := f.list(t, "?limit=2")
	if len(p.DeadLetters) != 2 || p.DeadLetters[1].ID != "2000" || p.Next != "2000" {
		t.Fatalf("first page %+v", p)
	}
	p = f.list(t, "?limit=2&cursor="+p.Next)
	if len(p.DeadLetters) != 1 || p.DeadLetters[0].ID != "3000" || p.Next != "" {
		t.Fatalf("second page %+v", p)
	}
	if p := f.list(t, "?limit=3"); len(p.DeadLetters) != 3 || p.Next != "" {
		t.Fatalf("a full last page has a next page: %+v", p)
	}
}

func (f *deadLettersTest) badParameters(t *testing.T) {
	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=abc", "?limit=-1"} {
		f.e.do("GET", f.base+q, nil, &f.own).wantError(t, 400, 1003, "limit")
	}
	for _, q := range []string{"?cursor=abc", "?cursor=-5"} {
		f.e.do("GET", f.base+q, nil, &f.own).wantError(t, 400, 1003, "cursor")
	}
}

func (f *deadLettersTest) redeliver(t *testing.T) {
	e := f.e
	r := e.do("POST", f.base+"/2000/redeliver", nil, &f.own)
	r.wantOK(t)
	if string(r.body) != `{"id":"2000","records":1}` {
		t.Fatalf("redeliver answered %s", r.body)
	}
	if got := f.events.list(); !slices.Equal(got, []string{e.app.Key + " " + f.hook}) {
		t.Fatalf("Redelivered calls %q", got)
	}
	queued, err := e.st.ReadCallbacks(t.Context(), store.CallbackQueue{AppKey: e.app.Key, URL: f.hook}, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != 1 || queued[0].ID != "1188240153776621520-0" {
		t.Fatalf("queue after redelivery %+v", queued)
	}
	p := f.list(t, "")
	if len(p.DeadLetters) != 2 || p.DeadLetters[0].ID != "1000" || p.DeadLetters[1].ID != "3000" {
		t.Fatalf("list after redelivery %+v", p)
	}
	e.do("POST", f.base+"/3000/redeliver", nil, &f.adm).wantOK(t)
}

func (f *deadLettersTest) redeliverUnknown(t *testing.T) {
	e := f.e
	n := len(f.events.list())
	e.do("POST", f.base+"/2000/redeliver", nil, &f.own).wantError(t, 400, 1003, `dead letter "2000" not found`)
	e.do("POST", f.base+"/nope/redeliver", nil, &f.own).wantError(t, 400, 1003, "not found")
	// Another app's dead letter is not this app's.
	e.do("POST", f.base+"/4000/redeliver", nil, &f.adm).wantError(t, 400, 1003, "not found")
	if len(f.events.list()) != n {
		t.Fatal("a refused redelivery was reported to the worker")
	}
	o := credsOf(f.other)
	e.do("POST", "/admin/v1/apps/"+f.other.Key+"/callback/deadletters/4000/redeliver", nil, &o).wantOK(t)
}
