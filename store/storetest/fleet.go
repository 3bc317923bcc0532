package storetest

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/devmsg/devmsg/store"
)

// fleetTests are the cases of RunTests for tags, batch sends and
// broadcasts (DESIGN.md section 8).
var fleetTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"ListTagged", testListTagged},
	{"TagIndexFollowsWrites", testTagIndexFollowsWrites},
}

// tagged creates the app's devices, each name with its tags.
func tagged(t *testing.T, s store.Store, app string, devs map[string][]string) {
	t.Helper()
	var list []store.Device
	for _, n := range slices.Sorted(maps.Keys(devs)) {
		list = append(list, store.Device{Name: n, Secret: "s", TimeCreate: 1, Tags: devs[n]})
	}
	errs, err := s.CreateDevices(context.Background(), app, list)
	must(t, err)
	for _, e := range errs {
		must(t, e)
	}
}

// listTagged reads every page of the tag's devices, limit at a time.
func listTagged(t *testing.T, s store.Store, app, tag string, limit int) []string {
	t.Helper()
	var out []string
	cursor := ""
	for range 100 {
		p, err := s.ListTagged(context.Background(), app, tag, cursor, limit)
		must(t, err)
		if len(p.Devices) > limit {
			t.Fatalf("page of %d devices, limit %d", len(p.Devices), limit)
		}
		for _, d := range p.Devices {
			if !slices.Contains(d.Tags, tag) {
				t.Fatalf("ListTagged(%s) returned %s with tags %v", tag, d.Name, d.Tags)
			}
		}
		out = append(out, names(p.Devices)...)
		if p.Next == "" {
			return out
		}
		cursor = p.Next
	}
	t.Fatal("ListTagged never ended")
	return nil
}

func testListTagged(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.CreateApp(ctx, store.App{Key: "k1"}))
	must(t, s.CreateApp(ctx, store.App{Key: "k2"}))
	tagged(t, s, "k1", map[string][]string{
		"dev-a": {"floor:1", "lamp"}, "dev-b": {"lamp"}, "dev-c": nil,
		"dev-d": {"lamp", "x@y.z"}, "dev-e": {"floor:1"},
	})
	tagged(t, s, "k2", map[string][]string{"dev-a": {"lamp"}, "dev-z": {"lamp"}})
	d, err := s.GetDevice(ctx, "k1", "dev-d")
	must(t, err)
	if !slices.Equal(d.Tags, []string{"lamp", "x@y.z"}) {
		t.Fatalf("stored tags %v", d.Tags)
	}
	for _, limit := range []int{1, 2, 3, 10} {
		if got := listTagged(t, s, "k1", "lamp", limit); !slices.Equal(got, []string{"dev-a", "dev-b", "dev-d"}) {
			t.Fatalf("limit %d: lamp devices of k1 %v", limit, got)
		}
	}
	if got := listTagged(t, s, "k1", "floor:1", 5); !slices.Equal(got, []string{"dev-a", "dev-e"}) {
		t.Fatalf("floor:1 devices %v", got)
	}
	if got := listTagged(t, s, "k2", "lamp", 5); !slices.Equal(got, []string{"dev-a", "dev-z"}) {
		t.Fatalf("k2 lamp devices %v (apps must not mix)", got)
	}
	if got := listTagged(t, s, "k1", "none", 5); len(got) != 0 {
		t.Fatalf("untagged tag lists %v", got)
	}
	if got := listTagged(t, s, "k1", "lam", 5); len(got) != 0 {
		t.Fatalf("a tag's prefix lists %v", got)
	}
	p, err := s.ListTagged(ctx, "k1", "lamp", "dev-b", 5)
	must(t, err)
	if got := names(p.Devices); !slices.Equal(got, []string{"dev-d"}) || p.Next != "" {
		t.Fatalf("after dev-b: %v next %q", got, p.Next)
	}
}

func testTagIndexFollowsWrites(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.CreateApp(ctx, store.App{Key: "k1"}))
	tagged(t, s, "k1", map[string][]string{"dev-a": {"a", "b"}, "dev-b": {"b"}})
	_, err := s.UpdateDevice(ctx, "k1", "dev-a", func(d *store.Device) error {
		d.Tags = []string{"b", "c"}
		return nil
	})
	must(t, err)
	// A presence write that leaves the tags keeps the index as it is.
	_, err = s.UpdateDevice(ctx, "k1", "dev-b", func(d *store.Device) error {
		d.Status = 1
		return nil
	})
	must(t, err)
	check := func(tag string, want ...string) {
		t.Helper()
		if got := listTagged(t, s, "k1", tag, 10); !slices.Equal(got, want) {
			t.Fatalf("tag %s: %v, want %v", tag, got, want)
		}
	}
	check("a")
	check("b", "dev-a", "dev-b")
	check("c", "dev-a")
	// An error from fn changes nothing.
	_, err = s.UpdateDevice(ctx, "k1", "dev-a", func(d *store.Device) error {
		d.Tags = nil
		return store.ErrVersionConflict
	})
	wantErr(t, "failing update", err, store.ErrVersionConflict)
	check("c", "dev-a")
	must(t, s.DeleteDevice(ctx, "k1", "dev-a"))
	check("b", "dev-b")
	check("c")
	// A new device of the deleted name starts with its own tags only.
	tagged(t, s, "k1", map[string][]string{"dev-a": {"d"}})
	check("b", "dev-b")
	check("d", "dev-a")
}
