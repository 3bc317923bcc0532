package pebble

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// randomMessage returns a message of random shape: strings that need
// escaping or not, params compact or not, records with and without
// errors and params, a broadcast or none. Its records are never nil.
func randomMessage(rng *rand.Rand) store.Message {
	strs := []string{"", "plain", "dev-0001", `quo"te`, `back\slash`, "<b>&amp;", "tab\there", "ünï", "\u2028",
		"bad\xffutf8", "ctl\x01", `,"state":"pending"`, `],"broadcast":1}`}
	params := []json.RawMessage{nil, {}, json.RawMessage(`{"broadcast_id":"12"}`), json.RawMessage(`{ "a" : [1, 2] }`),
		json.RawMessage(`{"a":"<x>"}`), json.RawMessage(`{"a":"ü"}`), json.RawMessage(`{"state":"pending","records":[]}`),
		json.RawMessage(`{"a":"]}"}`)}
	pick := func() string { return strs[rng.IntN(len(strs))] }
	m := store.Message{
		ID: rng.Int64N(1 << 60), AppKey: pick(), DeviceName: pick(), Body: pick(), TTL: rng.Int64N(100000),
		TimeCreate: rng.Int64N(1 << 40), ExpireTime: rng.Int64N(1 << 40), State: pick(), CallbackURL: pick(),
		Params: params[rng.IntN(len(params))], Records: []store.Record{},
	}
	if rng.IntN(2) == 0 {
		m.Broadcast = rng.Int64N(1 << 50)
	}
	for range rng.IntN(4) {
		m.Records = append(m.Records, randomRecord(rng, pick, params))
	}
	return m
}

func randomRecord(rng *rand.Rand, pick func() string, params []json.RawMessage) store.Record {
	r := store.Record{Type: rng.IntN(9), Sender: rng.IntN(3) - 1, SentTime: rng.Int64N(1 << 40)}
	if rng.IntN(3) == 0 { // mostly records as the dispatcher makes them
		r.ChannelKey, r.MsgID, r.UserID, r.SenderID = pick(), pick(), pick(), pick()
		r.Params = params[rng.IntN(len(params))]
	}
	if rng.IntN(3) == 0 {
		r.Error = &store.RecordError{Code: rng.IntN(4000), Message: pick()}
	}
	return r
}

// TestSpliceMessageIsAppendMessage holds spliceMessage to appendMessage
// byte for byte over many shapes of message, with the state changed (to
// what needs escaping too) and up to three records appended, and checks
// that any other change is refused.
func TestSpliceMessageIsAppendMessage(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	states := []string{store.StatePending, store.StateDelivered, "expired", `we"ird<`, ""}
	params := []json.RawMessage{nil, json.RawMessage(`{"a":1}`), json.RawMessage(`{ "b" : "<>" }`)}
	pick := func() string { return []string{"", "x", `q"`}[rng.IntN(3)] }
	spliced := 0
	for range 5000 {
		old := randomMessage(rng)
		raw, err := appendMessage(nil, &old)
		if err != nil {
			t.Fatal(err)
		}
		next := cloneMessage(old)
		next.State = states[rng.IntN(len(states))]
		for range rng.IntN(4) {
			next.Records = append(next.Records, randomRecord(rng, pick, params))
		}
		want, err := appendMessage(nil, &next)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := spliceMessage(raw, &old, &next)
		if !ok {
			t.Fatalf("refused state %q -> %q and %d records appended to %s", old.State, next.State, len(next.Records)-len(old.Records), raw)
		}
		if string(got) != string(want) {
			t.Fatalf("spliced\n %s\nwant\n %s", got, want)
		}
		spliced++
	}
	// Any other change, and records that are null, go to appendMessage.
	others := []func(m *store.Message){
		func(m *store.Message) { m.Body += "x" },
		func(m *store.Message) { m.AppKey += "x" },
		func(m *store.Message) { m.DeviceName += "x" },
		func(m *store.Message) { m.ID++ },
		func(m *store.Message) { m.TTL++ },
		func(m *store.Message) { m.TimeCreate++ },
		func(m *store.Message) { m.ExpireTime++ },
		func(m *store.Message) { m.CallbackURL += "x" },
		func(m *store.Message) { m.Broadcast++ },
		func(m *store.Message) { m.Params = json.RawMessage(`{"other":1}`) },
		func(m *store.Message) { m.Records = nil },
		func(m *store.Message) { m.Records = append(m.Records[:0:0], m.Records[1:]...) },
		func(m *store.Message) { m.Records[0].Type++ },
		func(m *store.Message) { m.Records[0].SentTime++ },
		func(m *store.Message) { m.Records[0].Sender++ },
		func(m *store.Message) { m.Records[0].ChannelKey += "x" },
		func(m *store.Message) { m.Records[0].MsgID += "x" },
		func(m *store.Message) { m.Records[0].UserID += "x" },
		func(m *store.Message) { m.Records[0].SenderID += "x" },
		func(m *store.Message) { m.Records[0].Params = json.RawMessage(`{"other":1}`) },
		func(m *store.Message) { m.Records[0].Error = &store.RecordError{Code: 1, Message: "other"} },
	}
	for i, change := range others {
		old := randomMessage(rng)
		old.Records = append(old.Records, store.Record{Type: store.RecordTargetValid})
		raw, err := appendMessage(nil, &old)
		if err != nil {
			t.Fatal(err)
		}
		next := cloneMessage(old)
		change(&next)
		if _, ok := spliceMessage(raw, &old, &next); ok {
			t.Errorf("change %d spliced", i)
		}
	}
	old := store.Message{State: store.StatePending}
	next := store.Message{State: store.StateDelivered, Records: []store.Record{{Type: store.RecordDeliverySuccess}}}
	raw, _ := appendMessage(nil, &old)
	if _, ok := spliceMessage(raw, &old, &next); ok {
		t.Error("spliced into records stored as null")
	}
	// A value that is not what appendMessage made of old is refused.
	old = randomMessage(rng)
	next = cloneMessage(old)
	next.State = store.StateDelivered
	raw, _ = appendMessage(nil, &old)
	for _, bad := range [][]byte{raw[:len(raw)-1], []byte(`{"id":1}`), append([]byte(nil), raw[:len(raw)/2]...)} {
		if _, ok := spliceMessage(bad, &old, &next); ok {
			t.Errorf("spliced into %s", bad)
		}
	}
}

