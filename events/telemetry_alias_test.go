package events_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/devmsg/devmsg/events"
	"github.com/devmsg/devmsg/store"
	"github.com/devmsg/devmsg/store/memory"
)

// TestTelemetryOwnsItsData: the broker may reuse the bytes of a publish
// once the publish is handled, so the stored device.up keeps no part of
// them. The payload buffer is overwritten after Telemetry returns, with
// bytes that would break the event's JSON were they seen through it.
func TestTelemetryOwnsItsData(t *testing.T) {
	st := memory.New()
	svc := events.NewService(st)
	ctx := context.Background()
	buf := []byte(`{"seq":14,"try":0}`)
	if err := svc.Telemetry(ctx, "app", "dev", "up/telemetry", 1, buf); err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = "\\ "[i%2]
	}
	p, err := st.ReadEvents(ctx, store.EventQuery{AppKey: "app", Limit: 10})
	if err != nil || len(p.Events) != 1 {
		t.Fatalf("read: %v %+v", err, p)
	}
	var up events.Up
	if err := json.Unmarshal(p.Events[0].Data, &up); err != nil || up.Payload != `{"seq":14,"try":0}` || up.Topic != "up/telemetry" {
		t.Fatalf("stored data %s (%v), want the payload as published", p.Events[0].Data, err)
	}
	body, err := json.Marshal(events.ToWires(p.Events))
	if err != nil || !json.Valid(body) {
		t.Fatalf("wire body %s: %v", body, err)
	}
}
