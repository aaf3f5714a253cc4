# swml-rdma — run `make help` for the targets.
GO      ?= go
BIN     ?= bin/swml-rdma
FUZZTIME ?= 30s
PKGS    := ./...

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the swml-rdma CLI (pure Go, userspace NIC) into bin/.
	$(GO) build -o $(BIN) ./cmd/swml-rdma

.PHONY: build-ibverbs
build-ibverbs: ## Build with the cgo libibverbs backend (needs libibverbs-dev).
	$(GO) build -tags ibverbs -o $(BIN) ./cmd/swml-rdma

.PHONY: build-nocgo
build-nocgo: ## Check that everything builds with CGO_ENABLED=0.
	CGO_ENABLED=0 $(GO) build $(PKGS)

.PHONY: test
test: ## The full test command of README.md (installs what it needs as root).
	scripts/test.sh

.PHONY: unit
unit: ## Only `go test -race` (no installs, no QEMU).
	$(GO) test -race -count=1 $(PKGS)

.PHONY: interop soft-roce
interop soft-roce: ## Soft-RoCE (rxe) interop scenarios in a QEMU guest.
	testbed/soft-roce/qemu/harness.sh all

.PHONY: bench
bench: ## Go benchmarks (ratios against baselines; see docs/benchmarks.md).
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(PKGS)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 30s) each.
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

.PHONY: lint
lint: ## gofmt and go vet (also with -tags ibverbs when libibverbs-dev is present).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	@if [ -f /usr/include/infiniband/verbs.h ]; then $(GO) vet -tags ibverbs $(PKGS); fi

.PHONY: clean
clean: ## Remove build outputs and test caches.
	rm -rf bin
	$(GO) clean -testcache

P4_SRC   := p4/rdma_switch/rdma_switch.p4
P4_BUILD ?= build/p4
P4FLAGS  ?=

.PHONY: p4
p4: ## Compile p4/rdma_switch with bf-p4c (Intel P4 Studio) into build/p4, with its P4Info.
	@BFP4C=$$(command -v bf-p4c || command -v p4c-barefoot || \
	  { [ -n "$$SDE_INSTALL" ] && [ -x "$$SDE_INSTALL/bin/bf-p4c" ] && echo "$$SDE_INSTALL/bin/bf-p4c"; } || \
	  { [ -n "$$SDE" ] && [ -x "$$SDE/install/bin/bf-p4c" ] && echo "$$SDE/install/bin/bf-p4c"; }); \
	if [ -z "$$BFP4C" ]; then \
	  echo "make p4: no Tofino compiler (bf-p4c / p4c-barefoot) on PATH or under \$$SDE_INSTALL/bin or \$$SDE/install/bin."; \
	  echo "  Install Intel P4 Studio (Tofino SDE 9.x), then: source \$$SDE/set_sde.bash && make p4"; \
	  echo "  Nothing was compiled."; \
	  exit 0; \
	fi; \
	mkdir -p $(P4_BUILD) && \
	"$$BFP4C" --target tofino --arch tna --std p4-16 -o $(P4_BUILD) \
	  --p4runtime-files $(P4_BUILD)/p4info.txt --p4runtime-force-std-externs \
	  $(P4FLAGS) $(P4_SRC) && \
	echo "make p4: compiled into $(P4_BUILD); P4Info: $(P4_BUILD)/p4info.txt"
