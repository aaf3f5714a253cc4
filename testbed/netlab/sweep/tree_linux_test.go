package sweep

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// needTreeLab skips when this process cannot build a lab (not root, ip or tc
// missing).
func needTreeLab(t *testing.T) {
	t.Helper()
	if err := netlab.CheckRoot(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// TestTreeLab runs SwitchML on 4 workers through one switch and through a
// tree of 2 leaves × 2 workers under a spine, unshaped: both rows
// verified, the tree's result bit for bit the flat switch's (the same
// digest, result_reproduced true, docs/switch.md "Switch hierarchy"
// "Sums"), the tree's shape in its row, and no namespace left.
func TestTreeLab(t *testing.T) {
	needTreeLab(t)
	exe := filepath.Join(t.TempDir(), "swml-rdma")
	buildFor(t, exe, "./cmd/swml-rdma")
	const prefix = "swtreet"
	cfg := Config{Workers: []int{4}, Leaves: []int{0, 2}, Rates: []uint64{0}, Losses: []float64{0}, Sizes: []int{256 << 10},
		Systems: []System{SwitchML}, Jobs: 1, Iters: 3, Warmup: 1, Timeout: 2 * time.Minute, Queue: netlab.DefaultQueue,
		PacketSize: 1024, MessageSize: 16 << 10, Exe: exe, Prefix: prefix}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want 2 (one switch, a tree)", len(rep.Rows))
	}
	flat, tree := rep.Rows[0], rep.Rows[1]
	for i, r := range rep.Rows {
		t.Logf("%s: median %v, %d retransmissions, drops %v, digest %.12s…", r.Shape(), time.Duration(r.MedianNs), r.Retransmissions, r.SwitchDrops, r.ResultSHA256)
		switch {
		case r.Error != "" || !r.Verified:
			t.Errorf("%s failed: %s", r.Shape(), r.Error)
		case r.Leaves != cfg.Leaves[i]:
			t.Errorf("row %d has %d leaves, want %d", i, r.Leaves, cfg.Leaves[i])
		case r.ResultReproduced == nil || !*r.ResultReproduced:
			t.Errorf("%s: result_reproduced %v, want true", r.Shape(), r.ResultReproduced)
		case r.MedianNs <= 0 || r.SwitchCPUNs <= 0:
			t.Errorf("%s: median %d ns, switch CPU %d ns per call", r.Shape(), r.MedianNs, r.SwitchCPUNs)
		}
	}
	if tree.ResultSHA256 == "" || tree.ResultSHA256 != flat.ResultSHA256 {
		t.Errorf("the tree's result %q is not the flat switch's %q", tree.ResultSHA256, flat.ResultSHA256)
	}
	if got := tree.Shape(); got != "4 workers (2 leaves × 2)" {
		t.Errorf("tree row's shape %q", got)
	}
	if left, err := netlab.Namespaces(prefix); err != nil || len(left) > 0 {
		t.Errorf("namespaces left: %v (%v)", left, err)
	}
}
