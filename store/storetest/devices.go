package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

func testCreateDevices(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app", "taken")
	tests := []struct {
		name  string
		input []store.Device
		want  []error
	}{
		{"mixed", []store.Device{
			{Name: "new-1", Secret: "a"}, {Name: "taken", Secret: "b"}, {Name: "new-2", Secret: "c"}, {Name: "new-1", Secret: "d"},
		}, []error{nil, store.ErrAlreadyExists, nil, store.ErrAlreadyExists}},
		{"all taken", []store.Device{{Name: "taken"}, {Name: "new-1"}}, []error{store.ErrAlreadyExists, store.ErrAlreadyExists}},
		{"repeat of a new name", []store.Device{{Name: "x", Secret: "1"}, {Name: "x"}, {Name: "x"}}, []error{nil, store.ErrAlreadyExists, store.ErrAlreadyExists}},
		{"empty", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs, err := s.CreateDevices(ctx, "app", tc.input)
			must(t, err)
			if len(errs) != len(tc.want) {
				t.Fatalf("%d results, want %d", len(errs), len(tc.want))
			}
			for i := range tc.want {
				if (tc.want[i] == nil) != (errs[i] == nil) || !errors.Is(errs[i], tc.want[i]) {
					t.Errorf("result %d: %v, want %v", i, errs[i], tc.want[i])
				}
			}
		})
	}
	d, err := s.GetDevice(ctx, "app", "new-1")
	must(t, err)
	want := store.Device{AppKey: "app", Name: "new-1", Secret: "a"}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("the first new-1 wins and gets the app key: %+v, want %+v", d, want)
	}
	if d, _ := s.GetDevice(ctx, "app", "x"); d.Secret != "1" {
		t.Errorf("the first x wins: %+v", d)
	}
	if d, _ := s.GetDevice(ctx, "app", "taken"); d.Secret != "secret-taken" {
		t.Errorf("existing device overwritten: %+v", d)
	}
	for _, name := range []string{"new-1", "new-2", "x"} {
		sh, err := s.GetShadow(ctx, "app", name)
		must(t, err)
		if sh.LastDesiredVersion != 1 || sh.Properties == nil || len(sh.Properties) != 0 || sh.LastReportedVersion != 0 {
			t.Errorf("new shadow of %s: %+v, want store.NewShadow()", name, sh)
		}
	}
}

func testDevicesScoped(t *testing.T, s store.Store) {
	ctx := context.Background()
	mustDevices(t, s, "app-a", "dev-1")
	_, err := s.GetDevice(ctx, "app-b", "dev-1")
	wantErr(t, "app-b gets app-a's device", err, store.ErrNotFound)
	_, err = s.GetShadow(ctx, "app-b", "dev-1")
	wantErr(t, "app-b gets app-a's shadow", err, store.ErrNotFound)
	wantErr(t, "app-b updates app-a's device", replaceDevice(ctx, s, store.Device{AppKey: "app-b", Name: "dev-1"}), store.ErrNotFound)
	_, err = s.SetDesired(ctx, update("app-b", "dev-1", 1, `{"p":1}`), 0, nil)
	wantErr(t, "app-b sets app-a's device", err, store.ErrNotFound)

	// The same name in another app is a different device.
	mustDevices(t, s, "app-b", "dev-1")
	_, err = s.SetDesired(ctx, update("app-b", "dev-1", 1, `{"p":1}`), 0, nil)
	must(t, err)
	if sh, _ := s.GetShadow(ctx, "app-a", "dev-1"); sh.LastDesiredVersion != 1 {
		t.Fatalf("app-b's update reached app-a's shadow: %+v", sh)
	}
	must(t, s.CreateMessage(ctx, msg(1, "app-a", "dev-1", store.StatePending), 0, nil))
	_, err = s.GetMessage(ctx, "app-b", 1)
	wantErr(t, "app-b reads app-a's message", err, store.ErrNotFound)
	if err := checkPending(s, "app-b", "dev-1"); err != nil {
		t.Fatalf("app-b's queue: %v", err)
	}

	// Key parts must not run together: app "app" with device "-a" is not
	// app "app-a", and listing "app" shows only its own device.
	mustDevices(t, s, "app", "-a")
	page, err := s.ListDevices(ctx, "app", "", "", 10)
	must(t, err)
	if got := names(page.Devices); !slices.Equal(got, []string{"-a"}) {
		t.Fatalf("app lists %v", got)
	}
	mustDevices(t, s, "ap", "p-a")
	if page, _ := s.ListDevices(ctx, "ap", "", "", 10); len(page.Devices) != 1 {
		t.Fatalf("app ap lists %v", names(page.Devices))
	}
	// Seq numbers are per app.
	must(t, s.PutSeq(ctx, "app-a", 3, store.SeqEntry{ExpiresAt: future()}))
	must(t, s.PutSeq(ctx, "app-b", 3, store.SeqEntry{ExpiresAt: future()}))
}

