//go:build !cgo

package main

import (
	"fmt"
	"os"
)

// Without cgo there is no C ABI: this stub keeps `CGO_ENABLED=0 go build
// ./...` working.
func main() {
	fmt.Fprintln(os.Stderr, "libswml is a C shared library: build it with cgo, go build -buildmode=c-shared -o bin/libswml.so ./cmd/libswml (make libswml)")
	os.Exit(2)
}
