package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestControllerReadsCompiledP4Info: `swml-rdma controller --p4info` accepts
// the P4Info bf-p4c writes for p4/rdma_switch (the fixtures in
// aggregation/control/p4rt/testdata, which scripts/p4.sh p4info checks
// against a fresh compile). The run stops at the next step, the missing
// --pipeline file, before any connection: had the P4Info been refused, the
// error would name it instead.
func TestControllerReadsCompiledP4Info(t *testing.T) {
	for _, f := range []string{"p4info.txt", "p4info_1024.txt"} {
		info := filepath.Join("..", "..", "aggregation", "control", "p4rt", "testdata", f)
		_, _, err := run(t, "controller", "--p4runtime", "127.0.0.1:1", "--p4info", info,
			"--switch-mac", "02:00:00:00:00:01", "--switch-ip", "10.0.0.1", "--pipeline", filepath.Join(t.TempDir(), "none.bin"))
		if err == nil || !strings.Contains(err.Error(), "--pipeline") {
			t.Errorf("%s: err = %v, want the --pipeline error (the P4Info loaded)", f, err)
		}
	}
	_, _, err := run(t, "controller", "--p4runtime", "127.0.0.1:1", "--p4info", filepath.Join(t.TempDir(), "none.txt"),
		"--switch-mac", "02:00:00:00:00:01", "--switch-ip", "10.0.0.1")
	if err == nil || !strings.Contains(err.Error(), "P4Info") {
		t.Errorf("missing P4Info: err = %v, want a P4Info error", err)
	}
}
