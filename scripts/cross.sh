#!/usr/bin/env bash
# Cross-compiles every package and its tests for systems other than Linux
# (go vet type-checks the test files as well): the Linux-only code lives in
# *_linux.go files with *_other.go stubs that return verbs.ErrNotSupported.
# Windows is not a target: registered memory is mmap'ed outside the Go heap
# (verbs/soft/mr.go, verbs/verbstest), and golang.org/x/sys/unix has no
# Mmap there (`GOOS=windows go build ./...` fails on exactly those).
#
#   scripts/cross.sh                 darwin and freebsd
#   CROSS_GOOS="darwin" scripts/cross.sh
set -euo pipefail
cd "$(dirname "$0")/.."

for goos in ${CROSS_GOOS:-darwin freebsd}; do
	echo "cross: GOOS=$goos go build + go vet (packages and tests)"
	GOOS=$goos GOARCH=amd64 CGO_ENABLED=0 go build ./...
	GOOS=$goos GOARCH=amd64 CGO_ENABLED=0 go vet ./...
done
