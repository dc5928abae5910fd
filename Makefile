# The two commands a new machine needs are `make run` and `make test` (README).
GO      ?= go
BIN     := bin/linger
OUT     := out
PKGS    := ./...
NPM     ?= npm
# The Jupyter client test (test/jupyter) runs @jupyterlab/services under
# Node; npm ci writes this file last, so it marks a finished install.
JS_DEPS := test/jupyter/node_modules/.package-lock.json

.PHONY: run demo test bench build check-fmt check-generated fuzz clean

build:
	$(GO) build -o $(BIN) ./cmd/linger

# The main job: the notebook server on a copy of the repository's scenario
# notebooks (examples/*.ipynb, not the example gateway beside them, copied
# once into out/notebooks, so that running and saving them leaves the
# repository's files alone; remove out/notebooks for a fresh copy), with the kernels' traces in out/traces. It prints its URL
# with the token (open it, or point a Jupyter client at it); Ctrl-C stops
# it and its kernels. ADDR=127.0.0.1:0 picks a free port.
ADDR    ?= 127.0.0.1:8888
NOTEBOOKS := $(OUT)/notebooks
run: build
	@mkdir -p $(OUT)/traces
	@[ -d $(NOTEBOOKS) ] || { mkdir -p $(NOTEBOOKS) && cp examples/*.ipynb $(NOTEBOOKS)/ && echo "copied examples/*.ipynb into $(NOTEBOOKS)"; }
	$(BIN) serve --dir $(NOTEBOOKS) --addr $(ADDR) --trace-dir $(OUT)/traces

# The engine on its own: a 128K-token request on a qwen2-1.5b-shaped model on
# the meta device (exact accounting, no compute), then a real generation on
# the cpu device; each writes a trace.
demo: build
	@mkdir -p $(OUT)
	$(BIN) generate --model qwen2-1.5b --device meta --prompt-tokens 131072 --chunk-size 2048 --max-new-tokens 16 --trace $(OUT)/qwen2-1.5b-128k.ltrace
	$(BIN) generate --model small --device cpu --prompt "Memory that outlives its scope is memory that lingers." --max-new-tokens 24 --trace $(OUT)/small-cpu.ltrace

# The example gateway (docs/gateway.md) for a person to try: bin/gateway
# with a redis-server beside it (127.0.0.1:$(REDIS_PORT), nothing kept on
# disk) and a Linger server receiving its probe, all on 127.0.0.1; it
# prints the URLs and a linger load command. GATEWAY_FLAGS="" runs the
# fixed gateway (default: --leaky, every leak on). Ctrl-C stops all three.
GATEWAY_FLAGS ?= --leaky
REDIS_PORT    ?= 6380
.PHONY: gateway
gateway: build
	$(GO) build -o bin/gateway ./examples/gateway/cmd/gateway
	@command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server; }
	GATEWAY_FLAGS="$(GATEWAY_FLAGS)" REDIS_PORT=$(REDIS_PORT) bash scripts/gateway.sh

test: check-fmt check-generated check-ui $(JS_DEPS) browser cuda-check
	$(GO) vet $(PKGS)
	$(GO) test -count=1 $(PKGS)
	$(GO) test -count=1 -race -short ./timeline/... ./engine/alloc/... ./engine/device/... ./engine/tokenizer/...

# The browser tests (test/browser) drive Debian's Chromium; install it when
# missing (as root, as on CI and the development machines). They inject
# axe-core, which npm ci installs as for test/jupyter.
.PHONY: browser
browser: test/browser/node_modules/.package-lock.json
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

test/browser/node_modules/.package-lock.json: test/browser/package.json test/browser/package-lock.json
	$(NPM) ci --prefix test/browser --no-audit --no-fund
	@touch $@

# Installs exactly what package-lock.json pins, again whenever it changes.
$(JS_DEPS): test/jupyter/package.json test/jupyter/package-lock.json
	$(NPM) ci --prefix test/jupyter --no-audit --no-fund
	@touch $@

# CUDA (docs/cuda.md). cmd/linger-cuda is built with the cuda tag against
# the CUDA driver API header and the driver stub libcuda.so from Debian's
# non-free nvidia-cuda-dev, which scripts/cuda-sdk.sh fetches once into
# CUDA_CACHE (about 800 MB downloaded, under 1 MB kept). It runs on a real
# libcuda.so.1, or, in cuda-check, on the fake driver of
# engine/device/cuda/fakecuda (host memory, no GPU). No toolkit, no GPU.
CUDA_CACHE ?= $(if $(LINGER_CUDA_CACHE),$(LINGER_CUDA_CACHE),$(HOME)/.cache/linger/cuda)
CUDA_BIN   := bin/linger-cuda
FAKECUDA   := bin/fakecuda
CUDA_ENV    = eval "$$(bash scripts/cuda-sdk.sh '$(CUDA_CACHE)')" && export CGO_CFLAGS CGO_LDFLAGS

.PHONY: cuda fakecuda cuda-check gpu-bundle
cuda:
	@$(CUDA_ENV) && $(GO) build -tags cuda -o $(CUDA_BIN) ./cmd/linger-cuda

# The fake driver, libcuda.so.1: fakecuda.c; the engine's kernels
# (engine/device/cuda/kernels/linger.cu, the source of the committed PTX)
# compiled for the host with the emulator fakecuda/emu.h (kernels.cc, C++:
# CI installs g++); and a CUDA_ERROR_NOT_SUPPORTED stub for every other
# function the real driver's stub exports.
CXX ?= g++
FAKECUDA_SRC := engine/device/cuda/fakecuda
fakecuda:
	@$(CUDA_ENV) && mkdir -p $(FAKECUDA) && \
	$(CC) -O2 -Wall -fPIC $$CGO_CFLAGS -c $(FAKECUDA_SRC)/fakecuda.c -o $(FAKECUDA)/fakecuda.o && \
	$(CXX) -std=c++17 -O2 -U_FORTIFY_SOURCE -Wall -fPIC -fvisibility=hidden -ffp-contract=off -fno-strict-aliasing \
		-I$(FAKECUDA_SRC) -Iengine/device/cuda/kernels -c $(FAKECUDA_SRC)/kernels.cc -o $(FAKECUDA)/kernels.o && \
	bash $(FAKECUDA_SRC)/gen-stubs.sh '$(CUDA_CACHE)/lib/libcuda.so' $(FAKECUDA)/fakecuda.o >$(FAKECUDA)/stubs.c && \
	$(CC) -O2 -fPIC -c $(FAKECUDA)/stubs.c -o $(FAKECUDA)/stubs.o && \
	$(CXX) -shared -Wl,-soname,libcuda.so.1 -o $(FAKECUDA)/libcuda.so.1 $(FAKECUDA)/fakecuda.o $(FAKECUDA)/kernels.o $(FAKECUDA)/stubs.o -lpthread

# The kernels' PTX (engine/device/cuda/kernels.ptx) is generated by nvcc
# (go generate in engine/device/cuda) and committed: CI has no CUDA
# toolkit. Where nvcc is installed, ptx-check regenerates it into a
# temporary file and fails when the committed one differs, and assembles
# it with ptxas for sm_80 (A100) and sm_90 (H100, H200), as the driver's
# JIT will; elsewhere it says plainly that freshness was not checked.
.PHONY: ptx-check
ptx-check:
	@if ! command -v nvcc >/dev/null; then echo "nvcc not found: PTX freshness NOT checked (CI has no CUDA toolkit)"; exit 0; fi; \
	tmp=$$(mktemp); trap 'rm -f $$tmp' EXIT; \
	bash engine/device/cuda/kernels/gen.sh $$tmp || exit 1; \
	if ! cmp -s $$tmp engine/device/cuda/kernels.ptx; then \
		diff $$tmp engine/device/cuda/kernels.ptx | head -20; \
		echo "engine/device/cuda/kernels.ptx is stale: run 'go generate ./engine/device/cuda' and commit it"; exit 1; \
	fi; \
	for arch in sm_80 sm_90; do ptxas -arch=$$arch engine/device/cuda/kernels.ptx -o $$tmp || { echo "ptxas -arch=$$arch refuses engine/device/cuda/kernels.ptx"; exit 1; }; done; \
	echo "ok  	engine/device/cuda/kernels.ptx	up to date, assembles for sm_80 and sm_90 ($$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/nvcc \1/p'))"

# linger-cuda compiled and linked against the stub, and the cuda device
# and linger-cuda tested on the fake driver. Then every scenario notebook
# on device "cuda" in linger-cuda on the fake (test/scenarios, the /cuda
# subtests): LINGER_REQUIRE_CUDA=1 turns their skip into a failure, and the
# cuda subtests that passed must be as many as the notebooks, so a cuda
# run that did not happen never passes. Last, scripts/gpu-check.sh with its
# full 128K request on the fake driver, given meta's 80 GiB (the script's
# own tests, with a small request and its failures, are in cmd/linger-cuda).
SCENARIOS_LOG := $(FAKECUDA)/scenarios-cuda.log
cuda-check: build cuda fakecuda ptx-check
	@$(CUDA_ENV) && export LD_LIBRARY_PATH=$(CURDIR)/$(FAKECUDA) && \
	$(GO) vet -tags cuda ./engine/device/cuda/... ./cmd/linger-cuda/... && \
	$(GO) test -count=1 -tags cuda ./engine/device/cuda/... ./cmd/linger-cuda/... && \
	$(GO) test -count=1 -race -tags cuda ./engine/device/cuda/... && \
	LD_BIND_NOW=1 $(CUDA_BIN) probe >/dev/null
	@LINGER_REQUIRE_CUDA=1 LINGER_CUDA_BIN=$(CURDIR)/$(CUDA_BIN) LINGER_FAKECUDA_DIR=$(CURDIR)/$(FAKECUDA) \
	$(GO) test -count=1 -v -run '/^cuda$$' ./test/scenarios >$(SCENARIOS_LOG) 2>&1; rc=$$?; \
	want=$$(ls examples/*.ipynb | wc -l); passed=$$(grep -c -- '--- PASS: Test[^ ]*/cuda ' $(SCENARIOS_LOG)); \
	if [ $$rc != 0 ] || [ $$passed != $$want ] || grep -q -- '--- SKIP' $(SCENARIOS_LOG); then \
		cat $(SCENARIOS_LOG); echo "cuda-check: $$passed of $$want scenario notebooks passed on cuda (go test exit $$rc)"; exit 1; \
	fi; \
	echo "ok  	linger/test/scenarios	$$passed scenario notebooks on cuda (fake driver)"
	@LD_LIBRARY_PATH=$(CURDIR)/$(FAKECUDA) LINGER_FAKECUDA_BYTES=85899345920 OUT=$(FAKECUDA)/gpu-check \
	bash scripts/gpu-check.sh >$(FAKECUDA)/gpu-check.log 2>&1 || { cat $(FAKECUDA)/gpu-check.log; echo "cuda-check: scripts/gpu-check.sh failed on the fake driver"; exit 1; }; \
	echo "ok  	scripts/gpu-check.sh	the 128K check on the fake driver: $(FAKECUDA)/gpu-check/gpu-check.md"

# What a lent GPU machine needs to run scripts/gpu-check.sh (docs/cuda.md):
# bin/ with linger, linger-cuda and the script, and not the fake driver.
# Carry bin/ with the working tree; no Go toolchain is needed there.
gpu-bundle: build cuda
	@rm -rf $(FAKECUDA) && cp scripts/gpu-check.sh scripts/gpu_check_torch.py bin/ && \
	echo "bin/ is ready to carry: $$(ls bin | tr '\n' ' ')($$(du -sh bin | cut -f1)); run: bash scripts/gpu-check.sh (or bash bin/gpu-check.sh), results in \$$OUT (./out/gpu-check)"

check-fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_templ.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@$(GO) mod tidy -diff

# Generated code is committed; regenerate and fail on any difference.
# Compares the tree's state before and after, so it works on a dirty tree too.
check-generated:
	@before=$$(git status --porcelain=v1 -uall | sort; git diff | sha256sum); \
	$(GO) generate ./... || exit 1; \
	after=$$(git status --porcelain=v1 -uall | sort; git diff | sha256sum); \
	if [ "$$before" != "$$after" ]; then git status --short; echo "generated files are stale: run 'go generate ./...' and commit the result"; exit 1; fi

# BENCHFLAGS=-benchtime=1x runs each benchmark once (a check that they run).
bench:
	$(GO) test -run='^$$' -bench=. -benchmem $(BENCHFLAGS) $(PKGS)
	node web/ui/bench/timeline.bench.mjs

# Every fuzz target of the module, each for FUZZTIME. go test fuzzes one
# target per run, so this runs them one package and target at a time; the
# targets are found in the source, so a new one is fuzzed too. It goes on
# past a failure and lists the failed targets at the end (go test saved
# each failing input under the package's testdata/fuzz).
FUZZTIME ?= 30s
fuzz:
	@failed=; \
	for f in $$(grep -rl --include='*_test.go' --exclude-dir=node_modules --exclude-dir=testdata '^func Fuzz' . | sort); do \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== $$(dirname $$f) $$t ($(FUZZTIME))"; \
			$(GO) test -run='^$$' -fuzz="^$$t$$" -fuzztime=$(FUZZTIME) $$(dirname $$f) || failed="$$failed $$(dirname $$f):$$t"; \
		done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzzing failed:$$failed"; exit 1; fi

clean:
	rm -rf bin $(OUT)

# The web UI's bundles (web/static/*.js) are built from web/ui/src/*.js by
# esbuild and committed; ui rebuilds them, check-ui rebuilds into a
# temporary directory and fails when the committed ones differ.
# The README's gallery: each scenario notebook run in the notebook page by
# the browser test, its page saved to docs/gallery (committed) at 1600x1000
# and 1366x768, with a trace reopened after idle time and a notebook after
# a restart.
.PHONY: gallery
gallery: browser
	LINGER_GALLERY=1 $(GO) test -count=1 -run 'TestScenarioNotebooks|TestTimelineIdleBreak|TestTimelineFollowsRestart' ./test/browser

.PHONY: ui check-ui
ui:
	$(NPM) ci --prefix web/ui --no-audit --no-fund
	cd web/ui && node build.mjs

check-ui:
	@$(NPM) ci --prefix web/ui --no-audit --no-fund >/dev/null
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	(cd web/ui && node build.mjs $$tmp) || exit 1; \
	stale=0; \
	for n in $$( (cd $$tmp && ls; cd $(CURDIR)/web/static && ls) | grep '\.js$$' | sort -u); do \
		cmp -s $$tmp/$$n web/static/$$n || { echo "web/static/$$n is stale"; stale=1; }; \
	done; \
	if [ $$stale != 0 ]; then echo "run 'make ui' and commit web/static"; exit 1; fi
