package mqttapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// deviceStore answers GetDevice from a map, or with err when set.
type deviceStore struct {
	store.Store
	devices map[string]store.Device
	err     error
}

func (s deviceStore) GetDevice(_ context.Context, app, name string) (store.Device, error) {
	if s.err != nil {
		return store.Device{}, s.err
	}
	d, ok := s.devices[app+"/"+name]
	if !ok {
		return store.Device{}, store.ErrNotFound
	}
	return d, nil
}

// TestAuthenticateComparesOnce: every refusal costs one secret compare, so
// an unknown device or a failing store is answered no sooner than a wrong
// secret.
func TestAuthenticateComparesOnce(t *testing.T) {
	devices := map[string]store.Device{
		"app/on":  {AppKey: "app", Name: "on", Secret: "right", Flag: store.FlagEnabled},
		"app/off": {AppKey: "app", Name: "off", Secret: "right", Flag: store.FlagDisabled},
	}
	tests := []struct {
		name, device, secret string
		storeErr             error
		ok                   bool
	}{
		{"right secret", "on", "right", nil, true},
		{"wrong secret", "on", "wrong", nil, false},
		{"disabled device", "off", "right", nil, false},
		{"unknown device", "nobody", "right", nil, false},
		{"store failing", "on", "right", errors.New("store down"), false},
	}
	var compares int
	orig := secretEqual
	secretEqual = func(a, b string) bool { compares++; return a == b }
	t.Cleanup(func() { secretEqual = orig })
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := New(deviceStore{devices: devices, err: tc.storeErr}, nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			compares = 0
			err := g.Authenticate("app", tc.device, tc.secret)
			if (err == nil) != tc.ok {
				t.Fatalf("Authenticate: %v, want ok %v", err, tc.ok)
			}
			if compares != 1 {
				t.Fatalf("%d secret compares, want 1", compares)
			}
		})
	}
}
