#!/usr/bin/env bash
# The test command of README.md, run by .ci/run: installs what the tests need
# (as root on Debian, when missing), then runs formatting and vet checks, the
# unit and integration tests with the race detector, the pure-Go and ibverbs
# builds, golangci-lint (pinned; depguard guards the layers) and the cgo
# check, the darwin/freebsd cross build, the protobuf and go.mod
# consistency checks, the version stamp of `make build`, a fuzz smoke of
# every fuzz target, the P4Info of the Tofino program against bf-p4c's, and the
# Soft-RoCE interop scenarios in a QEMU guest.
#
#   scripts/test.sh            everything
#   FUZZTIME=30s scripts/test.sh   (default: 20000 executions per target)
#   SKIP_QEMU=1 scripts/test.sh   (skip the QEMU/rxe scenarios; refused when CI is set)
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME=${FUZZTIME:-20000x}
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH 2>/dev/null)/bin"

step() { printf '\n==> %s\n' "$*"; }

# --- dependencies -----------------------------------------------------------
need=()
command -v tshark >/dev/null || need+=(tshark)
command -v ip >/dev/null || need+=(iproute2)
command -v unshare >/dev/null || need+=(util-linux)
[ -f /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v make >/dev/null || need+=(make)
# nftables: the network lab's loss rules (TestLab in go test, and the lab block below)
command -v nft >/dev/null || need+=(nftables)
# ethtool: the lab's wire packets (GSO/TSO cut before lossy links; TestWirePacketsLoss)
command -v ethtool >/dev/null || need+=(ethtool)
# python3-torch: the lab's DDP training through the swml backend and Gloo (TestDDPLab in go test)
/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)
# p4app-switchML's C++ client, for the QEMU scenario allreduce-p4app: when
# ../shared/interop/p4app-switchml is there, harness.sh builds it with that
# directory's build.sh against Debian's gRPC, protobuf and glog. These are
# build.sh's packages (keep the two lists the same).
if [ -d ../shared/interop/p4app-switchml ] && command -v dpkg >/dev/null; then
	for p in libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libgoogle-glog-dev libgflags-dev \
		libboost-program-options-dev libibverbs-dev libnuma-dev libhugetlbfs-dev pkg-config g++ make; do
		dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
	done
fi
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		step "installing ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get -o DPkg::Lock::Timeout=300 update -qq
		apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	elif [ -n "${CI:-}" ]; then
		echo "FAIL: missing ${need[*]} and cannot install them (not root or no apt-get); CI must run every test"
		exit 1
	else
		echo "SKIP-NOTE: missing ${need[*]} and not root: tests that need them will skip"
	fi
fi

# --- static checks ----------------------------------------------------------
step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
step "go vet"
go vet ./...
if [ -f /usr/include/infiniband/verbs.h ]; then
	step "go vet -tags ibverbs"
	go vet -tags ibverbs ./...
	step "go build -tags ibverbs"
	go build -tags ibverbs ./...
fi
step "CGO_ENABLED=0 go build"
CGO_ENABLED=0 go build ./...
step "go mod tidy -diff"
go mod tidy -diff
step "golangci-lint (depguard: the layers of docs/architecture.md) and cgo only in verbs/ibverbs, cmd/libswml"
scripts/lint.sh
step "cross build: darwin, freebsd (packages and tests)"
scripts/cross.sh
if command -v protoc >/dev/null; then
	step "protobuf: committed switchmlpb code = generator output"
	scripts/generate.sh --check
elif [ -n "${CI:-}" ]; then
	echo "FAIL: protoc missing (apt-get install protobuf-compiler); CI must check the generated code"
	exit 1
else
	echo "SKIP-NOTE: protoc missing: the generated-code check is skipped"
fi
step "make build stamps the version (git describe)"
make -s build BIN=bin/swml-rdma-version-check
want=$(git describe --always --dirty 2>/dev/null || echo dev)
got=$(bin/swml-rdma-version-check --version)
rm -f bin/swml-rdma-version-check
[ "$got" = "swml-rdma version $want" ] || { echo "FAIL: --version printed '$got', want 'swml-rdma version $want'"; exit 1; }

