# NCCL watchdog. `make demo` and `make test` are the two entry points (see README.md).
GO        ?= go
BIN       := bin
TESTFLAGS ?= -race -count=1 -timeout 15m
FUZZTIME  ?= 60s

.PHONY: build test lint demo bench-parse fuzz-short clean

build:
	$(GO) build -o $(BIN)/watchdog ./cmd/watchdog

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: lint
	$(GO) test $(TESTFLAGS) ./...
	CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/watchdog

# Until the live demo lands, the demo is the post-mortem analysis of real captures.
demo: build
	@for c in silent crash mismatch_op multicomm_silent; do \
	  echo "== watchdog analyze testdata/captures/nccl-2.28.9-2xH200/$$c"; \
	  $(BIN)/watchdog analyze testdata/captures/nccl-2.28.9-2xH200/$$c || exit 1; echo; done

# Parser throughput and allocations on a >=100 MB log of real capture lines, against grep.
bench-parse:
	@mkdir -p $(BIN)
	$(GO) test -run '^$$' -bench . -benchmem ./logparse/
	$(GO) run ./internal/benchparse -mb 128

# Every fuzz target of every parser for FUZZTIME each.
fuzz-short:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

clean:
	rm -rf $(BIN)
