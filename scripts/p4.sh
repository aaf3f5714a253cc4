#!/usr/bin/env bash
# scripts/p4.sh — the open-source Tofino compiler for p4/rdma_switch (docs/p4.md).
#
#   scripts/p4.sh compiler          print the bf-p4c driver: $P4C if set, else the
#                                   prebuilt copy beside the repository
#                                   (../shared/tools/bf-p4c/install.sh, unpacked once)
#   scripts/p4.sh p4info            check that the P4Info fixtures the P4Runtime
#                                   backend is tested against
#                                   (aggregation/control/p4rt/testdata/p4info.txt,
#                                   p4info_1024.txt, p4info_wire16.txt) are what the
#                                   compiler writes for the default, -DPAYLOAD_1024
#                                   and -DWIRE_16 profiles
#   scripts/p4.sh p4info --update   rewrite them from a fresh compile
#   scripts/p4.sh testgen           regenerate the p4testgen tests the Go replay
#                                   reads (p4/testdata/p4testgen/, docs/p4.md
#                                   "Generated tests"): the prebuilt p4testgen
#                                   ($P4TESTGEN if set, else
#                                   ../shared/tools/p4testgen/install.sh), fixed
#                                   seeds, -DP4TESTGEN; about 10 min on 2 cores
#   scripts/p4.sh sources-hash      print the hash of p4/rdma_switch/*.p4 that
#                                   p4/testdata/p4testgen/SOURCES records
#
# The P4Info is written by the compiler's front and mid end; --skip-compilation
# skips the back end, so the check takes seconds. `make p4` (p4/build.sh) is the
# full compile of every profile.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

compiler() {
	if [ -n "${P4C:-}" ]; then
		echo "$P4C"
		return
	fi
	local inst=$root/../shared/tools/bf-p4c/install.sh
	if [ ! -x "$inst" ]; then
		echo "scripts/p4.sh: no compiler: \$P4C is unset and $inst does not exist" >&2
		return 1
	fi
	"$inst"
}

p4info() { # out_file [defines...]
	local out=$1 cc tmp
	shift
	cc=$(compiler)
	tmp=$(mktemp -d)
	# shellcheck disable=SC2064 # expand now
	trap "rm -rf '$tmp'" RETURN
	if ! "$cc" --target tofino --arch tna --std p4-16 -o "$tmp/out" --skip-compilation pipe \
		--p4runtime-files "$tmp/p4info.txt" --p4runtime-format text --p4runtime-force-std-externs \
		"$@" "$root/p4/rdma_switch/rdma_switch.p4" >"$tmp/log" 2>&1 || [ ! -s "$tmp/p4info.txt" ]; then
		cat "$tmp/log" >&2
		echo "scripts/p4.sh: the compiler wrote no P4Info ($*)" >&2
		return 1
	fi
	cp "$tmp/p4info.txt" "$out"
}

testgen_tool() {
	if [ -n "${P4TESTGEN:-}" ]; then
		echo "$P4TESTGEN"
		return
	fi
	local inst=$root/../shared/tools/p4testgen/install.sh
	if [ ! -x "$inst" ]; then
		echo "scripts/p4.sh: no p4testgen: \$P4TESTGEN is unset and $inst does not exist" >&2
		return 1
	fi
	"$inst"
}

# sources_hash: SHA-256 over the program's sources, file by file in name
# order ("<sha256>  <name>" lines, then hashed): what the generated tests
# came from. aggregation/switchmodel TestP4TestgenSourcesHash computes the
# same in Go.
sources_hash() {
	(cd "$root/p4/rdma_switch" && LC_ALL=C sha256sum -- *.p4) | sha256sum | cut -d' ' -f1
}

# testgen_run profile name seed max path ports [flags...]: one p4testgen
# run into p4/testdata/p4testgen/<profile>/<name>.py.gz (PTF back end, the
# tool's output as written, gzip without a timestamp).
testgen_run() {
	local profile=$1 name=$2 seed=$3 max=$4 path=$5 ports=$6 tmp t0 n out
	shift 6
	tmp=$(mktemp -d)
	t0=$SECONDS
	# shellcheck disable=SC2064 # expand now
	trap "rm -rf '$tmp'" RETURN
	# From the repository root, with paths relative to it, so that the
	# output names the sources by their paths in the repository and a run
	# with the same seeds writes the same tests (but for the tool's date).
	out=build/p4testgen/$profile-$name
	rm -rf "${root:?}/$out"
	if ! (cd "$root" && "$tg" --target tofino --arch tna --std p4-16 -D__TARGET_TOFINO__=1 -DP4TESTGEN "$@" \
		--test-backend ptf --seed "$seed" --max-tests "$max" --path-selection "$path" \
		--port-ranges "$ports" --track-coverage STATEMENTS --print-coverage --out-dir "$out" \
		p4/rdma_switch/rdma_switch.p4) >"$tmp/log" 2>&1; then
		tail -20 "$tmp/log" >&2
		echo "scripts/p4.sh: p4testgen failed: $profile $name" >&2
		return 1
	fi
	mkdir -p "$td/$profile"
	gzip -9n -c "$root/$out/rdma_switch.py" >"$td/$profile/$name.py.gz"
	# The statements this run left unexecuted (the tool prints the list
	# after every test, for the tests so far: the last one is the run's),
	# and its "Nodes covered" line.
	awk '/^Not covered program nodes:/ { n = 0; next } /^\t/ { l[n++] = substr($0, 2) }
		END { for (i = 0; i < n; i++) print l[i] }' "$tmp/log" | LC_ALL=C sort -u >"$td/$profile/$name.uncovered"
	n=$(grep -c '^class Test' "$root/$out/rdma_switch.py")
	echo "scripts/p4.sh: $profile/$name: $n tests in $((SECONDS - t0)) s, $(grep 'Nodes covered' "$tmp/log" | tail -1 | tr -d '=')"
}

