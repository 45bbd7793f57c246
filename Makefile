# NCCL watchdog. `make demo` and `make test` are the two entry points (see README.md).
GO        ?= go
BIN       := bin
TESTFLAGS ?= -race -count=1 -timeout 15m
FUZZTIME  ?= 60s
# go-nvml's header marks the NVML calls that CUDA 13 deprecates, and cgo's generated wrappers
# call every one of them, so each build of that package prints ~40 deprecation warnings that
# drown real ones. Only that class of warning is silenced (the default -O2 -g kept); the
# watchdog calls none of the deprecated functions (heartbeat/gpu uses their successors).
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: build test lint demo demo-build demo-timing bench bench-parse bench-parse-instr bench-analyze bench-sidecar bench-detector bench-detector-scale bench-scale bench-reconnect bench-logbound fuzz-short clean plugin
.PHONY: bench-plugin-overhead bench-plugin-instr bench-plugin-overhead-dry matrix-bins matrix-dry

# VERSION and REVISION (below): the version (CHANGELOG.md's, deploy/tools/version.sh) and the commit.
build:
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.revision=$(REVISION)" -o $(BIN)/watchdog ./cmd/watchdog

# The files are listed with find, not git ls-files: in a tree without .git (a release
# tarball, a copy) an empty list would leave gofmt reading standard input.
lint:
	$(GO) vet ./...
	@out=$$(find . -name '*.go' -not -path './bin/*' -not -path './.git/*' -print0 | xargs -0 -r gofmt -l); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The tests run the watchdog against the embedded etcd and against Debian's etcd 3.4
# server (etcd34, below): with the Makefile a missing 3.4 server is a failure, not a skip.
# Then the demo's scenarios beside a CPU hog on every core, on their own: a hog beside the
# whole suite would slow every other package's timing tests (internal/demo/hog_test.go).
test: lint deploy-check etcd34
	NCCLWATCH_REQUIRE_ETCD34=1 $(GO) test $(TESTFLAGS) ./...
	NCCLWATCH_HOG_TEST=1 $(GO) test -count=1 -timeout 5m -run '^TestScenariosBesideCPUHog$$' ./internal/demo/
	CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/watchdog

# The live demo: embedded etcd, simulated faulty jobs with one sidecar per node, the
# detector and a console notifier (about 22 s); then a post-mortem of a real capture.
# It runs its own build of the same watchdog, made for a fast first contact on a cold
# cache: without cgo (the demo's GPUs are simulated, so NVML is not needed, and gcc on
# go-nvml's wrappers and std's cgo parts was about 10 s of CPU) and without DWARF (about
# 5 s more): 17 % less CPU than `make build` (README.md, "Two commands"). bin/watchdog, the
# binary for real nodes, is `make build` and keeps both.
DEMO_BIN := $(BIN)/watchdog-demo
demo-build:
	CGO_ENABLED=0 $(GO) build -gcflags=all=-dwarf=false \
	  -ldflags "-s -w -X main.version=$(VERSION) -X main.revision=$(REVISION)" -o $(DEMO_BIN) ./cmd/watchdog

demo: demo-build
	$(DEMO_BIN) demo --scenario all
	@echo; echo "== watchdog analyze testdata/captures/nccl-2.28.9-2xH200/silent (a real 2x H200 hang)"
	@# analyze exits 1 for "findings", which this capture must give: anything else fails.
	@$(DEMO_BIN) analyze testdata/captures/nccl-2.28.9-2xH200/silent; test $$? -eq 1