# --- tests ------------------------------------------------------------------
step "go test -race"
go test -race -count=1 -timeout 15m ./...

# Without the race detector (the tests skip under it): the memory model
# against measured peak RSS, whose shadow memory the model does not
# describe; and a stopped worker named by the others, which must happen
# before the controller's keep-alive ping ends the job.
step "go test: memory model (docs/operations.md \"Memory\"), a stopped worker named"
go test -count=1 -timeout 10m -run '^(TestMemoryModel(Bench|Worker)|TestMultiProcessWorkerStopped)$' ./cmd/swml-rdma/

if [ -f /usr/include/infiniband/verbs.h ]; then
	step "go test -tags ibverbs (cgo backend, interop scenario code)"
	go test -race -count=1 -tags ibverbs ./verbs/ibverbs/ ./internal/... ./rdma/
fi

step "fuzz smoke ($FUZZTIME per target)"
for pkg in $(go list ./...); do
	for f in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		echo "   $pkg $f"
		ok=
		for try in 1 2; do
			if go test -run '^$' -fuzz "^${f}\$" -fuzztime "$FUZZTIME" "$pkg" >/tmp/swml-fuzz.log 2>&1; then ok=1; break; fi
			# A found crasher is always a failure. Go's fuzz coordinator can
			# also give up with "context deadline exceeded" on a loaded
			# machine without any failing input: try that once more.
			if grep -q 'Failing input' /tmp/swml-fuzz.log || ! grep -q 'context deadline exceeded' /tmp/swml-fuzz.log; then break; fi
			echo "   (fuzz coordinator timed out without a failing input; retrying once)"
		done
		[ -n "$ok" ] || { cat /tmp/swml-fuzz.log; exit 1; }
	done
done

# --- P4: the Tofino program and the open-source Tofino compiler ------------
# Installs the prebuilt bf-p4c from ../shared/tools/bf-p4c/ (relative to the
# repository root; install.sh unpacks it once into ~/.cache and apt-installs
# its runtime libraries as root) and checks that the P4Info fixtures the
# P4Runtime backend is tested against (aggregation/control/p4rt/testdata) are
# what the compiler writes for p4/rdma_switch (front and mid end, seconds),
# then `make p4`: the full compile of the four profiles (default, test,
# 1024 B, 16-bit), each to tofino.bin within the 12 MAU stages of Tofino 1
# (p4/build.sh fails on any error or above 12 stages; docs/p4.md "Stages and
# resources": ≈ 30-45 s per profile on this 2-core machine at load average
# ≈ 1-2; the 16-bit profile adds one such compile and its P4Info check).
# With CI set a missing compiler is a failure.
step "P4: the P4Info fixtures equal bf-p4c's (scripts/p4.sh p4info); make p4 (four profiles, ≤ 12 stages)"
if [ -x ../shared/tools/bf-p4c/install.sh ] || [ -n "${P4C:-}" ]; then
	scripts/p4.sh p4info
	P4C=$(scripts/p4.sh compiler) make p4
elif [ -n "${CI:-}" ]; then
	echo "FAIL: no Tofino compiler (../shared/tools/bf-p4c/install.sh missing, P4C unset); CI must check the P4 program"
	exit 1
else
	echo "SKIP: no Tofino compiler (../shared/tools/bf-p4c/install.sh missing, P4C unset)"
fi

# --- Soft-RoCE (rxe) in a QEMU guest -----------------------------------------
# libibverbs workers all-reducing through the software switch over rdma_rxe,
# and the NIC-level interop scenarios. With CI set, nothing here may be
# skipped: the harness fails instead of printing SKIP, and so does this.
if [ -n "${SKIP_QEMU:-}" ]; then
	if [ -n "${CI:-}" ]; then
		echo "FAIL: SKIP_QEMU is set in CI: the Soft-RoCE scenarios (the real RDMA path) must run in CI"
		exit 1
	fi
	echo "SKIP: Soft-RoCE scenarios (SKIP_QEMU is set)"