# testgen_coverage profile: the statements no run of the profile executed
# (the intersection of the runs' lists) against the tool's statement count.
testgen_coverage() {
	local profile=$1 total f common
	total=$(grep -ho 'covered: [0-9.]* ([0-9]*/[0-9]*)' "$td/$profile.log" | tail -1 | sed 's/.*\/\([0-9]*\))/\1/')
	common=$(mktemp)
	cp "$(ls "$td/$profile"/*.uncovered | head -1)" "$common"
	for f in "$td/$profile"/*.uncovered; do
		LC_ALL=C comm -12 "$common" "$f" >"$common.new" && mv "$common.new" "$common"
	done
	mv "$common" "$td/$profile/unexecuted.txt"
	rm -f "$td/$profile"/*.uncovered
	echo "scripts/p4.sh: $profile: $((total - $(wc -l <"$td/$profile/unexecuted.txt"))) of $total statements executed by some test" \
		| tee -a "$td/COVERAGE"
}

# The runs: RoCE requests from the front ports (testgen_steer.p4; three
# searches, one of them for paths that emit a packet), bridged passes
# (harvest; the 1024 B profile's consume passes), and anything from ports
# 0-63 (ARP, ICMP, forwarding, short packets). The port range bounds the
# output port too, so the first four take every port (the recirculation
# and loopback ports are outputs of the request pass).
# The RoCE runs' frames are at least 14 B + the largest IPv4 total length
# testgen_steer.p4 allows (IPV4_LEN_NO_EXT + 36), so that the frame always
# holds the IPv4 packet its header describes, as on the wire.
testgen_profile() { # profile min_frame_bytes [defines...]
	local profile=$1 size
	size="$(($2 * 8)):$((($2 + 64) * 8))"
	shift 2
	testgen_run "$profile" roce-dfs 1 40 DEPTH_FIRST 0:511 --packet-size-range "$size" -DP4TESTGEN_ROCE "$@"
	testgen_run "$profile" roce-random 2 80 RANDOM_BACKTRACK 0:511 --packet-size-range "$size" -DP4TESTGEN_ROCE "$@"
	testgen_run "$profile" roce-out 5 30 RANDOM_BACKTRACK 0:511 --packet-size-range "$size" --output-packet-only \
		-DP4TESTGEN_ROCE "$@"
	testgen_run "$profile" bridged 3 30 RANDOM_BACKTRACK 0:511 -DP4TESTGEN_BRIDGED "$@"
	testgen_run "$profile" front 4 15 RANDOM_BACKTRACK 0:63 "$@"
}

case "${1:-}" in
sources-hash)
	sources_hash
	;;
testgen)
	tg=$(testgen_tool)
	td=$root/p4/testdata/p4testgen
	t0=$SECONDS
	rm -rf "$td"
	mkdir -p "$td"
	for p in default test payload1024 wire16; do
		case $p in
		default) testgen_profile default 350 ;;
		test) testgen_profile test 350 -DTEST_PROFILE ;;
		payload1024) testgen_profile payload1024 1118 -DPAYLOAD_1024 ;;
		wire16) testgen_profile wire16 350 -DWIRE_16 ;;
		esac | tee "$td/$p.log"
		testgen_coverage "$p"
		rm -f "$td/$p.log"
	done
	sources_hash >"$td/SOURCES"
	echo "scripts/p4.sh: wrote $td in $((SECONDS - t0)) s (sources $(cat "$td/SOURCES"))"
	;;
compiler)
	compiler
	;;
p4info)
	td=$root/aggregation/control/p4rt/testdata
	if [ "${2:-}" = --update ]; then
		p4info "$td/p4info.txt"
		p4info "$td/p4info_1024.txt" -DPAYLOAD_1024
		p4info "$td/p4info_wire16.txt" -DWIRE_16
		echo "scripts/p4.sh: wrote $td/p4info.txt, p4info_1024.txt and p4info_wire16.txt"
		exit 0
	fi
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	p4info "$tmp/p4info.txt"
	p4info "$tmp/p4info_1024.txt" -DPAYLOAD_1024
	p4info "$tmp/p4info_wire16.txt" -DWIRE_16
	status=0
	for f in p4info.txt p4info_1024.txt p4info_wire16.txt; do
		if ! diff -u "$td/$f" "$tmp/$f"; then
			echo "scripts/p4.sh: $td/$f differs from what the compiler writes: run scripts/p4.sh p4info --update" >&2
			status=1
		fi
	done
	[ $status -eq 0 ] && echo "scripts/p4.sh: the P4Info fixtures equal a fresh compile"
	exit $status
	;;
*)
	sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
