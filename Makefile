# NCCL watchdog. `make demo` and `make test` are the two entry points (see README.md).
GO        ?= go
BIN       := bin
TESTFLAGS ?= -race -count=1 -timeout 15m
FUZZTIME  ?= 60s

.PHONY: build test lint demo bench-parse bench-parse-instr bench-sidecar bench-detector bench-scale fuzz-short clean plugin

build:
	$(GO) build -o $(BIN)/watchdog ./cmd/watchdog

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: lint deploy-check
	$(GO) test $(TESTFLAGS) ./...
	CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/watchdog

# The live demo: embedded etcd, simulated faulty jobs with one sidecar per node, the
# detector and a console notifier (about 25 s); then a post-mortem of a real capture.
demo: build
	$(BIN)/watchdog demo --scenario all
	@echo; echo "== watchdog analyze testdata/captures/nccl-2.28.9-2xH200/silent (a real 2x H200 hang)"
	@$(BIN)/watchdog analyze testdata/captures/nccl-2.28.9-2xH200/silent

# Parser throughput and allocations on a >=100 MB log of real capture lines, against grep.
bench-parse:
	@mkdir -p $(BIN)
	$(GO) test -run '^$$' -bench . -benchmem ./logparse/
	$(GO) run ./internal/benchparse -mb 128

# Instructions per line (callgrind: exact, unlike timings on a shared machine). Needs valgrind.
bench-parse-instr:
	@command -v valgrind >/dev/null || { echo "bench-parse-instr needs valgrind (apt-get install valgrind)"; exit 1; }
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/benchparse ./internal/benchparse
	@base=$$(valgrind --tool=callgrind --callgrind-out-file=/dev/null $(BIN)/benchparse -loop none 2>&1 | awk '/refs:/ {gsub(",","",$$4); print $$4}'); \
	for k in parse observe channel; do \
	  n=$$(valgrind --tool=callgrind --callgrind-out-file=/dev/null $(BIN)/benchparse -loop $$k -n 100000 2>&1 | awk '/refs:/ {gsub(",","",$$4); print $$4}'); \
	  echo "$$k: $$(( (n - base) / 100000 )) instructions per line"; \
	done

# The sidecar under load: 8 simulated ranks x 2,000 collective lines/s for 60 s; prints its
# CPU s/s, peak RSS and etcd writes/s (targets: < 5% of a core, < 64 MiB, <= 1/s).
bench-sidecar: build
	$(GO) run ./internal/benchsidecar --watchdog $(BIN)/watchdog --duration 60s

# Detector evaluation time per cycle for one job of 4,096 ranks x 4 communicators.
bench-detector:
	$(GO) test -run '^$$' -bench Evaluate4096 -benchtime 10x ./detect/live/

# Scale: simulated sidecars of RANKS ranks, embedded etcd, a detector process, a silent rank.
RANKS ?= 4096
bench-scale: build
	$(BIN)/watchdog loadgen --ranks $(RANKS) --json

# Every fuzz target of every parser for FUZZTIME each; a finding fails, Go's deadline flake
# at the end of -fuzztime (no input written) is rerun once.
fuzz-short:
	GO=$(GO) FUZZTIME=$(FUZZTIME) .ci/fuzz-short

clean:
	rm -rf $(BIN)

# The NCCL profiler plugin (profiler/README.md), C built with gcc only, and profdump, a static
# reader of its regions for machines without Go. heartbeat/profile's tests build the plugin
# themselves with the same flags plus -Werror and the sanitizers, so `make test` needs no
# `make plugin` first.
PLUGIN_SO     := $(BIN)/libnccl-profiler-ncclwatch.so
PLUGIN_CFLAGS ?= -std=gnu11 -O2 -g -fPIC -fvisibility=hidden -pthread -Wall -Wextra
plugin: $(PLUGIN_SO) $(BIN)/profdump-linux-amd64

$(PLUGIN_SO): profiler/plugin.c profiler/abi.h profiler/region.h
	@mkdir -p $(BIN)
	gcc $(PLUGIN_CFLAGS) -shared -Wl,-z,nodelete -Wl,--no-undefined -o $@ profiler/plugin.c -ldl

$(BIN)/profdump-linux-amd64: FORCE
	@mkdir -p $(BIN)
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o $@ ./heartbeat/profile/profdump

