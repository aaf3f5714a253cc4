package sweep

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/swml-rdma/swml-rdma/testbed/netlab"
)

// needDDPLab skips when this process cannot build a lab (not root, ip or
// tc missing) or /usr/bin/python3 has no torch; under CI (CI set) a
// missing torch fails instead: scripts/test.sh installs it.
func needDDPLab(t *testing.T) string {
	t.Helper()
	if err := netlab.CheckRoot(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s cannot import torch (apt-get install python3-torch): %v: %s", python, err, out)
		}
		t.Skipf("%s cannot import torch (apt-get install python3-torch)", python)
	}
	return python
}

// buildFor builds a package of this module into dir with the go command
// that runs the tests: the swml-rdma program (the switch daemon) and
// libswml.so (the swml backend's library).
func buildFor(t *testing.T, out string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"build", "-o", out}, args...)...)
	cmd.Dir = "../../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, b)
	}
}

// TestDDPLab trains through the swml backend and through Gloo, 2 ranks in
// a lab of unshaped links, float32 and bf16 gradients, a few steps of a
// small model: every row verified (the ranks' parameters bit-identical,
// the loss decreased), the swml rows on the wire their dtype takes, each
// compared with Gloo's, and no namespace left. $SWML_LIB names a built
// libswml.so to use instead of building one.
func TestDDPLab(t *testing.T) {
	python := needDDPLab(t)
	dir := t.TempDir()
	exe := filepath.Join(dir, "swml-rdma")
	buildFor(t, exe, "./cmd/swml-rdma")
	lib := os.Getenv("SWML_LIB")
	if lib == "" {
		lib = filepath.Join(dir, "libswml.so")
		buildFor(t, lib, "-buildmode=c-shared", "./cmd/libswml")
	}
	pythonPath, err := filepath.Abs("../../../python")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "swddpt"
	cfg := Config{Workers: []int{2}, Rates: []uint64{0}, Losses: []float64{0}, Systems: []System{DDPSwml, DDPGloo}, Jobs: 1,
		Iters: 1, Timeout: 3 * time.Minute, Queue: netlab.DefaultQueue, PacketSize: 1024, MessageSize: 16 << 10, Exe: exe, Python: python,
		Prefix: prefix, DDP: DDPConfig{DTypes: []string{DTypeFloat32, DTypeBF16}, Steps: 3, Warmup: 1, ComputeSteps: 1, Layers: 2, Width: 256,
			Batch: 4, SwmlPythonPath: pythonPath, LibSwml: lib}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 4 {
		t.Fatalf("%d rows, want 4 (two systems × two dtypes)", len(rep.Rows))
	}
	for i, r := range rep.Rows {
		d := r.DDP
		t.Logf("%s %s: step %v, compute %v, loss %.5f→%.5f, wire %d, params %.12s…", r.System, d.DType, time.Duration(r.MedianNs),
			time.Duration(d.ComputeNs), d.LossFirst, d.LossLast, r.WireBits, d.ParamsSHA256)
		wantSys, wantDType := cfg.Systems[i%2], cfg.DDP.DTypes[i/2]
		wantWire := map[string]int{DTypeFloat32: 32, DTypeBF16: 16}[wantDType]
		if r.System == DDPGloo {
			wantDType, wantWire = ddpDType(DDPGloo, wantDType), 0
		}
		switch {
		case r.Error != "" || !r.Verified:
			t.Errorf("%s %s failed: %s", r.System, d.DType, r.Error)
		case r.System != wantSys || d.DType != wantDType || r.WireBits != wantWire:
			t.Errorf("row %d: %s %s on a %d-bit wire, want %s %s on %d", i, r.System, d.DType, r.WireBits, wantSys, wantDType, wantWire)
		case d.Params != cfg.DDP.Params() || r.MedianNs <= 0 || d.ComputeNs <= 0 || r.CPUUserNs+r.CPUSysNs <= 0 || d.ParamsSHA256 == "":
			t.Errorf("%s %s: %d parameters, step %d ns, compute %d ns, CPU %d+%d ns, digest %q", r.System, d.DType, d.Params, r.MedianNs,
				d.ComputeNs, r.CPUUserNs, r.CPUSysNs, d.ParamsSHA256)
		case r.System == DDPSwml && (r.VsGloo == nil || d.LossVsGloo == nil || r.SwitchCPUNs <= 0):
			t.Errorf("%s %s: not compared with Gloo (%v, %v) or no switch CPU (%d)", r.System, d.DType, r.VsGloo, d.LossVsGloo, r.SwitchCPUNs)
		}
	}
	if left, err := netlab.Namespaces(prefix); err != nil || len(left) > 0 {
		t.Errorf("namespaces left: %v (%v)", left, err)
	}
}
