#!/usr/bin/env bash
# golangci-lint (.golangci.yml: depguard guards the layers of
# docs/architecture.md) at a pinned version, installed into
# $(go env GOPATH)/bin from the Go module proxy when missing or of another
# version; then the check that only verbs/ibverbs and the c-shared
# cmd/libswml use cgo (depguard does not see import "C").
# With libibverbs-dev installed the ibverbs build is linted too.
set -euo pipefail
cd "$(dirname "$0")/.."

GOLANGCI_LINT_VERSION=2.15.0
lint=$(go env GOPATH)/bin/golangci-lint
if ! "$lint" version 2>/dev/null | grep -q "version $GOLANGCI_LINT_VERSION "; then
	echo "lint: installing golangci-lint v$GOLANGCI_LINT_VERSION into $(dirname "$lint") (a few minutes, once)"
	go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$GOLANGCI_LINT_VERSION"
fi
tags=()
[ -f /usr/include/infiniband/verbs.h ] && tags=(--build-tags ibverbs)
"$lint" run --timeout 10m "${tags[@]}" ./...

# cgo: go list names every package with a file that imports "C".
allowed=$'github.com/swml-rdma/swml-rdma/cmd/libswml\ngithub.com/swml-rdma/swml-rdma/verbs/ibverbs'
got=$(CGO_ENABLED=1 go list -tags ibverbs -f '{{if .CgoFiles}}{{.ImportPath}}{{end}}' ./... | sed '/^$/d' | sort)
if [ "$got" != "$allowed" ]; then
	echo "lint: cgo (import \"C\") is allowed only in verbs/ibverbs and cmd/libswml; packages with cgo files:"
	echo "$got"
	exit 1
fi
echo "lint: cgo only in verbs/ibverbs and cmd/libswml"