.PHONY: FORCE
FORCE:

# ---------------------------------------------------------------------------------------
# deploy/: Helm chart, Kubernetes manifests, Prometheus rules, Grafana dashboards, Slurm.
# Tools: helm built from the Go module proxy at a pinned version (get.helm.sh is not
# reachable from CI), cached as bin/helm-<version>; promtool and prometheus from Debian's
# prometheus package (deploy/tools/install-prometheus.sh, root or sudo).
HELM_VERSION := v3.19.5
HELM         := $(BIN)/helm-$(HELM_VERSION)
CHART        := deploy/helm/ncclwatch
K8S_VALUES   := deploy/kubernetes/values-production.yaml
# helm warns on stderr about the chart's symlinks into deploy/grafana and deploy/prometheus.
HELM_QUIET    = 2> >(grep -v "found symbolic link" >&2)

.PHONY: tools promtool deploy-check helm-check rules-check k8s-manifests prom-e2e

$(HELM):
	@mkdir -p $(BIN)/.helm-build
	GOBIN=$(abspath $(BIN))/.helm-build $(GO) install -trimpath \
	  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" \
	  helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(BIN)/.helm-build/helm $@ && rmdir $(BIN)/.helm-build

promtool:
	@deploy/tools/install-prometheus.sh

tools: $(HELM) promtool

# What `make test` runs for deploy/ (the Go checks of deploy/ and of the docs run with
# `go test ./...`): about a minute with the tools in place.
deploy-check: helm-check rules-check prom-e2e

helm-check: $(HELM)
	@bash -c 'set -eo pipefail; \
	  $(HELM) lint --strict $(CHART) $(HELM_QUIET); \
	  $(HELM) lint --strict $(CHART) -f $(K8S_VALUES) $(HELM_QUIET); \
	  $(HELM) template t $(CHART) $(HELM_QUIET) >/dev/null; \
	  $(HELM) template t $(CHART) -f $(K8S_VALUES) --set examplePod.enabled=true,grafanaDashboards.enabled=true $(HELM_QUIET) >/dev/null; \
	  tmp=$$(mktemp -d); trap "rm -rf $$tmp" EXIT; \
	  $(MAKE) -s --no-print-directory k8s-manifests K8S_OUT=$$tmp; \
	  for f in ncclwatch.yaml training-pod.yaml; do \
	    diff -u deploy/kubernetes/$$f $$tmp/$$f || { echo "deploy/kubernetes/$$f is stale: run make k8s-manifests"; exit 1; }; done; \
	  echo "helm lint, helm template: ok; deploy/kubernetes is up to date"'

# deploy/kubernetes/*.yaml are the chart rendered with values-production.yaml.
K8S_OUT ?= deploy/kubernetes
k8s-manifests: $(HELM)
	@bash -c 'set -eo pipefail; \
	  $(HELM) template ncclwatch $(CHART) --namespace ncclwatch -f $(K8S_VALUES) --set examplePod.enabled=false $(HELM_QUIET) > $(K8S_OUT)/ncclwatch.yaml; \
	  $(HELM) template ncclwatch $(CHART) --namespace ncclwatch -f $(K8S_VALUES) --set examplePod.enabled=true \
	    --show-only templates/example-pod.yaml $(HELM_QUIET) > $(K8S_OUT)/training-pod.yaml'

rules-check: promtool
	promtool check rules deploy/prometheus/ncclwatch-rules.yaml
	cd deploy/prometheus && promtool test rules ncclwatch-rules.test.yaml
	@cd deploy/prometheus && out=$$(promtool check config prometheus.example.yaml 2>&1) || { echo "$$out"; exit 1; }; \
	  echo "$$out" | grep -v 'WARNING: file .* does not exist'

# End to end on loopback: the Slurm quick start of docs/quickstart-slurm.md (detector,
# prolog-started sidecars, a simulated faulty job) scraped by Debian's prometheus; waits for
# the incident, then evaluates every dashboard query through Prometheus's HTTP API.
prom-e2e: build promtool
	NCCLWATCH_PROM_E2E=1 WATCHDOG_BIN=$(abspath $(BIN)/watchdog) \
	  $(GO) test -count=1 -timeout 10m -run TestPrometheusEndToEnd -v ./deploy/
