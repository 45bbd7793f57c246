# NCCL watchdog. `make demo` and `make test` are the two entry points (see README.md).
GO        ?= go
BIN       := bin
GOFLAGS_T ?= -race -count=1

.PHONY: build test lint
build:
	$(GO) build -o $(BIN)/watchdog ./cmd/watchdog

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: lint
	$(GO) test $(GOFLAGS_T) ./...
