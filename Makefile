.PHONY: images run build test test-mochi test-race lint bench crash-loop crash-loop-commands crash-loop-events crash-fanout crash-job churn

# `devmsg version` prints this; without git (a source tarball) it stays "dev".
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

run:
	go run ./cmd/devmsg serve

build:
	go build -ldflags "$(LDFLAGS)" -o devmsg ./cmd/devmsg

test: test-mochi
	go test -count=1 -timeout 30m ./...

# The patched mochi-mqtt is a module of its own (third_party/mochi-mqtt,
# see its PATCHES.md), so ./... above does not reach it: its own tests run here.
test-mochi:
	cd third_party/mochi-mqtt && go test -count=1 -timeout 5m ./...

test-race:
	go test -count=1 -race -timeout 30m ./...
	cd third_party/mochi-mqtt && go test -count=1 -race -timeout 10m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet ./...
	@if command -v golangci-lint >/dev/null; then golangci-lint run ./...; else echo "golangci-lint not installed; skipped"; fi

bench:
	go run ./cmd/devmsg bench

# Connection churn: 200,000 connect/subscribe/disconnect cycles from 4 client
# processes on 127.0.0.2-5; the server's RSS, goroutines and heap after a
# forced GC, before and after, which must show that a disconnected device
# leaves nothing behind (docs/operations.md, "Sizing a node for many
# connected devices"; broker's TestChurnLeavesNothingBehind is the CI-sized
# version).
churn:
	go run ./cmd/devmsg bench --workloads churn --churn-cycles $${DEVMSG_CHURN_CYCLES:-200000}

# The long crash loop (CI runs 20 cycles): kill -9 at random points under
# load, counting lost, phantom and duplicated messages; there must be none
# (docs/operations.md: nothing acknowledged is lost, no device holds a
# message devmsg no longer knows, a retried seq_no never makes a copy).
crash-loop:
	DEVMSG_CRASH_CYCLES=$${DEVMSG_CRASH_CYCLES:-200} go test -count=1 -timeout 60m -run TestCrashLoop -v ./cmd/devmsg

# The long kill -9 runs of device commands (CI runs 20 cycles of each): every
# command answered 200 exists after the restarts and ends with its device's
# answer, none reaches a device under a cmd_id devmsg no longer knows or
# under two ids, and every answer devmsg PUBACKed is kept (docs/api.md,
# "Device commands"); on one node (Pebble), and on two nodes sharing Redis
# with the devices' node killed and calls waiting on the other.
crash-loop-commands:
	DEVMSG_CRASH_CYCLES=$${DEVMSG_CRASH_CYCLES:-100} go test -count=1 -timeout 60m -run 'TestCommandCrashLoop$$|TestCommandCrashTwoNodes$$' -v ./cmd/devmsg

# The long kill -9 runs of device events (CI runs 4 cycles of each): devices
# publishing QoS 1 telemetry, every acknowledged event found in the log
# and at the webhook (docs/events.md, "Ordering and delivery"); on one node
# (Pebble) and on two nodes sharing Redis. DEVMSG_TEST_RACE=1 runs the
# served binaries with the race detector (its reports in the files named
# by GORACE="log_path=...").
crash-loop-events:
	DEVMSG_EVENTS_CRASH_CYCLES=$${DEVMSG_EVENTS_CRASH_CYCLES:-100} go test -count=1 -timeout 60m -run 'TestCrashLoopTelemetry|TestCrashTelemetryTwoNodes' -v ./cmd/devmsg

# kill -9 during a broadcast's fan-out (CI runs 5,000 and 3,000 devices): a
# broadcast to 50,000 registered devices, the fanning server killed midway;
# on one node restarted on its data dir, and on two nodes sharing Redis the
# other one taking over. Every device must end with exactly one message
# (docs/api.md, "Broadcast").
crash-fanout:
	DEVMSG_FANOUT_DEVICES=$${DEVMSG_FANOUT_DEVICES:-50000} go test -count=1 -timeout 30m -run 'TestKill9DuringFanout$$|TestClusterFanoutNodeKilled$$' -v ./cmd/devmsg

# kill -9 during a job (CI runs 3,000 and 1,000 devices): a job over 50,000
# devices, the server killed 20 times (once, on two Redis nodes, the node
# running the job); every target must end with exactly one command per
# attempt and the job's counts must equal its executions.
crash-job:
	DEVMSG_JOB_CRASH_TARGETS=$${DEVMSG_JOB_CRASH_TARGETS:-50000} DEVMSG_CRASH_CYCLES=$${DEVMSG_CRASH_CYCLES:-20} go test -count=1 -timeout 60m -run 'TestJobCrashLoop$$|TestClusterJobSurvivesItsNode$$' -v ./cmd/devmsg

# The devmsg image (devmsg:$${VERSION:-dev}, as docker-compose.yml runs it),
# with local stand-ins for the base images when no registry can be reached:
# deploy/images/build.sh, docs/operations.md "docker-compose.yml".
images:
	deploy/images/build.sh