# The README's first-contact figure: `make demo` timed on a clean clone of HEAD with an empty
# build cache (DEMO_TIMING_MODCACHE=empty: an empty module cache too, so the downloads are
# counted), with the machine's load before and after; the demo's own part is printed apart.
DEMO_TIMING_MODCACHE ?= keep
demo-timing:
	@bash -c 'set -eo pipefail; tmp=$$(mktemp -d); trap "chmod -R u+w $$tmp 2>/dev/null; rm -rf $$tmp" EXIT; \
	  git clone -q "$(CURDIR)" $$tmp/clone; \
	  env=(GOCACHE=$$tmp/gocache); [ "$(DEMO_TIMING_MODCACHE)" = empty ] && env+=(GOMODCACHE=$$tmp/gomod); \
	  echo "cores: $$(nproc); load before: $$(cut -d" " -f1-3 /proc/loadavg); caches: build empty, modules $(DEMO_TIMING_MODCACHE)"; \
	  start=$$(date +%s.%N); \
	  (cd $$tmp/clone && env "$${env[@]}" $(MAKE) -s --no-print-directory demo-build); built=$$(date +%s.%N); \
	  (cd $$tmp/clone && env "$${env[@]}" $(MAKE) -s --no-print-directory demo) > $$tmp/demo.log 2>&1 || { tail -40 $$tmp/demo.log; exit 1; }; \
	  end=$$(date +%s.%N); grep -E "^  (this machine|[a-z-]+ +.*(ok|FAIL|NOT JUDGED))" $$tmp/demo.log || true; \
	  echo "load after: $$(cut -d" " -f1-3 /proc/loadavg)"; \
	  awk -v s=$$start -v b=$$built -v e=$$end "BEGIN { printf \"cold make demo: %.1f s (build %.1f s, demo and analyze %.1f s)\n\", e-s, b-s, e-b }"'

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

# watchdog analyze on a simulated 304-rank job (~300 MB, written once under bin/) against
# xargs -P$(nproc) grep -c opCount over the same files: best of 3 each, and peak RSS
# (targets: <= 2x grep, < 1 GiB; docs/analyze.md).
bench-analyze: build
	$(GO) run ./internal/benchanalyze --watchdog $(BIN)/watchdog --dir $(BIN)/bench-analyze --one-mb 0 --grep-procs $$(nproc) --runs 3

# Issue 31's two ratios in one run beside grep: watchdog analyze on one ~210 MB log (--one-mb 280) against
# grep -c opCount, and on the 304-file folder against xargs -P2 grep -c (grep's time over
# analyze's: target >= 0.5x both, peak RSS < 256 MiB).
# The ratios move with the machine's load (grep on one core, the analysis on all): the load
# averages before and after are printed with them.
bench: build
	@echo "load before: $$(cut -d' ' -f1-3 /proc/loadavg) ($$(nproc) CPUs)"
	$(GO) run ./internal/benchanalyze --watchdog $(BIN)/watchdog --dir $(BIN)/bench-analyze --one $(BIN)/bench-analyze-one/job.log --one-mb 280 --grep-procs 2 --runs 3
	@echo "load after: $$(cut -d' ' -f1-3 /proc/loadavg)"

# The sidecar under load: 8 simulated ranks x 2,000 collective lines/s for 60 s; prints its
# CPU s/s, peak RSS and etcd writes/s (targets: < 5% of a core, < 64 MiB, <= 1/s).
bench-sidecar: build
	$(GO) run ./internal/benchsidecar --watchdog $(BIN)/watchdog --duration 60s

# Detector evaluation time per cycle for one job of 4,096 ranks x 4 communicators.
bench-detector:
	$(GO) test -run '^$$' -bench Evaluate -benchtime 10x ./detect/live/

# Detector CPU per node snapshot decoded (wire form and plain JSON) and per evaluation, at
# 4,096 and 16,384 ranks; and what a node writes per second in each encoding (docs/scale.md).
bench-detector-scale:
	$(GO) test -run '^$$' -bench 'ScaleDecode|Evaluate(4096|16384)$$' -benchtime 2x ./detect/live/
	$(GO) test -run '^$$' -bench Encodings -benchtime 640x ./internal/loadgen/simjob/

# Scale: simulated sidecars of RANKS ranks (in JOBS jobs) in a generator process, embedded
# etcd, REPLICAS detector processes sharing the jobs, a silent rank.
RANKS ?= 4096
JOBS ?= 1
REPLICAS ?= 1
bench-scale: build
	$(BIN)/watchdog loadgen --ranks $(RANKS) --jobs $(JOBS) --replicas $(REPLICAS) --json

