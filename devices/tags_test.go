package devices_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/devmsg/devmsg/devices"
	"github.com/devmsg/devmsg/errdefs"
	"github.com/devmsg/devmsg/store"
)

func TestNormalizeTags(t *testing.T) {
	many := make([]string, devices.MaxTags+1)
	for i := range many {
		many[i] = "t" + strings.Repeat("x", i+1)
	}
	tests := []struct {
		name  string
		tags  []string
		want  []string
		field string // of the error; "" for none
		msg   string
	}{
		{name: "none", tags: nil, want: nil},
		{name: "empty list", tags: []string{}, want: nil},
		{name: "sorted, repeats dropped", tags: []string{"b", "a:1", "b", "x@y.z-_"}, want: []string{"a:1", "b", "x@y.z-_"}},
		{name: "longest", tags: []string{strings.Repeat("a", 64)}, want: []string{strings.Repeat("a", 64)}},
		{name: "at most 20", tags: many[:20], want: many[:20]},
		{name: "too many", tags: many, field: "tags", msg: "tags must hold at most 20 tags, got 21"},
		{name: "empty tag", tags: []string{"a", ""}, field: "tags[1]", msg: "tags[1] must be 1 to 64 characters, got 0"},
		{name: "too long", tags: []string{strings.Repeat("a", 65)}, field: "tags[0]"},
		{name: "space", tags: []string{"a b"}, field: "tags[0]", msg: `tags[0] "a b" has ' '; only letters, digits and - _ . : @ are allowed`},
		{name: "slash", tags: []string{"a/b"}, field: "tags[0]"},
		{name: "non-ASCII", tags: []string{"é"}, field: "tags[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := devices.NormalizeTags("tags", tc.tags)
			if tc.field == "" {
				if err != nil || !slices.Equal(got, tc.want) {
					t.Fatalf("got %v, %v; want %v", got, err, tc.want)
				}
				return
			}
			var iv *errdefs.InvalidError
			if !errors.As(err, &iv) || iv.Field != tc.field || tc.msg != "" && err.Error() != tc.msg {
				t.Fatalf("error %v (field %v), want field %s %q", err, iv, tc.field, tc.msg)
			}
		})
	}
}

func TestSetTags(t *testing.T) {
	svc, st, _ := newService()
	ctx := context.Background()
	st.devices["dev-1"] = store.Device{Name: "dev-1", Tags: []string{"old"}}
	d, err := svc.SetTags(ctx, "app", "dev-1", []string{"z", "a", "z"})
	if err != nil || !slices.Equal(d.Tags, []string{"a", "z"}) || !slices.Equal(st.devices["dev-1"].Tags, []string{"a", "z"}) {
		t.Fatalf("set: %v %v %v", d.Tags, err, st.devices["dev-1"].Tags)
	}
	if d, err = svc.SetTags(ctx, "app", "dev-1", nil); err != nil || d.Tags != nil {
		t.Fatalf("clear: %v %v", d.Tags, err)
	}
	var nf *errdefs.NotFoundError
	if _, err := svc.SetTags(ctx, "app", "dev-9", []string{"a"}); !errors.As(err, &nf) {
		t.Fatalf("unknown device: %v", err)
	}
	var iv *errdefs.InvalidError
	if _, err := svc.SetTags(ctx, "app", "dev-1", []string{"a b"}); !errors.As(err, &iv) || st.devices["dev-1"].Tags != nil {
		t.Fatalf("bad tag: %v, stored %v", err, st.devices["dev-1"].Tags)
	}
}
