package pebble

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// BenchmarkAckWrite times UpdateMessages marking cached pending messages
// delivered as the ack stage does, in batches of 256 PUBACKs of 1000
// devices, per message (the sends that create them are not timed). The
// store is on tmpfs when /dev/shm exists, so that fsync waits do not
// hide the CPU time.
func BenchmarkAckWrite(b *testing.B) {
	dir := b.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "ackwrite")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	s, err := Open(dir, WithSweepInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	s.msgs.noVerify = true
	ctx := context.Background()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(s.CreateApp(ctx, store.App{Key: "app", Name: "a"}))
	const devs, batch = 1000, 256
	var devices []store.Device
	for d := range devs {
		devices = append(devices, store.Device{Name: fmt.Sprintf("dev-%04d", d), Secret: "s"})
	}
	_, err = s.CreateDevices(ctx, "app", devices)
	must(err)
	deliver := func(m *store.Message) error {
		if m.State != store.StatePending {
			return errors.New("not pending")
		}
		m.State = store.StateDelivered
		m.Records = append(m.Records, store.Record{Type: store.RecordDeliverySuccess, SentTime: 1700000000})
		return nil
	}
	next := int64(1)
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		msgs := make([]store.BatchMessage, devs)
		for d := range msgs {
			msgs[d] = store.BatchMessage{Message: store.Message{ID: next, DeviceName: devices[d].Name, Body: "1764075600123456789",
				TTL: 3600, TimeCreate: 1700000000, ExpireTime: 1700003600, State: store.StatePending,
				Records: []store.Record{{Type: store.RecordTargetValid, SentTime: 1700000000}, {Type: store.RecordSubmitSuccess, SentTime: 1700000000}}}}
			next++
		}
		_, err := s.CreateMessages(ctx, "app", msgs, nil, nil)
		must(err)
		b.StartTimer()
		for i := 0; i < devs && done < b.N; i += batch {
			ups := make([]store.MessageUpdate, 0, batch)
			for _, m := range msgs[i:min(i+batch, devs)] {
				ups = append(ups, store.MessageUpdate{AppKey: "app", ID: m.Message.ID, Fn: deliver})
			}
			errs, err := s.UpdateMessages(ctx, ups)
			must(err)
			must(errors.Join(errs...))
			done += len(ups)
		}
	}
}