# The log bound: a rank writes its NCCL log at 2 MB/s for 5 minutes (NCCL's way: one
# descriptor, no O_APPEND) while a real sidecar keeps it to its header and last 128 MiB;
# prints the disk usage (du) against the bound and the collectives counted
# (docs/log-volume.md). A quick look: make bench-logbound LOGBOUND_DURATION=30s LOGBOUND_KEEP_MIB=16.
LOGBOUND_DURATION ?= 5m
LOGBOUND_KEEP_MIB ?= 128
bench-logbound: build
	$(GO) run ./internal/benchlogbound --watchdog $(BIN)/watchdog --duration $(LOGBOUND_DURATION) --keep-mib $(LOGBOUND_KEEP_MIB)

# etcd outages: a real embedded etcd stopped for 20 s, then started again on the same port
# and data, 3 times; prints how long after its return the sidecar republished, the
# detector was ready again and held a fresh snapshot (target <= 5 s; docs/scale.md).
bench-reconnect:
	$(GO) run ./internal/benchreconnect --outage 20s --runs 3

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

PLUGIN_SRC    := profiler/plugin.c profiler/chain.c
$(PLUGIN_SO): $(PLUGIN_SRC) profiler/abi.h profiler/region.h profiler/internal.h
	@mkdir -p $(BIN)
	gcc $(PLUGIN_CFLAGS) -shared -Wl,-z,nodelete -Wl,--no-undefined -o $@ $(PLUGIN_SRC) -ldl

# The test stand-in for a chained second profiler plugin (profiler/test/standin.c), for the
# device's chain check (e2e/gpu/chain4.sh) and the micro-benchmark's chained figures.
STANDIN_SO := $(BIN)/libnccl-profiler-standin.so
$(STANDIN_SO): profiler/test/standin.c profiler/abi.h
	@mkdir -p $(BIN)
	gcc $(PLUGIN_CFLAGS) -shared -o $@ profiler/test/standin.c

$(BIN)/plugin-microbench: profiler/test/microbench.c profiler/abi.h
	@mkdir -p $(BIN)
	gcc -std=gnu11 -O2 -g -Wall -Wextra -o $@ profiler/test/microbench.c -ldl

# The plugin's cost per call, by event kind, on this CPU (profiler/test/microbench.c; best and
# median of 9 rounds), alone and with the stand-in chained beside it. The GPU side is
# e2e/gpu/overhead4.sh on a 4-GPU machine (e2e/gpu/README.md).
bench-plugin-overhead: $(PLUGIN_SO) $(STANDIN_SO) $(BIN)/plugin-microbench
	@d=$$(mktemp -d); trap 'rm -rf $$d' EXIT; \
	  NCCLWATCH_PROFILER_DIR=$$d $(BIN)/plugin-microbench none 300 9; echo; \
	  NCCLWATCH_PROFILER_DIR=$$d $(BIN)/plugin-microbench $(PLUGIN_SO) 300 9; echo; \
	  NCCLWATCH_PROFILER_DIR=$$d NCCLWATCH_PROFILER_STEPS=0 $(BIN)/plugin-microbench $(PLUGIN_SO) 300 9; echo; \
	  NCCLWATCH_PROFILER_DIR=$$d NCCLWATCH_PROFILER_CHAIN=$(abspath $(STANDIN_SO)) STANDIN_QUIET=1 STANDIN_DIR=$$d \
	    $(BIN)/plugin-microbench $(PLUGIN_SO) 100 5

# The same calls in instructions (callgrind: exact where timings on a shared machine are not).
bench-plugin-instr: $(PLUGIN_SO) $(BIN)/plugin-microbench
	profiler/test/instr.sh $(BIN)/plugin-microbench $(PLUGIN_SO)

# e2e/gpu/overhead4.sh's plumbing here, against the stub torch (no GPU; timings meaningless).
bench-plugin-overhead-dry: $(PLUGIN_SO) $(STANDIN_SO) $(BIN)/profdump-linux-amd64
	DRYRUN=1 OUT=$(BIN)/overhead4-dry bash e2e/gpu/overhead4.sh

# The fault matrix (e2e/gpu/matrix.sh, issue 30): what its device commands carry, and its
# plumbing here against the stub torch (every class once, WARN logs + the plugin, ~7 min on
# 2 cores; MATRIX_ENV / MATRIX_ARGS pick others, e.g. MATRIX_ENV="MODE=info SEED=2").
matrix-bins: $(PLUGIN_SO) $(BIN)/profdump-linux-amd64 $(BIN)/ratelimit.so
	CGO_ENABLED=1 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags="-s -w" -o $(BIN)/watchdog-linux-amd64 ./cmd/watchdog