func testUpdateDevice(t *testing.T, s store.Store) {
	ctx := context.Background()
	wantErr(t, "update missing", replaceDevice(ctx, s, store.Device{AppKey: "app", Name: "ghost"}), store.ErrNotFound)
	if _, err := s.GetDevice(ctx, "app", "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused update created the device: %v", err)
	}
	mustDevices(t, s, "app", "dev-1")
	d, err := s.GetDevice(ctx, "app", "dev-1")
	must(t, err)
	d.Flag, d.Status, d.ClientIP, d.LastLoginTime, d.LastLogoutTime, d.TimeActive, d.Mark = store.FlagDisabled, 1, "10.0.0.1", 99, 98, 97, "m"
	must(t, replaceDevice(ctx, s, d))
	got, err := s.GetDevice(ctx, "app", "dev-1")
	must(t, err)
	if !reflect.DeepEqual(got, d) {
		t.Fatalf("got %+v, want %+v", got, d)
	}
	// Base info updates leave the shadow alone.
	if sh, _ := s.GetShadow(ctx, "app", "dev-1"); sh.LastDesiredVersion != 1 {
		t.Fatalf("shadow after device update: %+v", sh)
	}
}

func testDeleteDevice(t *testing.T, s store.Store) {
	ctx := context.Background()
	wantErr(t, "delete missing", s.DeleteDevice(ctx, "app", "ghost"), store.ErrNotFound)
	fillDevicesToDelete(t, s)

	must(t, s.DeleteDevice(ctx, "app", "dev-1"))

	checkDeviceGone(t, s)
	checkOtherDevicesKept(t, s)
	checkNameFreeAgain(t, s)
}

// fillDevicesToDelete writes app/dev-1, online with a shadow and messages
// in every state, beside devices it must not take along when deleted.
func fillDevicesToDelete(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	// dev-10 shares dev-1's name as a prefix; "other" has a dev-1 of its own.
	mustDevices(t, s, "app", "dev-1", "dev-10")
	mustDevices(t, s, "other", "dev-1")
	for _, app := range []string{"app", "other"} {
		_, err := s.UpdateDevice(ctx, app, "dev-1", func(d *store.Device) error { d.Status, d.ClientIP = 1, "10.0.0.1"; return nil })
		must(t, err)
		_, err = s.SetDesired(ctx, update(app, "dev-1", 1, `{"p":1}`), 0, nil)
		must(t, err)
	}
	// Three pending (the caller normally fails them first), one delivered,
	// one not queued, and one pending for each of the other devices.
	for id := int64(1); id <= 4; id++ {
		must(t, s.CreateMessage(ctx, msg(id, "app", "dev-1", store.StatePending), 0, nil))
	}
	_, err := s.UpdateMessage(ctx, "app", 4, deliver)
	must(t, err)
	must(t, s.CreateMessage(ctx, msg(5, "app", "dev-1", store.StateFailed), 0, nil))
	must(t, s.CreateMessage(ctx, msg(6, "app", "dev-10", store.StatePending), 0, nil))
	must(t, s.CreateMessage(ctx, msg(7, "other", "dev-1", store.StatePending), 0, nil))
	_, err = s.GetDevice(ctx, "app", "dev-1") // now in the cache of backends that keep one
	must(t, err)
}

// checkDeviceGone checks app/dev-1 is gone after its delete: no device,
// shadow, queue or listing entry, while its messages stay readable.
func checkDeviceGone(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	_, err := s.GetDevice(ctx, "app", "dev-1")
	wantErr(t, "get deleted device", err, store.ErrNotFound)
	_, err = s.GetShadow(ctx, "app", "dev-1")
	wantErr(t, "shadow of deleted device", err, store.ErrNotFound)
	_, err = s.UpdateDevice(ctx, "app", "dev-1", func(*store.Device) error { return nil })
	wantErr(t, "update deleted device", err, store.ErrNotFound)
	_, err = s.SetDesired(ctx, update("app", "dev-1", 2, `{"p":2}`), 0, nil)
	wantErr(t, "set desired of deleted device", err, store.ErrNotFound)
	_, err = s.ReportProperties(ctx, store.Report{AppKey: "app", DeviceName: "dev-1", Properties: map[string]json.RawMessage{"p": json.RawMessage("1")}})
	wantErr(t, "report of deleted device", err, store.ErrNotFound)
	if err := checkPending(s, "app", "dev-1"); err != nil {
		t.Fatalf("queue of the deleted device: %v", err)
	}
	if page, err := s.ListDevices(ctx, "app", "", "", 10); err != nil || !slices.Equal(names(page.Devices), []string{"dev-10"}) {
		t.Fatalf("devices after delete: %v %v", names(page.Devices), err)
	}
	wantErr(t, "second delete", s.DeleteDevice(ctx, "app", "dev-1"), store.ErrNotFound)
	// Its messages stay readable, as they were.
	for id, state := range map[int64]string{1: store.StatePending, 4: store.StateDelivered, 5: store.StateFailed} {
		m, err := s.GetMessage(ctx, "app", id)
		must(t, err)
		if m.DeviceName != "dev-1" || m.State != state || m.Body != fmt.Sprint("body ", id) {
			t.Errorf("message %d after its device was deleted: %+v", id, m)
		}
	}
}

