# swml-rdma — run `make help` for the targets.
GO      ?= go
BIN     ?= bin/swml-rdma
FUZZTIME ?= 30s
PKGS    := ./...
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the swml-rdma CLI (pure Go, userspace NIC) into bin/.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/swml-rdma

.PHONY: build-ibverbs
build-ibverbs: ## Build with the cgo libibverbs backend (needs libibverbs-dev).
	$(GO) build -tags ibverbs -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/swml-rdma

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
lint: ## gofmt, go vet, golangci-lint (pinned; depguard guards the layers) and the cgo check.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	@if [ -f /usr/include/infiniband/verbs.h ]; then $(GO) vet -tags ibverbs $(PKGS); fi
	scripts/lint.sh

.PHONY: cross
cross: ## Build and vet (tests included) for darwin and freebsd (CROSS_GOOS=...).
	scripts/cross.sh

.PHONY: generate
generate: ## Regenerate aggregation/control/switchmlpb from switchml.proto (pinned generators; needs protoc).
	scripts/generate.sh

.PHONY: generate-check
generate-check: ## Check that the committed protobuf code is what the generators produce.
	scripts/generate.sh --check

.PHONY: tidy-check
tidy-check: ## Check that go.mod and go.sum are tidy.
	$(GO) mod tidy -diff

.PHONY: clean
clean: ## Remove build outputs and test caches.
	rm -rf bin
	$(GO) clean -testcache

P4_BUILD ?= build/p4

.PHONY: p4
p4: ## Compile p4/rdma_switch (default, test, 1024 B and 16-bit profiles) with bf-p4c from PATH or P4C= into build/p4, with its P4Info.
	p4/build.sh $(P4_BUILD)

LIBSWML ?= bin/libswml.so

.PHONY: libswml
libswml: ## Build the C ABI (cgo, c-shared) into bin/libswml.so + bin/libswml.h (python/swml loads it).
	$(GO) build -buildmode=c-shared -o $(LIBSWML) ./cmd/libswml

.PHONY: libswml-ibverbs
libswml-ibverbs: ## libswml with the libibverbs NIC as well (needs libibverbs-dev).
	$(GO) build -tags ibverbs -buildmode=c-shared -o $(LIBSWML) ./cmd/libswml

.PHONY: pytorch-test
pytorch-test: ## PyTorch tests: train through the switch with 2 and 4 ranks vs Gloo (needs python3-torch).
	python/tests/run.sh

.PHONY: pytorch-bench
pytorch-bench: ## swml backend vs Gloo all-reduce at 4 ranks, 4/16/64 MiB (docs/pytorch.md).
	python/tests/run.sh bench