matrix-dry: matrix-bins
	env DRYRUN=1 OUT=$(BIN)/matrix-dry $(MATRIX_ENV) bash e2e/gpu/matrix.sh $(MATRIX_ARGS)

$(BIN)/ratelimit.so: e2e/gpu/ratelimit/shim.c
	@mkdir -p $(BIN)
	gcc -O2 -shared -fPIC -o $@ $< -ldl -lpthread

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
# helm is kept outside the clone (HELM_CACHE), so that a clean clone on the same machine
# does not build it again: it took most of deploy-check's time on one.
HELM_VERSION := v3.19.5
HELM_CACHE   ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ncclwatch
HELM         := $(HELM_CACHE)/helm-$(HELM_VERSION)
CHART        := deploy/helm/ncclwatch
K8S_VALUES   := deploy/kubernetes/values-production.yaml
# helm warns on stderr about the chart's symlinks into deploy/grafana and deploy/prometheus.
HELM_QUIET    = 2> >(grep -v "found symbolic link" >&2)

.PHONY: etcd34
# Debian's etcd-server package (etcd 3.4) for the tests of internal/etcdexec's users.
etcd34:
	@deploy/tools/install-etcd.sh

.PHONY: tools promtool deploy-check helm-check rules-check rules-check-prom3 k8s-manifests prom-e2e image

$(HELM):
	@mkdir -p $(HELM_CACHE) && tmp=$$(mktemp -d $(HELM_CACHE)/.build-XXXXXX) && \
	  GOBIN=$$tmp $(GO) install -trimpath \
	    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" \
	    helm.sh/helm/v3/cmd/helm@$(HELM_VERSION) && \
	  mv $$tmp/helm $@ && rmdir $$tmp

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
	@# Every render decoded strictly into the Kubernetes types, Pod Security levels checked;
	@# values.schema.json refuses typos and wrong types; the PDB only with 2+ replicas; the
	@# node actions' ClusterRole is exactly what they call.
	NCCLWATCH_HELM=$(abspath $(HELM)) $(GO) test -count=1 \
	  -run '^(TestKubernetesManifests|TestStrictDecoding|TestValuesSchema|TestPodDisruptionBudgetOnlyWithReplicas|TestSidecarCredentials|TestNodeActionsRBAC)$$' ./deploy/

# deploy/kubernetes/*.yaml are the chart rendered with values-production.yaml (without the
# Job that removes the per-job roles at helm uninstall: plain manifests have no hooks).
K8S_OUT ?= deploy/kubernetes
k8s-manifests: $(HELM)
	@bash -c 'set -eo pipefail; \
	  $(HELM) template ncclwatch $(CHART) --namespace ncclwatch -f $(K8S_VALUES) --set examplePod.enabled=false,sidecar.rolesHook.removeAtUninstall=false $(HELM_QUIET) > $(K8S_OUT)/ncclwatch.yaml; \
	  $(HELM) template ncclwatch $(CHART) --namespace ncclwatch -f $(K8S_VALUES) --set examplePod.enabled=true \
	    --show-only templates/example-pod.yaml $(HELM_QUIET) > $(K8S_OUT)/training-pod.yaml'

rules-check: promtool
	promtool check rules deploy/prometheus/ncclwatch-rules.yaml
	cd deploy/prometheus && promtool test rules ncclwatch-rules.test.yaml
	@cd deploy/prometheus && out=$$(promtool check config prometheus.example.yaml 2>&1) || { echo "$$out"; exit 1; }; \
	  echo "$$out" | grep -v 'WARNING: file .* does not exist'

# The container image (deploy/docker/Dockerfile, BuildKit). VERSION and REVISION reach the
# binary as main.version and main.revision and the image as OCI labels. VERSION has one
# source, CHANGELOG.md's newest "## [X.Y.Z]" (version.sh), and is one string everywhere:
# `watchdog --version`, the image tag, the chart's version and appVersion (Chart.yaml is
# checked against it); which commit a build is, is its REVISION.
VERSION  ?= $(shell deploy/tools/version.sh)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE    ?= ghcr.io/ncclwatch/watchdog:$(VERSION)
.PHONY: image image-multiarch chart release-check
image:
	DOCKER_BUILDKIT=1 docker build -f deploy/docker/Dockerfile \
	  --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) -t $(IMAGE) .

