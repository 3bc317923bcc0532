package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/devmsg/devmsg/store"
)

func testGetShadow(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetShadow(ctx, "app", "ghost")
	wantErr(t, "shadow of missing device", err, store.ErrNotFound)
	mustDevices(t, s, "app", "dev-1")
	sh, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	if sh.Properties == nil || sh.LastDesiredVersion != 1 {
		t.Fatalf("new shadow %+v", sh)
	}
}

func testSetDesired(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.SetDesired(ctx, update("app", "ghost", 1, `{"p":1}`), 0, nil)
	wantErr(t, "missing device", err, store.ErrNotFound)
	mustDevices(t, s, "app", "dev-1")

	u := update("app", "dev-1", 1, `{"a":1,"b":"x"}`)
	u.Time = 1_700_000_000_123
	sh, err := s.SetDesired(ctx, u, 0, nil)
	must(t, err)
	if sh.LastDesiredVersion != 2 || sh.LastDesiredSTime != u.Time ||
		string(sh.Properties["a"].DesiredValue) != "1" || sh.Properties["a"].DesiredSTime != u.Time ||
		string(sh.Properties["b"].DesiredValue) != `"x"` || sh.Properties["b"].ReportedValue != nil {
		t.Fatalf("returned shadow %+v", sh)
	}
	stored, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	if stored.LastDesiredVersion != 2 || stored.LastDesiredSTime != u.Time || string(stored.Properties["b"].DesiredValue) != `"x"` {
		t.Fatalf("stored shadow %+v", stored)
	}

	for _, v := range []int64{1, 3, 0, -1} {
		_, err := s.SetDesired(ctx, update("app", "dev-1", v, `{"a":2,"c":3}`), 0, nil)
		wantErr(t, fmt.Sprint("version ", v), err, store.ErrVersionConflict)
	}
	after, _ := s.GetShadow(ctx, "app", "dev-1")
	if after.LastDesiredVersion != 2 || string(after.Properties["a"].DesiredValue) != "1" || len(after.Properties) != 2 {
		t.Fatalf("a conflicting update was written: %+v", after)
	}

	u2 := update("app", "dev-1", 2, `{"a":3,"c":4.5}`)
	u2.Time = u.Time + 1000
	_, err = s.SetDesired(ctx, u2, 0, nil)
	must(t, err)
	got, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	want := map[string]string{"a": "3", "b": `"x"`, "c": "4.5"}
	wantTime := map[string]int64{"a": u2.Time, "b": u.Time, "c": u2.Time}
	if got.LastDesiredVersion != 3 || got.LastDesiredSTime != u2.Time || len(got.Properties) != len(want) {
		t.Fatalf("merged shadow %+v", got)
	}
	for name, v := range want {
		if p := got.Properties[name]; string(p.DesiredValue) != v || p.DesiredSTime != wantTime[name] {
			t.Errorf("property %s: %s at %d, want %s at %d", name, p.DesiredValue, p.DesiredSTime, v, wantTime[name])
		}
	}
}

func testSetDesiredSeq(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "dev-1")
	seq := &store.SeqEntry{Fingerprint: "fp", Status: 200, Body: []byte(`{"op_code":0}`), ExpiresAt: future()}
	_, err := s.SetDesired(ctx, update("app", "dev-1", 1, `{"a":1}`), 9, seq)
	must(t, err)
	e, err := s.GetSeq(ctx, "app", 9)
	must(t, err)
	if e.Fingerprint != "fp" || e.Status != 200 || string(e.Body) != `{"op_code":0}` || e.ExpiresAt != seq.ExpiresAt {
		t.Fatalf("seq entry %+v", e)
	}

	tests := []struct {
		name    string
		seqNo   int64
		version int64
		device  string
		want    error
	}{
		// A retry of the successful update carries a version that is now
		// stale; it must see ErrSeqUsed (and be replayed), not a conflict.
		{"seq used", 9, 2, "dev-1", store.ErrSeqUsed},
		{"seq used beats version conflict", 9, 1, "dev-1", store.ErrSeqUsed},
		{"seq used beats missing device", 9, 1, "ghost", store.ErrSeqUsed},
		{"version conflict records no seq", 10, 1, "dev-1", store.ErrVersionConflict},
		{"missing device records no seq", 11, 1, "ghost", store.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.SetDesired(ctx, update("app", tc.device, tc.version, `{"a":2}`), tc.seqNo, &store.SeqEntry{Fingerprint: "other", ExpiresAt: future()})
			wantErr(t, "set", err, tc.want)
			if sh, _ := s.GetShadow(ctx, "app", "dev-1"); sh.LastDesiredVersion != 2 || string(sh.Properties["a"].DesiredValue) != "1" {
				t.Fatalf("a refused update was applied: %+v", sh)
			}
			e, err := s.GetSeq(ctx, "app", tc.seqNo)
			if tc.want == store.ErrSeqUsed {
				if err != nil || e.Fingerprint != "fp" {
					t.Fatalf("the first entry was replaced: %+v %v", e, err)
				}
			} else {
				wantErr(t, "seq recorded for a failed update", err, store.ErrNotFound)
			}
		})
	}

	// seq_no is one space per app shared by property sets and messages.
	err = s.CreateMessage(ctx, msg(1, "app", "dev-1", store.StatePending), 9, seq)
	wantErr(t, "message with a property set's seq_no", err, store.ErrSeqUsed)
	// An expired entry does not block a new update, and is replaced.
	must(t, s.PutSeq(ctx, "app", 12, store.SeqEntry{Fingerprint: "old", ExpiresAt: past()}))
	_, err = s.SetDesired(ctx, update("app", "dev-1", 2, `{"a":2}`), 12, &store.SeqEntry{Fingerprint: "new", ExpiresAt: future()})
	must(t, err)
	if e, err := s.GetSeq(ctx, "app", 12); err != nil || e.Fingerprint != "new" {
		t.Fatalf("expired entry not replaced: %+v %v", e, err)
	}
	// A nil entry ignores seqNo entirely.
	_, err = s.SetDesired(ctx, update("app", "dev-1", 3, `{"a":3}`), 9, nil)
	must(t, err)
}

