// Package switchmlpb is the generated Go code for switchml.proto, the
// swml-rdma control plane (package switchml_proto, wire-compatible with
// p4app-switchML plus extensions in field numbers ≥ 100 and the Job
// service). docs/control-plane.md describes every message.
//
// The generated files are committed: building needs no protoc. To
// regenerate after editing switchml.proto, run `make generate`
// (scripts/generate.sh): it installs the pinned protoc-gen-go v1.36.12 (the
// google.golang.org/protobuf version in go.mod) and protoc-gen-go-grpc
// v1.5.1 when missing and runs protoc (apt-get install protobuf-compiler;
// the files were made with libprotoc 3.21.12) as the go:generate line below
// does. scripts/test.sh checks that the committed files are its output.
package switchmlpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative switchml.proto