// TestAckWriteStoresAppendMessage runs the PUBACK's update through
// UpdateMessages on cached messages of many shapes (the spliced path) and
// on the same messages read from Pebble (encoded whole), and checks that
// both store appendMessage's bytes of the updated message, and that an
// update that fails or changes records in place leaves the cached message
// as it was.
func TestAckWriteStoresAppendMessage(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, cached := range []bool{true, false} {
		s, must := openTestApp(t, "dev-1")
		ctx := context.Background()
		var ids []int64
		var want []store.Message
		for i := range 200 {
			m := randomMessage(rng)
			m.ID, m.AppKey, m.DeviceName, m.State, m.ExpireTime = int64(i+1), "app", "dev-1", store.StatePending, 1<<40
			m.Records = append(m.Records, store.Record{Type: store.RecordTargetValid, Error: &store.RecordError{Code: 1, Message: "e"}})
			m = roundTrip(t, m) // as the cache's checks decode it
			must(s.CreateMessage(ctx, m, 0, nil))
			if !cached {
				s.msgs.drop(m.ID)
			}
			ids = append(ids, m.ID)
			m.State = store.StateDelivered
			m.Records = append(m.Records, store.Record{Type: store.RecordDeliverySuccess, SentTime: int64(i)})
			want = append(want, m)
		}
		// A failing update that changed the records' errors first.
		spoil := func(m *store.Message) error {
			m.Records[len(m.Records)-1].Error.Message = "spoilt"
			return errors.New("no")
		}
		var ups []store.MessageUpdate
		for i, id := range ids {
			ups = append(ups, store.MessageUpdate{AppKey: "app", ID: id, Fn: spoil}, store.MessageUpdate{AppKey: "app", ID: id, Fn: func(m *store.Message) error {
				m.State = store.StateDelivered
				m.Records = append(m.Records, store.Record{Type: store.RecordDeliverySuccess, SentTime: int64(i)})
				return nil
			}})
		}
		errs, err := s.UpdateMessages(ctx, ups)
		must(err)
		for i, e := range errs {
			if (e != nil) != (i%2 == 0) {
				t.Fatalf("update %d: %v", i, e)
			}
		}
		for i, id := range ids {
			raw, err := s.get(msgKey(id))
			must(err)
			enc, err := appendMessage(nil, &want[i])
			must(err)
			if string(raw) != string(enc) {
				t.Fatalf("cached %v: message %d stored as\n %s\nwant\n %s", cached, id, raw, enc)
			}
		}
	}
}

// roundTrip returns m encoded and decoded.
func roundTrip(t *testing.T, m store.Message) store.Message {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out store.Message
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSpliceSeesEveryField changes each field of a message and of its
// records in turn, found by reflection, so that a field added to
// store.Message or store.Record and not to onlyStateAndRecords fails
// here instead of being dropped by the splice of an ack write.
func TestSpliceSeesEveryField(t *testing.T) {
	base := func() store.Message {
		return store.Message{ID: 1, AppKey: "app", DeviceName: "dev", Body: "b", TTL: 60, TimeCreate: 2,
			ExpireTime: 3, State: store.StatePending, Records: []store.Record{{Type: store.RecordTargetValid}}}
	}
	change := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 7)
		case reflect.Slice: // json.RawMessage
			v.SetBytes([]byte(`{"x":1}`))
		case reflect.Pointer: // *RecordError
			v.Set(reflect.New(v.Type().Elem()))
		default:
			t.Fatalf("no change for a field of kind %s: extend this test and onlyStateAndRecords", v.Kind())
		}
	}
	mt := reflect.TypeFor[store.Message]()
	for i := range mt.NumField() {
		name := mt.Field(i).Name
		if name == "State" || name == "Records" {
			continue
		}
		old, next := base(), base()
		change(reflect.ValueOf(&next).Elem().Field(i))
		if onlyStateAndRecords(&old, &next) {
			t.Errorf("a change of Message.%s passes as a state-and-records change", name)
		}
	}
	rt := reflect.TypeFor[store.Record]()
	for i := range rt.NumField() {
		old, next := base(), base()
		next.Records = []store.Record{old.Records[0]}
		change(reflect.ValueOf(&next.Records[0]).Elem().Field(i))
		if onlyStateAndRecords(&old, &next) {
			t.Errorf("a change of Record.%s passes as a state-and-records change", rt.Field(i).Name)
		}
	}
}
