package callback

import (
	"testing"

	"github.com/devmsg/devmsg/store"
)

func TestRouting(t *testing.T) {
	urls := []store.CallbackURL{{URL: "https://a.example/cb", Default: true}, {URL: "https://b.example/cb"}}
	for _, c := range []struct {
		name   string
		cb     store.CallbackSettings
		typ    int
		temp   string
		sends  bool
		target string
	}{
		{"no types chosen: all sent, to the default", store.CallbackSettings{URLs: urls}, 5, "", true, "https://a.example/cb"},
		{"type chosen", store.CallbackSettings{Types: []int{4, 5}, URLs: urls}, 5, "", true, "https://a.example/cb"},
		{"type not chosen", store.CallbackSettings{Types: []int{4}, URLs: urls}, 5, "", false, "https://a.example/cb"},
		{"empty choice sends nothing", store.CallbackSettings{Types: []int{}, URLs: urls}, 0, "", false, "https://a.example/cb"},
		{"a configured temporary URL", store.CallbackSettings{URLs: urls}, 2, "https://b.example/cb", true, "https://b.example/cb"},
		{"an unconfigured temporary URL goes to the default", store.CallbackSettings{URLs: urls}, 2, "https://evil.example/", true, "https://a.example/cb"},
		{"no URLs: nowhere", store.CallbackSettings{}, 2, "https://b.example/cb", true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.cb.Sends(c.typ); got != c.sends {
				t.Errorf("sends = %v, want %v", got, c.sends)
			}
			if got := target(c.cb, c.temp); got != c.target {
				t.Errorf("target = %q, want %q", got, c.target)
			}
		})
	}
}
