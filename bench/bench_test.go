package bench

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunSmall runs every workload briefly against a real server started
// from the built binary; it checks the report, not the speed.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := filepath.Join(t.TempDir(), "devmsg")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/devmsg").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	err := Run(context.Background(), Options{
		Binary: bin, Devices: 20, Concurrency: 4, Duration: 500 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Rate: 200, Workloads: []string{"send", "property", "send-latency", "property-latency"}, Markdown: true,
	}, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"send ", "property ", "send-latency", "property-latency", "| workload |", "errors 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