// checkOtherDevicesKept checks a delete of app/dev-1 left other devices
// untouched, the same name in another app included.
func checkOtherDevicesKept(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	if err := checkPending(s, "app", "dev-10", 6); err != nil {
		t.Fatal(err)
	}
	if err := checkPending(s, "other", "dev-1", 7); err != nil {
		t.Fatal(err)
	}
	if d, err := s.GetDevice(ctx, "other", "dev-1"); err != nil || d.Status != 1 {
		t.Fatalf("other/dev-1: %+v %v", d, err)
	}
	if sh, err := s.GetShadow(ctx, "other", "dev-1"); err != nil || sh.LastDesiredVersion != 2 {
		t.Fatalf("other/dev-1 shadow: %+v %v", sh, err)
	}
	// The online index lost the deleted device: only other/dev-1 is reset.
	if n, err := s.ResetPresence(ctx, store.AllNodes, math.MaxInt64, 100, nil); err != nil || n != 1 {
		t.Fatalf("reset %d devices (%v), want 1", n, err)
	}
}

// checkNameFreeAgain checks the deleted app/dev-1's name is free again,
// for a new device with a fresh shadow and an empty queue that holds
// MaxPending messages.
func checkNameFreeAgain(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	errs, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "dev-1", Secret: "new-secret", TimeCreate: 2}})
	must(t, err)
	must(t, errs[0])
	d, err := s.GetDevice(ctx, "app", "dev-1")
	must(t, err)
	if d.Secret != "new-secret" || d.TimeCreate != 2 || d.Status != 0 || d.ClientIP != "" {
		t.Fatalf("re-created device %+v", d)
	}
	sh, err := s.GetShadow(ctx, "app", "dev-1")
	must(t, err)
	if len(sh.Properties) != 0 || sh.LastDesiredVersion != 1 || sh.LastReportedVersion != 0 {
		t.Fatalf("re-created device's shadow %+v", sh)
	}
	if err := checkPending(s, "app", "dev-1"); err != nil {
		t.Fatalf("queue of the re-created device: %v", err)
	}
	for i := int64(1); i <= store.MaxPending; i++ {
		if err := s.CreateMessage(ctx, msg(100+i, "app", "dev-1", store.StatePending), 0, nil); err != nil {
			t.Fatalf("message %d to the re-created device: %v", i, err)
		}
	}
	err = s.CreateMessage(ctx, msg(100+store.MaxPending+1, "app", "dev-1", store.StatePending), 0, nil)
	wantErr(t, fmt.Sprint("message ", store.MaxPending+1, " to the re-created device"), err, store.ErrQueueFull)
}

// testConcurrentDeleteDevice deletes one device from many goroutines:
// exactly one succeeds.
func testConcurrentDeleteDevice(t *testing.T, s store.Store) {
	mustDevices(t, s, "app", "dev-1")
	counts := race(t, 20, func(int) error { return s.DeleteDevice(context.Background(), "app", "dev-1") }, store.ErrNotFound)
	if counts["ok"] != 1 || counts[store.ErrNotFound.Error()] != 19 {
		t.Fatalf("outcomes %v, want 1 ok and 19 not found", counts)
	}
}

func testListDevicesPaging(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 3000
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("dev-%05d", i))
	}
	// Create out of order: listing sorts by name, not by creation.
	shuffled := slices.Clone(all)
	for i := range shuffled {
		j := (i * 7919) % n
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	}
	for i := 0; i < n; i += 1000 {
		mustDevices(t, s, "app", shuffled[i:min(i+1000, n)]...)
	}
	mustDevices(t, s, "app", "dev", "dev-", "deu", "dev.", "zzz")
	mustDevices(t, s, "other", "dev-x", "dev-00001")

	for _, limit := range []int{1, 7, 300, 1000, n, n + 10} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				page, err := s.ListDevices(ctx, "app", "dev-", cursor, limit)
				must(t, err)
				if len(page.Devices) > limit {
					t.Fatalf("page of %d, limit %d", len(page.Devices), limit)
				}
				for _, d := range page.Devices {
					if d.AppKey != "app" {
						t.Fatalf("listed %+v", d)
					}
				}
				got = append(got, names(page.Devices)...)
				if page.Next == "" {
					break
				}
				if len(page.Devices) == 0 || page.Next != page.Devices[len(page.Devices)-1].Name {
					t.Fatalf("next %q after %d devices; want the last returned name", page.Next, len(page.Devices))
				}
				if pages > n {
					t.Fatal("paging does not end")
				}
				cursor = page.Next
			}
			want := append([]string{"dev-"}, all...)
			if !slices.Equal(got, want) {
				t.Fatalf("listed %d devices, want each of %d once in order (first %v)", len(got), len(want), got[:min(5, len(got))])
			}
		})
	}
}

