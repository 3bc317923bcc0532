package pebble

import (
	"slices"
	"testing"
)

// TestSeekEachFindsExactlyThePresentKeys: seekEach steps forward instead
// of seeking where it can; it still finds each asked key that is there,
// once per time asked, whatever the order asked, and none that is not:
// adjacent keys, gaps, a key asked twice, keys before the first and past
// the last.
func TestSeekEachFindsExactlyThePresentKeys(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"t/b", "t/c", "t/d", "t/g", "t/h", "u/a"} {
		if err := s.db.Set([]byte(k), []byte("v"+k), nil); err != nil {
			t.Fatal(err)
		}
	}
	asked := []string{"t/h", "t/a", "t/c", "t/b", "t/e", "t/c", "t/d", "t/f", "t/g", "t/z", "t/zz", "t/"}
	keys := make([][]byte, len(asked))
	for i, k := range asked {
		keys[i] = []byte(k)
	}
	var got []string
	err = s.seekEach([]byte("t/"), keys, func(i int, v []byte) error {
		if string(v) != "v"+asked[i] {
			t.Errorf("key %q read %q", asked[i], v)
		}
		got = append(got, asked[i])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"t/b", "t/c", "t/c", "t/d", "t/g", "t/h"}; !slices.Equal(got, want) {
		t.Fatalf("found %q, want %q", got, want)
	}
}