# The release image for amd64 and arm64 (Grace Hopper nodes) in one manifest list, pushed
# (a multi-platform image cannot be loaded into a local engine). Needs docker buildx with
# a builder that runs both (docker buildx create --use; QEMU binfmt for the other one):
# each platform's build stage runs natively under it, so cgo (NVML) and the plugin's gcc
# need no cross toolchain. PLATFORMS=linux/arm64 IMAGE_OUTPUT=--load builds one locally.
PLATFORMS    ?= linux/amd64,linux/arm64
IMAGE_OUTPUT ?= --push
image-multiarch:
	docker buildx build --platform $(PLATFORMS) -f deploy/docker/Dockerfile \
	  --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) -t $(IMAGE) $(IMAGE_OUTPUT) .

# The chart packaged with VERSION as its version and appVersion (so its default image tag
# is the image `make image` builds), into bin/.
chart: $(HELM)
	@mkdir -p $(BIN)
	$(HELM) package $(CHART) --version $(VERSION) --app-version $(VERSION) -d $(BIN) $(HELM_QUIET)

# Before tagging vX.Y.Z: CHANGELOG.md has a dated "## [X.Y.Z]" section and Chart.yaml says
# X.Y.Z; at the tag, VERSION is X.Y.Z.
release-check:
	@v=$$(sed -n 's/^## \[\([0-9][0-9.]*\)\] - [0-9-]*$$/\1/p' CHANGELOG.md | head -1); \
	  test -n "$$v" || { echo "CHANGELOG.md: no dated '## [X.Y.Z] - YYYY-MM-DD' section"; exit 1; }; \
	  grep -q "^version: $$v$$" $(CHART)/Chart.yaml && grep -q "^appVersion: \"$$v\"$$" $(CHART)/Chart.yaml || \
	    { echo "$(CHART)/Chart.yaml: version and appVersion must be $$v"; exit 1; }; \
	  echo "release $$v: tag it with git tag -a v$$v; VERSION is now $(VERSION)"

# The same rule checks with promtool of Prometheus 3.x (Debian ships 2.x), built from the
# prometheus module go.mod pins. Not part of deploy-check: the build takes 4 to 6 minutes
# on 2 cores. The module's go.mod has replace directives, so `go install ...@version` is
# refused: it is built inside a copy of the module's source.
PROM3_VERSION = $(shell $(GO) list -m -f '{{.Version}}' github.com/prometheus/prometheus)
PROMTOOL3     = $(BIN)/promtool-$(PROM3_VERSION)
$(BIN)/promtool-v%:
	@mkdir -p $(BIN)
	@bash -c 'set -eo pipefail; \
	  src=$$($(GO) mod download -json github.com/prometheus/prometheus@v$* | sed -n "s/^[[:space:]]*\"Dir\": \"\(.*\)\",$$/\1/p"); \
	  tmp=$$(mktemp -d); trap "chmod -R u+w $$tmp; rm -rf $$tmp" EXIT; cp -r $$src/. $$tmp; chmod -R u+w $$tmp; \
	  cd $$tmp && GOWORK=off $(GO) build -trimpath -o $(abspath $@) ./cmd/promtool'

rules-check-prom3: $(PROMTOOL3)
	$(PROMTOOL3) check rules deploy/prometheus/ncclwatch-rules.yaml
	cd deploy/prometheus && $(abspath $(PROMTOOL3)) test rules ncclwatch-rules.test.yaml

# End to end on loopback: the Slurm quick start of docs/quickstart-slurm.md (detector,
# prolog-started sidecars, a simulated faulty job) scraped by Debian's prometheus; waits for
# the incident, then evaluates every dashboard query through Prometheus's HTTP API.
prom-e2e: build promtool
	NCCLWATCH_PROM_E2E=1 WATCHDOG_BIN=$(abspath $(BIN)/watchdog) \
	  $(GO) test -count=1 -timeout 10m -run TestPrometheusEndToEnd -v ./deploy/
