package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// serveEnviron is this process's environment without the DEVMSG_
// variables that are the tests' own knobs (DEVMSG_TEST_REDIS,
// DEVMSG_CRASH_CYCLES...), which devmsg serve would refuse as unknown
// configuration keys: the environment a user's shell would give it.
func serveEnviron() []string {
	cfg := defaultConfig()
	var known []string
	for _, l := range configLeaves(&cfg) {
		known = append(known, l.env)
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "DEVMSG_") && !slices.Contains(known, name) && !slices.Contains(otherEnv, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// TestUnknownEnvRefused: a DEVMSG_ variable that is no configuration key
// stops devmsg serve naming it, with the key it is likely a typo of; the
// variables of devmsg's other tools are left alone.
func TestUnknownEnvRefused(t *testing.T) {
	for _, c := range []struct {
		name, env string
		want      []string // nil: accepted
	}{
		{"typo", "DEVMSG_HTTP_ADRR=:9000", []string{"DEVMSG_HTTP_ADRR is not a configuration key", "did you mean DEVMSG_HTTP_ADDR?"}},
		{"missing underscore", "DEVMSG_NODEID=2", []string{"DEVMSG_NODEID", "did you mean DEVMSG_NODE_ID?"}},
		{"far from any key", "DEVMSG_COLOUR=blue", []string{"DEVMSG_COLOUR is not a configuration key; devmsg serve --help"}},
		{"file-only key", "DEVMSG_APPS=x", []string{"DEVMSG_APPS: apps is set in the config file only"}},
		{"the client tools' secret", "DEVMSG_MASTER_SECRET=s", nil},
		{"another program's variable", "HTTP_ADRR=x", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadConfig([]string{"--data_dir", t.TempDir()}, []string{c.env})
			if c.want == nil {
				if err != nil {
					t.Fatalf("%s: %v", c.env, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s was accepted", c.env)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
