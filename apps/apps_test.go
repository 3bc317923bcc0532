package apps_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/apps"
	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

type fakeStore struct{ apps []store.App }

func (f *fakeStore) CreateApp(_ context.Context, app store.App) error {
	f.apps = append(f.apps, app)
	return nil
}

type fakeCache struct {
	forgot []string
	app    store.App
}

func (c *fakeCache) Forget(key string) { c.forgot = append(c.forgot, key) }

func (c *fakeCache) Update(_ context.Context, key string, fn func(*store.App) error) (store.App, error) {
	if key != c.app.Key {
		return store.App{}, store.ErrNotFound
	}
	err := fn(&c.app)
	return c.app, err
}

func TestCreate(t *testing.T) {
	for _, tc := range []struct {
		name, appName, wantErr string
	}{
		{"ok", "greenhouse", ""},
		{"empty", "", "name must be 1 to 64 bytes"},
		{"too long", strings.Repeat("x", apps.MaxNameLen+1), "name must be 1 to 64 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, cache := &fakeStore{}, &fakeCache{}
			app, err := apps.NewService(apps.Config{}, st, cache).Create(context.Background(), tc.appName)
			if tc.wantErr != "" {
				var iv *errdefs.InvalidError
				if !errors.As(err, &iv) || iv.Field != "name" || err.Error() != tc.wantErr || len(st.apps) != 0 {
					t.Fatalf("err %v, stored %v", err, st.apps)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(st.apps) != 1 || st.apps[0].Key != app.Key || st.apps[0].MasterSecret != app.MasterSecret || len(app.Key) != apps.KeyLen || len(app.MasterSecret) != apps.MasterSecretLen {
				t.Fatalf("created %+v, stored %+v", app, st.apps)
			}
			if len(cache.forgot) != 1 || cache.forgot[0] != app.Key {
				t.Errorf("cache told %v", cache.forgot)
			}
		})
	}
}

func TestRotateMasterSecret(t *testing.T) {
	cache := &fakeCache{app: store.App{Key: "k", MasterSecret: "old"}}
	app, err := apps.NewService(apps.Config{}, &fakeStore{}, cache).RotateMasterSecret(context.Background(), "k")
	if err != nil || app.MasterSecret == "old" || len(app.MasterSecret) != apps.MasterSecretLen {
		t.Fatalf("rotate: %+v %v", app, err)
	}
}

func TestRateLimits(t *testing.T) {
	cache := &fakeCache{app: store.App{Key: "k", RateLimits: map[string]int{store.CategoryQuery: 5}}}
	svc := apps.NewService(apps.Config{DefaultRateLimit: 10}, &fakeStore{}, cache)
	ctx := context.Background()
	var iv *errdefs.InvalidError
	if _, err := svc.SetRateLimits(ctx, "k", map[string]int64{store.CategoryCreate: apps.MaxRateLimit + 1}); !errors.As(err, &iv) ||
		err.Error() != "create must be 0 (unlimited) to 1000000 requests per second" {
		t.Fatalf("over the maximum: %v", err)
	}
	got, err := svc.SetRateLimits(ctx, "k", map[string]int64{store.CategoryCreate: 0})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{store.CategoryCreate: 0, store.CategoryProperty: 10, store.CategoryMessage: 10, store.CategoryQuery: 5, store.CategoryCommand: 10}
	if !maps.Equal(got, want) {
		t.Fatalf("limits %v, want %v", got, want)
	}
}

func TestSetModelNamesTheEntry(t *testing.T) {
	cache := &fakeCache{app: store.App{Key: "k"}}
	svc := apps.NewService(apps.Config{}, &fakeStore{}, cache)
	err := svc.SetModel(context.Background(), "k", []store.PropertyDef{{Name: "mode", Type: "text"}})
	var iv *errdefs.InvalidError
	if !errors.As(err, &iv) || iv.Field != "properties[0].type" || err.Error() != `properties[0].type: "text" is not int, double or string` {
		t.Fatalf("bad type: %v", err)
	}
	if cache.app.Properties != nil {
		t.Fatal("an invalid model was stored")
	}
}
