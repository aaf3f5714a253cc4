package ibverbs

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/swml-rdma/swml-rdma/verbs"
)

// On a machine without RDMA (no /sys/class/infiniband) Open must say so
// with verbs.ErrNotSupported, whatever the build. The rxe paths are covered
// by the QEMU scenarios (testbed/soft-roce/qemu/harness.sh ibv-loopback).
func TestOpenWithoutRDMA(t *testing.T) {
	if _, err := os.Stat("/sys/class/infiniband"); err == nil {
		t.Skip("this kernel has RDMA devices")
	}
	d, err := Open("", netip.MustParseAddr("127.0.0.1"))
	if err == nil {
		d.Close()
		t.Fatal("Open succeeded on a kernel without RDMA")
	}
	if !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("err = %v, want verbs.ErrNotSupported", err)
	}
	if built && !strings.Contains(err.Error(), NoKernelSupport) {
		t.Fatalf("err = %v, want it to say %q", err, NoKernelSupport)
	}
	t.Log(err)
}