else
	step "Soft-RoCE scenarios: ibverbs all-reduce and interop (QEMU guest)"
	testbed/soft-roce/qemu/harness.sh all
fi

# --- PyTorch (python/swml): pip install ./python, then pytest ----------------
# Installs Debian's python3-torch, python3-pytest, setuptools and wheel when
# root; under CI a missing torch fails. pip builds libswml.so into the
# package (offline: --no-build-isolation --no-index) in build/pyvenv, and
# pytest runs python/tests from outside the tree: 2 and 4 ranks vs Gloo,
# the DDP hook, bf16/fp16, an overflow step, a length mismatch, a killed
# rank, no switch, fork, and the documented env launcher.
step "PyTorch: pip install ./python, pytest python/tests (python/tests/run.sh)"
python/tests/run.sh

# --- Network lab (testbed/netlab, `swml-rdma lab`, docs/netlab.md) -----------
# The one-rack lab end to end at small sizes: 2 and 4 workers, each in a
# network namespace joined to the switch's namespace by a veth pair;
# links unshaped and shaped to 200 Mbit/s each way (tbf), without and with
# 1 % random loss per link direction (nftables); in every row SwitchML (the
# switch daemon and one worker process per namespace), Gloo (python3-torch,
# installed by the PyTorch step above, or here) and the ring, each verifying every
# result (a mismatch or a failed run fails the command). Speed is asserted
# nowhere. Then two SwitchML jobs at once on the same switch and links
# (--jobs 2, 2 workers, 200 Mbit/s, 1 MiB), and SwitchML through a tree of 2
# leaves × 2 workers against one switch (--leaves 0,2). Afterwards no namespace of the
# lab may remain. Needs root and nftables (installed here). About 2 minutes
# on a loaded 2-vCPU machine.
step "network lab: 2 and 4 workers, unshaped and 200mbit, loss 0 and 1%: SwitchML, Gloo, ring, verified, SwitchML bit-identical across rates and losses; 2 SwitchML jobs sharing the links; a tree of 2 × 2 bit-identical to one switch; namespaces removed"
if [ "$(id -u)" != 0 ]; then
	if [ -n "${CI:-}" ]; then echo "FAIL: the network lab needs root, and CI must run it"; exit 1; fi
	echo "SKIP: network lab (needs root)"
