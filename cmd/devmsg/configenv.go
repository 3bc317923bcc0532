package main

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// envMasterSecret is the variable devmsg sim and devmsg events read the
// app's master secret from.
const envMasterSecret = "DEVMSG_MASTER_SECRET"

// otherEnv are the DEVMSG_ variables that are not configuration keys of
// devmsg serve: the master secret of the client subcommands, and the
// device settings of the device SDK's example program (sdk/device/example).
var otherEnv = []string{envMasterSecret, "DEVMSG_APP_KEY", "DEVMSG_DEVICE", "DEVMSG_DEVICE_SECRET"}

// checkEnvNames refuses a DEVMSG_ variable that names no configuration
// key, as an unknown key in the YAML file is refused: a typo such as
// DEVMSG_HTTP_ADRR would otherwise leave the default in force unseen.
// The keys are configLeaves', so the known names come from Config
// itself.
func checkEnvNames(leaves []leaf, envs map[string]string) error {
	known := make([]string, 0, len(leaves))
	for _, l := range leaves {
		known = append(known, l.env)
	}
	var bad []string
	for name := range envs {
		if strings.HasPrefix(name, "DEVMSG_") && !slices.Contains(known, name) && !slices.Contains(otherEnv, name) {
			bad = append(bad, name)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	name := bad[0]
	if key, ok := fileOnlyKey(name); ok {
		return fmt.Errorf("config: environment variable %s: %s is set in the config file only", name, key)
	}
	hint := ""
	if near := nearest(name, known); near != "" {
		hint = fmt.Sprintf(" (did you mean %s?)", near)
	}
	return fmt.Errorf("config: environment variable %s is not a configuration key%s; devmsg serve --help lists them all", name, hint)
}

// fileOnlyKey reports whether name is the variable a key marked env:"-"
// (apps) would have.
func fileOnlyKey(name string) (string, bool) {
	t := reflect.TypeFor[Config]()
	for f := range t.Fields() {
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.Tag.Get("env") == "-" && name == "DEVMSG_"+strings.ToUpper(key) {
			return key, true
		}
	}
	return "", false
}

// nearest returns the known name closest to name when it is a likely
// typo of it (at most two letters apart), or "".
func nearest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
