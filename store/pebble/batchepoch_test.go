package pebble

import (
	"context"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// TestBatchSendWithSameEpochSkipsDeviceReads: a batch send whose
// BatchSeq carries the store's FlagEpoch, taken before Plan found its
// devices, does not read them again under their stripes, as a broadcast
// step does not (TestStepWithSameEpochSkipsDeviceReads). The device is
// removed behind the store's back (no epoch bump), so only a write that
// trusts the epoch stores its message; one with another epoch, or none,
// reads the device and finds it gone.
func TestBatchSendWithSameEpochSkipsDeviceReads(t *testing.T) {
	ctx := context.Background()
	s, must := openTestApp(t, "d-1", "d-2", "d-3")
	epoch, _ := s.FlagEpoch()
	for _, name := range []string{"d-1", "d-2", "d-3"} {
		must(s.db.Delete(key(pDevice, "app", name), nil))
		s.devices.drop("app", name)
	}
	send := func(seqNo, id int64, dev string, epoch uint64, ok bool) int {
		m := store.Message{ID: id, AppKey: "app", DeviceName: dev, Body: "b", TTL: 60, TimeCreate: 1, ExpireTime: 61, State: store.StatePending}
		seq := &store.BatchSeq{SeqNo: seqNo, Entry: store.SeqEntry{Fingerprint: "f", Status: 200, ExpiresAt: 1 << 50}, Epoch: epoch, EpochOK: ok}
		out, err := s.CreateMessages(ctx, "app", []store.BatchMessage{{Message: m, Full: m}}, seq, nil)
		must(err)
		return out[0]
	}
	if o := send(1, 101, "d-1", epoch, true); o != store.BatchStored {
		t.Errorf("batch with the store's epoch: outcome %d, want the message stored without reading the device", o)
	}
	if o := send(2, 102, "d-2", epoch+1, true); o != store.BatchGone {
		t.Errorf("batch with another epoch: outcome %d, want the device read and found gone", o)
	}
	if o := send(3, 103, "d-3", epoch, false); o != store.BatchGone {
		t.Errorf("batch without an epoch: outcome %d, want the device read and found gone", o)
	}
}