func testListDevicesPrefix(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Names are UTF-8; U+10FFFF has the highest bytes one can hold.
	mustDevices(t, s, "app", "a", "ab", "abc", "abd", "ab-1", "abcd", "ac", "b", "ba", "ÿ", "\U0010ffff", "\U0010ffff\U0010ffff")
	mustDevices(t, s, "app2", "ab", "aba")
	tests := []struct {
		prefix, cursor string
		limit          int
		want           []string
		next           string
	}{
		{"", "", 100, []string{"a", "ab", "ab-1", "abc", "abcd", "abd", "ac", "b", "ba", "ÿ", "\U0010ffff", "\U0010ffff\U0010ffff"}, ""},
		{"ab", "", 10, []string{"ab", "ab-1", "abc", "abcd", "abd"}, ""},
		{"ab", "", 5, []string{"ab", "ab-1", "abc", "abcd", "abd"}, ""}, // exactly the remaining count: no next
		{"ab", "", 2, []string{"ab", "ab-1"}, "ab-1"},
		{"abc", "", 10, []string{"abc", "abcd"}, ""},
		{"abcd", "", 10, []string{"abcd"}, ""},
		{"abce", "", 10, nil, ""},
		{"b", "", 10, []string{"b", "ba"}, ""},
		{"\U0010ffff", "", 10, []string{"\U0010ffff", "\U0010ffff\U0010ffff"}, ""},
		{"ÿ", "", 10, []string{"ÿ"}, ""},
		{"zz", "", 10, nil, ""},
		{"ab", "ab", 1, []string{"ab-1"}, "ab-1"},
		{"ab", "abc", 10, []string{"abcd", "abd"}, ""},
		{"ab", "abd", 10, nil, ""},
		// A cursor need not be a stored name or inside the prefix.
		{"ab", "abb", 10, []string{"abc", "abcd", "abd"}, ""},
		{"ab", "a", 2, []string{"ab", "ab-1"}, "ab-1"},
		{"ab", "b", 10, nil, ""},
		{"ab", "zzz", 10, nil, ""},
		{"", "ac", 10, []string{"b", "ba", "ÿ", "\U0010ffff", "\U0010ffff\U0010ffff"}, ""},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("prefix %q cursor %q limit %d", tc.prefix, tc.cursor, tc.limit), func(t *testing.T) {
			page, err := s.ListDevices(ctx, "app", tc.prefix, tc.cursor, tc.limit)
			must(t, err)
			if got := names(page.Devices); !slices.Equal(got, tc.want) || page.Next != tc.next {
				t.Fatalf("got %q next %q, want %q next %q", got, page.Next, tc.want, tc.next)
			}
		})
	}
	if page, err := s.ListDevices(ctx, "empty-app", "", "", 10); err != nil || len(page.Devices) != 0 || page.Next != "" {
		t.Fatalf("app without devices: %+v %v", page, err)
	}
}

// testCountDevices: the count follows creates (repeats and taken names
// not counted) and deletes, per app, including a count read before the
// writes ("ap" and "app" do not run together).
func testCountDevices(t *testing.T, s store.Store) {
	ctx := context.Background()
	count := func(app string) int64 {
		t.Helper()
		n, err := s.CountDevices(ctx, app)
		must(t, err)
		return n
	}
	if n := count("app"); n != 0 {
		t.Fatalf("empty app counts %d", n)
	}
	mustDevices(t, s, "app", "a", "b", "c")
	mustDevices(t, s, "ap", "p-a")
	if n := count("app"); n != 3 {
		t.Fatalf("app counts %d, want 3", n)
	}
	_, err := s.CreateDevices(ctx, "app", []store.Device{{Name: "d"}, {Name: "a"}, {Name: "d"}})
	must(t, err)
	must(t, s.DeleteDevice(ctx, "app", "b"))
	wantErr(t, "delete missing", s.DeleteDevice(ctx, "app", "b"), store.ErrNotFound)
	if n := count("app"); n != 3 {
		t.Fatalf("after one new device and a delete, app counts %d, want 3", n)
	}
	if n := count("ap"); n != 1 {
		t.Fatalf("ap counts %d, want 1", n)
	}
}
