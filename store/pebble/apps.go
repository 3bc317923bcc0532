package pebble

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/devmsg/devmsg/store"
)

// Apps.

// CreateApp stores a new app; store.ErrAlreadyExists if the key is taken.
func (s *Store) CreateApp(ctx context.Context, app store.App) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.appMu.Lock()
	defer s.appMu.Unlock()
	k := key(pApp, app.Key)
	if ok, err := s.exists(k); err != nil {
		return fmt.Errorf("create app %s: %w", app.Key, err)
	} else if ok {
		return store.ErrAlreadyExists
	}
	s.appSettings.changed(app.Key)
	defer s.appSettings.changed(app.Key)
	if err := s.write(func(b *pebble.Batch) error { return setJSON(b, k, app) }); err != nil {
		return fmt.Errorf("create app %s: %w", app.Key, err)
	}
	return nil
}

// GetApp returns the app or store.ErrNotFound.
func (s *Store) GetApp(ctx context.Context, appKey string) (store.App, error) {
	if err := s.enter(ctx); err != nil {
		return store.App{}, err
	}
	defer s.exit()
	var app store.App
	if err := s.getJSON(key(pApp, appKey), &app); err != nil {
		return store.App{}, err
	}
	return app, nil
}

// ListApps returns every app ordered by key.
func (s *Store) ListApps(ctx context.Context) ([]store.App, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	var apps []store.App
	err := s.scan([]byte(pApp), prefixEnd([]byte(pApp)), func(k, v []byte) (bool, error) {
		var app store.App
		if err := json.Unmarshal(v, &app); err != nil {
			return false, fmt.Errorf("decode %q: %w", k, err)
		}
		apps = append(apps, app)
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	return apps, nil
}

// UpdateApp applies fn to the app under the app lock and stores the result.
func (s *Store) UpdateApp(ctx context.Context, appKey string, fn func(*store.App) error) (store.App, error) {
	if err := s.enter(ctx); err != nil {
		return store.App{}, err
	}
	defer s.exit()
	s.appMu.Lock()
	defer s.appMu.Unlock()
	k := key(pApp, appKey)
	var app store.App
	if err := s.getJSON(k, &app); err != nil {
		return store.App{}, err
	}
	if err := fn(&app); err != nil {
		return store.App{}, err
	}
	app.Key = appKey
	s.appSettings.changed(appKey)
	defer s.appSettings.changed(appKey)
	if err := s.write(func(b *pebble.Batch) error { return setJSON(b, k, app) }); err != nil {
		return store.App{}, fmt.Errorf("update app %s: %w", appKey, err)
	}
	return app, nil
}

// Meta.

// GetMeta returns the value stored under k, or store.ErrNotFound.
func (s *Store) GetMeta(ctx context.Context, k string) ([]byte, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	return s.get([]byte(pMeta + k))
}

// PutMeta stores value under k.
func (s *Store) PutMeta(ctx context.Context, k string, value []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	if err := s.write(func(b *pebble.Batch) error { return set(b, []byte(pMeta+k), value) }); err != nil {
		return fmt.Errorf("put meta %s: %w", k, err)
	}
	return nil
}

// CreateMeta stores value under k unless k is set.
func (s *Store) CreateMeta(ctx context.Context, k string, value []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	if _, err := s.get([]byte(pMeta + k)); err == nil {
		return store.ErrAlreadyExists
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("create meta %s: %w", k, err)
	}
	if err := s.write(func(b *pebble.Batch) error { return set(b, []byte(pMeta+k), value) }); err != nil {
		return fmt.Errorf("create meta %s: %w", k, err)
	}
	return nil
}

// lastKey returns a copy of the greatest key with prefix, nil if none.
func (s *Store) lastKey(prefix string) ([]byte, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: prefixEnd([]byte(prefix))})
	if err != nil {
		return nil, fmt.Errorf("last key of %q: %w", prefix, err)
	}
	defer it.Close()
	if !it.Last() {
		return nil, it.Error()
	}
	return bytes.Clone(it.Key()), nil
}