else
	lab_need=()
	command -v nft >/dev/null || lab_need+=(nftables)
	command -v ethtool >/dev/null || lab_need+=(ethtool)
	/usr/bin/python3 -c 'import torch' 2>/dev/null || lab_need+=(python3-torch)
	if [ ${#lab_need[@]} -gt 0 ]; then
		export DEBIAN_FRONTEND=noninteractive
		apt-get -o DPkg::Lock::Timeout=300 update -qq
		apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${lab_need[@]}" >/dev/null
	fi
	go build -o bin/swml-rdma ./cmd/swml-rdma
	lab_start=$SECONDS
	bin/swml-rdma lab --prefix swlabci --workers 2,4 --rate 0,200mbit --loss 0,0.01 --size 256KiB \
		--iters 3 --warmup 1 --timeout 2m --json >/tmp/swml-lab.json
	/usr/bin/python3 - /tmp/swml-lab.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
want = {(s, w, r, l) for s in ("switchml", "gloo", "ring") for w in (2, 4) for r in (0, 200000000) for l in (0, 0.01)}
got = {(r["system"], r["workers"], r["rate_bps"], r["loss"]) for r in rows if r["verified"] and not r.get("error")}
if got != want:
    sys.exit("network lab: rows missing or not verified: %s" % sorted(want - got))
# Where the CPU goes: every SwitchML and Gloo row measured its processes'
# CPU inside the all-reduces (getrusage), SwitchML its switch daemon too.
nocpu = [(r["system"], r["workers"], r["rate_bps"], r["loss"]) for r in rows if r["system"] != "ring"
         and (r["cpu_user_ns_per_call"] + r["cpu_sys_ns_per_call"] <= 0 or (r["system"] == "switchml" and r["switch_cpu_ns_per_call"] <= 0))]
if nocpu:
    sys.exit("network lab: rows without CPU accounting: %s" % nocpu)
# Bit-reproducible: each worker count's SwitchML rows (both rates, both
# losses) returned the same result digest.
notrepro = [(r["workers"], r["rate_bps"], r["loss"]) for r in rows if r["system"] == "switchml" and r.get("result_reproduced") is not True]
if notrepro:
    sys.exit("network lab: SwitchML rows not bit-identical across rates and losses: %s" % notrepro)
lossy = sum(r["loss_drops"] for r in rows if r["loss"] > 0)
if lossy == 0:
    sys.exit("network lab: the 1% rows dropped nothing: the loss rules did not work")
print("network lab: %d rows verified, %d packets dropped by the loss rules" % (len(rows), lossy))
PY
	echo "network lab: $((SECONDS - lab_start)) s"
	# Two SwitchML jobs sharing the switch daemon and the links (--jobs 2):
	# one job alone, then sessions 1 and 2 at once, each job's workers on
	# their own addresses; every job verified, its ranks agreeing, and each
	# job's sum the solo job's. Shares are reported, not asserted. ~5 s.
	jobs_start=$SECONDS
	bin/swml-rdma lab --prefix swlabci --workers 2 --rate 200mbit --size 1MiB --jobs 2 --systems switchml \
		--iters 3 --warmup 1 --timeout 2m --json >/tmp/swml-lab-jobs.json
	/usr/bin/python3 - /tmp/swml-lab-jobs.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
if len(rows) != 1 or not rows[0]["verified"] or rows[0].get("error") or rows[0]["jobs"] != 2:
    sys.exit("network lab --jobs 2: want one verified SwitchML row of 2 jobs: %s" % rows)
jobs = rows[0]["shared"]["jobs"]
if sorted(j["session_id"] for j in jobs) != [1, 2] or not all(j["verified"] and j["result_sha256"] == rows[0]["result_sha256"] for j in jobs):
    sys.exit("network lab --jobs 2: jobs not both verified with the solo job's result: %s" % jobs)
print("network lab --jobs 2: shares %s" % ", ".join("%.2f" % j["share"] for j in jobs))
PY
	echo "network lab --jobs 2: $((SECONDS - jobs_start)) s"
	# The switch hierarchy (--leaves 0,2): 4 workers on one switch, then
	# 2 leaves × 2 workers under a spine, unshaped; both rows verified and
	# the tree's sums bit for bit the one switch's (docs/switch.md "Switch
	# hierarchy"). ~5 s.
	tree_start=$SECONDS
	bin/swml-rdma lab --prefix swlabci --workers 4 --leaves 0,2 --rate 0 --size 256KiB --systems switchml \
		--iters 3 --warmup 1 --timeout 2m --json >/tmp/swml-lab-tree.json
	/usr/bin/python3 - /tmp/swml-lab-tree.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
if [r["leaves"] for r in rows] != [0, 2] or not all(r["verified"] and not r.get("error") for r in rows):
    sys.exit("network lab --leaves 0,2: want a verified flat row and a verified tree row: %s" % rows)
if rows[0]["result_sha256"] != rows[1]["result_sha256"] or not all(r["result_reproduced"] for r in rows):
    sys.exit("network lab --leaves 0,2: the tree's result is not the flat switch's: %s" % rows)
print("network lab --leaves 0,2: tree bit-identical to one switch, medians %s ms" % ", ".join("%.1f" % (r["median_ns"] / 1e6) for r in rows))
PY
	echo "network lab --leaves 0,2: $((SECONDS - tree_start)) s"
	left=$(ip netns list | grep -E '^swlabci' || true)
	if [ -n "$left" ]; then echo "FAIL: the lab left namespaces behind: $left"; exit 1; fi
fi

step "all checks passed"
