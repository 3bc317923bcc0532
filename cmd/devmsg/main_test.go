package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// TestUsage: devmsg --help, devmsg alone and devmsg with an unknown
// subcommand list every public subcommand with what it does.
func TestUsage(t *testing.T) {
	lines := map[string]*regexp.Regexp{}
	for _, name := range []string{"serve", "sim", "events", "bench", "version"} {
		lines[name] = regexp.MustCompile(`(?m)^  ` + name + ` +\S.{10,}$`)
	}
	check := func(what, out string) {
		t.Helper()
		for name, re := range lines {
			if !re.MatchString(out) {
				t.Errorf("%s: no line describing %s in:\n%s", what, name, out)
			}
		}
		if strings.Contains(out, "bench-client") {
			t.Errorf("%s: lists the internal bench-client:\n%s", what, out)
		}
	}

	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("--help: %v", err)
	}
	check("--help", stdout.String())

	stdout.Reset()
	if err := run(context.Background(), nil, io.Discard, &stdout); !errors.Is(err, errUsage) {
		t.Fatalf("no subcommand: %v", err)
	}
	check("no subcommand", stdout.String())

	stderr.Reset()
	if err := run(context.Background(), []string{"nope"}, io.Discard, &stderr); !errors.Is(err, errUsage) {
		t.Fatalf("unknown subcommand: %v", err)
	}
	if !strings.Contains(stderr.String(), `unknown subcommand "nope"`) {
		t.Errorf("an unknown subcommand is not named:\n%s", stderr.String())
	}
	check("unknown subcommand", stderr.String())
}

func TestVersionOf(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"go install module@version", debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: settings("vcs.revision", rev)}, "v1.2.3"},
		{"clean checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", rev, "vcs.modified", "false")}, "0123456789ab"},
		{"modified checkout", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", rev, "vcs.modified", "true")}, "0123456789ab-dirty"},
		{"nothing known", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
	} {
		if got := versionOf(&tc.info); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestVersionLinkedIn: a version given with -X main.version wins over
// the build info.
func TestVersionLinkedIn(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v9.9.9"
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, io.Discard); err != nil || out.String() != "devmsg v9.9.9\n" {
		t.Fatalf("version: %v %q", err, out.String())
	}
}
