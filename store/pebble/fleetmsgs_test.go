package pebble

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestChunkKeysInOrder: a broadcast chunk's entries (messages to devices
// in name order, msgids rising, as the fan-out makes them) reach the
// batch in key order, so each memtable insert lands next to the one
// before; a key written twice keeps its order (the later write wins).
func TestChunkKeysInOrder(t *testing.T) {
	var kvs []kv
	for i := range 3 {
		m := store.Message{
			ID: 1000 + int64(i), AppKey: "app", DeviceName: fmt.Sprintf("d-%02d", i), Body: "fw",
			TTL: 60, TimeCreate: 100, ExpireTime: 160, State: store.StatePending, Broadcast: 7,
			Records: []store.Record{{Type: store.RecordTargetValid, SentTime: 100}, {Type: store.RecordSubmitSuccess, SentTime: 100}},
		}
		enc, err := encodeForm("app", m, 1, 100_000, recordFilter{known: true}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, enc...)
	}
	got := inKeyOrder(kvs)
	if len(got) != len(kvs) {
		t.Fatalf("%d entries in key order, want %d", len(got), len(kvs))
	}
	for i := 1; i < len(got); i++ {
		if bytes.Compare(got[i-1].k, got[i].k) >= 0 {
			t.Fatalf("entry %d %q is not after entry %d %q", i, got[i].k, i-1, got[i-1].k)
		}
	}

	twice := inKeyOrder([]kv{{[]byte("q/a"), []byte("1")}, {[]byte("m/a"), nil}, {[]byte("q/a"), []byte("2")}})
	if string(twice[1].v) != "1" || string(twice[2].v) != "2" {
		t.Fatalf("a key written twice: %q, want the writes in their order", twice)
	}
	if n := testing.AllocsPerRun(10, func() { _ = eachInKeyOrder(kvs, func(kv) error { return nil }) }); n != 0 {
		t.Errorf("ordering the entries allocated %.0f times, want none", n)
	}
}

// inKeyOrder returns what eachInKeyOrder gives, in its order.
func inKeyOrder(kvs []kv) []kv {
	var out []kv
	_ = eachInKeyOrder(kvs, func(e kv) error { out = append(out, e); return nil })
	return out
}

// TestStepWithSameEpochSkipsDeviceReads: a broadcast step whose FlagEpoch
// is still the store's does not read its devices again under their
// stripes (prepare found them after the epoch was taken, and no device
// was deleted since). The device is removed here behind the store's back
// (no epoch bump), so only a step that trusts the epoch stores its
// message; one with another epoch reads the devices and finds it gone.
func TestStepWithSameEpochSkipsDeviceReads(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "d-1", Secret: "s"}, {Name: "d-2", Secret: "s"}}); err != nil {
		t.Fatal(err)
	}
	b := store.Broadcast{ID: 100, AppKey: "app", All: true, Body: "fw", TTL: 60, TimeCreate: 1, Targets: 2, Chunks: 2, State: store.BroadcastFanningOut}
	if err := s.CreateBroadcast(ctx, b, [][]string{{"d-1"}, {"d-2"}}, 0, nil); err != nil {
		t.Fatal(err)
	}
	epoch, _ := s.FlagEpoch()
	for _, name := range []string{"d-1", "d-2"} {
		if err := s.db.Delete(key(pDevice, "app", name), nil); err != nil {
			t.Fatal(err)
		}
		s.devices.drop("app", name)
	}
	msg := func(id int64, dev string) []store.BatchMessage {
		m := store.Message{ID: id, AppKey: "app", DeviceName: dev, Body: "fw", TTL: 60, TimeCreate: 1, ExpireTime: 61, State: store.StatePending, Broadcast: 100}
		return []store.BatchMessage{{Message: m, Full: m}}
	}
	out, err := s.CreateMessages(ctx, "app", msg(101, "d-1"), nil, &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: 0, Epoch: epoch, EpochOK: true})
	if err != nil || out[0] != store.BatchStored {
		t.Fatalf("step with the store's epoch: %v %v, want the message stored without reading the device", out, err)
	}
	out, err = s.CreateMessages(ctx, "app", msg(102, "d-2"), nil, &store.BroadcastStep{AppKey: "app", ID: 100, Chunk: 1, Done: true, Epoch: epoch + 1, EpochOK: true})
	if err != nil || out[0] != store.BatchGone {
		t.Fatalf("step with another epoch: %v %v, want the device read and found gone", out, err)
	}
}

// TestEncodeFormKeys: encodeForm builds its keys in the message's buffer;
// they are the keys queueKey, expiryKey, msgKey and appMsgKey make, with
// and without outbox entries, pending or not.
func TestEncodeFormKeys(t *testing.T) {
	for _, tc := range []struct {
		state  string
		expire int64
		f      recordFilter
	}{
		{store.StatePending, 160, recordFilter{known: true}},
		{store.StatePending, -5, recordFilter{}},
		{store.StateFailed, 160, recordFilter{}},
	} {
		m := store.Message{
			ID: 1001, AppKey: "app", DeviceName: "d-1", Body: "fw", TTL: 60, TimeCreate: 100, ExpireTime: tc.expire,
			State: tc.state, Params: []byte(`{"broadcast_id":"7"}`), Broadcast: 7,
			Records: []store.Record{{Type: store.RecordTargetValid, SentTime: 100}, {Type: store.RecordSubmitSuccess, SentTime: 100}},
		}
		kvs, err := encodeForm("app", m, 5, 100_000, tc.f, &rawMemo{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var want [][]byte
		if tc.state == store.StatePending {
			want = append(want, queueKey("app", "d-1", 1001), expiryKey(tc.expire, 1001))
		}
		want = append(want, msgKey(1001), appMsgKey("app", 1001))
		if !tc.f.known {
			want = append(want, outboxKey(5), outboxKey(6))
		}
		if len(kvs) != len(want) {
			t.Fatalf("%s: %d entries, want %d", tc.state, len(kvs), len(want))
		}
		for i := range want {
			if !bytes.Equal(kvs[i].k, want[i]) {
				t.Fatalf("%s: key %d %q, want %q", tc.state, i, kvs[i].k, want[i])
			}
		}
		msg := kvs[slices.IndexFunc(kvs, func(e kv) bool { return bytes.Equal(e.k, msgKey(1001)) })]
		if enc, _ := appendMessage(nil, &m); !bytes.Equal(msg.v, enc) {
			t.Fatalf("%s: message %s, want %s", tc.state, msg.v, enc)
		}
	}
}
