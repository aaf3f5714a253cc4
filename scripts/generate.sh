#!/usr/bin/env bash
# Regenerates the protobuf code of aggregation/control/switchmlpb with the
# pinned generators (installed into $(go env GOPATH)/bin when missing or of
# another version), or with --check verifies that the committed code is what
# they produce.
#
#   scripts/generate.sh           regenerate in place (make generate)
#   scripts/generate.sh --check   fail if the committed files differ
#
# protoc itself comes from the system (apt-get install protobuf-compiler);
# the committed files were made with libprotoc 3.21.12 (Debian 12). Another
# protoc changes only the "// protoc vX" header line, which --check ignores,
# unless its output differs.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO=v1.36.12     # = google.golang.org/protobuf in go.mod
PROTOC_GEN_GO_GRPC=v1.5.1
PROTOC_WANT=3.21.12
PKG=aggregation/control/switchmlpb

gobin=$(go env GOPATH)/bin
export PATH="$gobin:$PATH"

command -v protoc >/dev/null || { echo "generate: protoc not found: apt-get install protobuf-compiler"; exit 1; }
have=$(protoc --version | awk '{print $2}')
[ "$have" = "$PROTOC_WANT" ] || echo "generate: note: protoc $have, the committed code was made with $PROTOC_WANT"

if [ "$(protoc-gen-go --version 2>/dev/null | awk '{print $2}')" != "$PROTOC_GEN_GO" ]; then
	echo "generate: installing protoc-gen-go $PROTOC_GEN_GO into $gobin"
	go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO"
fi
if [ "v$(protoc-gen-go-grpc --version 2>/dev/null | awk '{print $2}')" != "$PROTOC_GEN_GO_GRPC" ]; then
	echo "generate: installing protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC into $gobin"
	go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC"
fi

gen() { # gen OUTDIR: the //go:generate line of $PKG/generate.go, into OUTDIR
	(cd "$PKG" && protoc --go_out="$1" --go_opt=paths=source_relative \
		--go-grpc_out="$1" --go-grpc_opt=paths=source_relative switchml.proto)
}

if [ "${1:-}" != "--check" ]; then
	gen .
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gen "$tmp"
status=0
for f in switchml.pb.go switchml_grpc.pb.go; do
	strip='/^\/\/[[:space:]-]*protoc[[:space:]]+v/d'
	if ! diff -u <(sed -E "$strip" "$PKG/$f") <(sed -E "$strip" "$tmp/$f") >"$tmp/$f.diff"; then
		echo "generate: $PKG/$f is not what the generators produce from switchml.proto; run make generate and commit:"
		head -40 "$tmp/$f.diff"
		status=1
	fi
done
[ $status = 0 ] && echo "generate: $PKG matches switchml.proto"
exit $status
