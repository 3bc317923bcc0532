.PHONY: run build test test-race lint bench

run:
	go run ./cmd/devmsg serve

build:
	go build -o devmsg ./cmd/devmsg

test:
	go test -count=1 -timeout 20m ./...

test-race:
	go test -count=1 -race -timeout 30m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet ./...
	@if command -v golangci-lint >/dev/null; then golangci-lint run ./...; else echo "golangci-lint not installed; skipped"; fi

bench:
	go run ./cmd/devmsg bench
