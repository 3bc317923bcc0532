package shadow

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// orderStore serves one shadow and logs reads and barriers.
type orderStore struct {
	store.Store // nil: only the methods below are called
	events      *[]string
}

func (s orderStore) GetShadow(context.Context, string, string) (store.Shadow, error) {
	*s.events = append(*s.events, "read")
	sh := store.NewShadow()
	sh.LastDesiredVersion = 2
	sh.Properties["temp"] = store.Property{DesiredValue: json.RawMessage("21")}
	return sh, nil
}

func (s orderStore) Barrier(context.Context) error {
	*s.events = append(*s.events, "barrier")
	return nil
}

type orderPublisher struct{ events *[]string }

func (p orderPublisher) PublishControl(topic string, _ []byte) error {
	*p.events = append(*p.events, "publish "+topic)
	return nil
}

func (orderPublisher) Subscribed(string) bool { return true }

// TestSendDesiredWaitsForDurability checks that the desired document is
// published only after a Barrier that follows its read, so a device never
// acts on a version that a crash could take back.
func TestSendDesiredWaitsForDurability(t *testing.T) {
	for _, onlyIfSet := range []bool{true, false} {
		var events []string
		s := NewSync(orderStore{events: &events}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		s.SendDesired(context.Background(), orderPublisher{&events}, "app", "dev", onlyIfSet)
		if want := []string{"read", "barrier", "publish " + TopicDesired}; !slices.Equal(events, want) {
			t.Errorf("onlyIfSet %v: %v, want %v", onlyIfSet, events, want)
		}
	}
}