func testSeq(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.GetSeq(ctx, "app", 1)
	wantErr(t, "get unset seq", err, store.ErrNotFound)
	// Negative and extreme seq_nos are distinct numbers like any other.
	for _, n := range []int64{1, -1, 0, 256, -256, 1 << 62, -1 << 63, 1<<63 - 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := store.SeqEntry{Fingerprint: fmt.Sprint(n), Status: 200, Body: []byte(fmt.Sprintf(`{"n":%d}`, n)), ExpiresAt: future()}
			must(t, s.PutSeq(ctx, "app", n, e))
			wantErr(t, "reuse", s.PutSeq(ctx, "app", n, store.SeqEntry{Fingerprint: "again", ExpiresAt: future()}), store.ErrSeqUsed)
			got, err := s.GetSeq(ctx, "app", n)
			must(t, err)
			if got.Fingerprint != e.Fingerprint || string(got.Body) != string(e.Body) || got.Status != 200 || got.ExpiresAt != e.ExpiresAt {
				t.Fatalf("got %+v, want %+v", got, e)
			}
		})
	}
	_, err = s.GetSeq(ctx, "other-app", 1)
	wantErr(t, "another app's seq", err, store.ErrNotFound)
	must(t, s.PutSeq(ctx, "other-app", 1, store.SeqEntry{ExpiresAt: future()}))
}

func testSeqExpiry(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.PutSeq(ctx, "app", 77, store.SeqEntry{Fingerprint: "old", ExpiresAt: past()}))
	_, err := s.GetSeq(ctx, "app", 77)
	wantErr(t, "expired entry", err, store.ErrNotFound)
	must(t, s.PutSeq(ctx, "app", 77, store.SeqEntry{Fingerprint: "new", ExpiresAt: future()}))
	if e, _ := s.GetSeq(ctx, "app", 77); e.Fingerprint != "new" {
		t.Fatalf("expired entry not replaced: %+v", e)
	}
	wantErr(t, "reuse of the replacement", s.PutSeq(ctx, "app", 77, store.SeqEntry{ExpiresAt: future()}), store.ErrSeqUsed)

	// An entry is used until ExpiresAt and free after it. The check before
	// expiry only counts when it finished in time, so a slow machine cannot
	// fail it.
	soon := time.Now().Add(500 * time.Millisecond)
	must(t, s.PutSeq(ctx, "app", 78, store.SeqEntry{Fingerprint: "soon", ExpiresAt: soon.UnixMilli()}))
	err = s.PutSeq(ctx, "app", 78, store.SeqEntry{ExpiresAt: future()})
	if time.Now().Before(soon) && !errors.Is(err, store.ErrSeqUsed) {
		t.Fatalf("reuse before expiry: %v", err)
	}
	time.Sleep(time.Until(soon) + 10*time.Millisecond)
	_, err = s.GetSeq(ctx, "app", 78)
	wantErr(t, "entry after its expiry", err, store.ErrNotFound)
	must(t, s.PutSeq(ctx, "app", 78, store.SeqEntry{Fingerprint: "later", ExpiresAt: future()}))
}
