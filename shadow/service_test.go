package shadow_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/shadow"
	"github.com/devmsg/devmsg/store"
)

// fakeStore is the little of a store that shadow.Service uses: one
// device "dev-1" of app "app" at desired version 1.
type fakeStore struct {
	setDesired []store.SeqEntry
	putSeq     []store.SeqEntry
}

func (f *fakeStore) GetDevice(_ context.Context, appKey, name string) (store.Device, error) {
	if appKey != "app" || name != "dev-1" {
		return store.Device{}, store.ErrNotFound
	}
	return store.Device{AppKey: appKey, Name: name}, nil
}

func (f *fakeStore) GetShadow(_ context.Context, appKey, name string) (store.Shadow, error) {
	if _, err := f.GetDevice(context.Background(), appKey, name); err != nil {
		return store.Shadow{}, err
	}
	sh := store.NewShadow()
	sh.Properties["b"] = store.Property{DesiredValue: json.RawMessage(`1`)}
	sh.Properties["a"] = store.Property{ReportedValue: json.RawMessage(`"x"`)}
	return sh, nil
}

func (f *fakeStore) SetDesired(_ context.Context, u store.DesiredUpdate, _ int64, seq *store.SeqEntry) (store.Shadow, error) {
	if u.Version != 1 {
		return store.Shadow{}, store.ErrVersionConflict
	}
	f.setDesired = append(f.setDesired, *seq)
	return store.NewShadow(), nil
}

func (f *fakeStore) PutSeq(_ context.Context, _ string, _ int64, e store.SeqEntry) error {
	f.putSeq = append(f.putSeq, e)
	return nil
}

type counter struct{ n int64 }

func (c *counter) Next() int64 { c.n++; return c.n }

type notifier struct{ told []string }

func (n *notifier) DesiredChanged(_ context.Context, _, device string, _ store.Shadow) {
	n.told = append(n.told, device)
}

func TestSetDesired(t *testing.T) {
	app := store.App{Key: "app", Properties: []store.PropertyDef{{Name: "mode", Type: "string"}}}
	for _, tc := range []struct {
		name       string
		req        shadow.SetRequest
		wantCode   int
		stored     bool // by SetDesired; otherwise recorded by PutSeq
		wantNotify bool
	}{
		{"ok", shadow.SetRequest{Device: "dev-1", Version: 1, Names: []string{"mode"}, Values: map[string]json.RawMessage{"mode": json.RawMessage(`"eco"`)}}, shadow.CodeOK, true, true},
		{"not in the model", shadow.SetRequest{Device: "dev-1", Version: 1, Names: []string{"fan"}, Values: map[string]json.RawMessage{"fan": json.RawMessage(`1`)}}, shadow.CodePropertyNotFound, false, false},
		{"stale version", shadow.SetRequest{Device: "dev-1", Version: 7, Names: []string{"mode"}, Values: map[string]json.RawMessage{"mode": json.RawMessage(`"eco"`)}}, shadow.CodeVersionInvalid, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, n := &fakeStore{}, &notifier{}
			svc := shadow.NewService(st, &counter{}, n)
			res, err := svc.SetDesired(context.Background(), app, tc.req, 5, func(r shadow.SetResult) *store.SeqEntry {
				b, _ := json.Marshal(r)
				return &store.SeqEntry{Body: b}
			})
			if err != nil {
				t.Fatal(err)
			}
			want := shadow.SetResult{DeviceName: "dev-1", OpCode: tc.wantCode, OpID: 1, OpStatus: shadow.CodeText(tc.wantCode)}
			if res != want {
				t.Fatalf("result %+v, want %+v", res, want)
			}
			recorded := st.putSeq
			if tc.stored {
				recorded = st.setDesired
			}
			wantBody, _ := json.Marshal(want)
			if len(recorded) == 0 || string(recorded[len(recorded)-1].Body) != string(wantBody) {
				t.Errorf("seq_no entry %+v, want the answer %s", recorded, wantBody)
			}
			if got := len(n.told) == 1; got != tc.wantNotify {
				t.Errorf("device told: %v, want %v", n.told, tc.wantNotify)
			}
		})
	}
}

func TestUnknownDeviceIsNotFound(t *testing.T) {
	svc := shadow.NewService(&fakeStore{}, &counter{}, nil)
	_, err := svc.SetDesired(context.Background(), store.App{Key: "app"}, shadow.SetRequest{Device: "nope"}, 1,
		func(shadow.SetResult) *store.SeqEntry { return nil })
	var nf *errdefs.NotFoundError
	if !errors.As(err, &nf) || err.Error() != `device "nope" not found` {
		t.Fatalf("set: %v", err)
	}
	if _, err := svc.Summary(context.Background(), "app", "nope"); !errors.As(err, &nf) {
		t.Fatalf("summary: %v", err)
	}
}

func TestSummarySortsProperties(t *testing.T) {
	svc := shadow.NewService(&fakeStore{}, &counter{}, nil)
	sum, err := svc.Summary(context.Background(), "app", "dev-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Properties) != 2 || sum.Properties[0].Name != "a" || sum.Properties[1].Name != "b" || sum.LastDesiredVersion != 1 {
		t.Fatalf("summary %+v", sum)
	}
}
