#!/usr/bin/env bash
# p4/build.sh — compile p4/rdma_switch for Tofino 1 (TNA) in every profile.
#
#   p4/build.sh [OUT_DIR]          (default build/p4; `make p4` runs it)
#
# Compiler: $P4C if set, else bf-p4c or p4c-barefoot from PATH, else
# $SDE_INSTALL/bin/bf-p4c or $SDE/install/bin/bf-p4c. The open-source one is
# p4lang/p4c built with -DENABLE_TOFINO=ON (docs/p4.md "Building the
# compiler"); Intel P4 Studio's works the same way.
#
# Profiles:  default → OUT_DIR/p4info.txt (what `swml-rdma controller
#            --p4info` reads) and OUT_DIR/default/;
#            test    → -DTEST_PROFILE, OUT_DIR/test/ (64 slots);
#            payload1024 → -DPAYLOAD_1024, OUT_DIR/payload1024/ (1024 B
#            payloads over the four pipes, docs/p4.md "1024 B payloads";
#            its P4Info must hold Ingress.next_step.loopback_port);
#            wire16 → -DWIRE_16, OUT_DIR/wire16/ (128 int16 lanes per 256 B
#            payload over two pipes, docs/p4.md "16-bit profile"; its P4Info
#            must declare the Processor registers' halves as bit<16>).
# Fails (exit 1) on any compiler error, and when a compiled pipe uses more
# than the 12 MAU stages of Tofino 1 (read from the compiler's table
# summary), or when it wrote no tofino.bin. Without a compiler it says so
# and exits 0 (1 when $CI is set). -g makes bf-p4c write the resource logs
# under <profile>/pipe/logs/ (docs/p4.md "Stages and resources").
# Extra compiler flags: $P4FLAGS.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
src="$here/rdma_switch/rdma_switch.p4"
out=${1:-build/p4}
max_stages=12

find_compiler() {
	if [ -n "${P4C:-}" ]; then
		command -v "$P4C" || { [ -x "$P4C" ] && echo "$P4C"; }
		return
	fi
	command -v bf-p4c && return
	command -v p4c-barefoot && return
	[ -n "${SDE_INSTALL:-}" ] && [ -x "$SDE_INSTALL/bin/bf-p4c" ] && { echo "$SDE_INSTALL/bin/bf-p4c"; return; }
	[ -n "${SDE:-}" ] && [ -x "$SDE/install/bin/bf-p4c" ] && { echo "$SDE/install/bin/bf-p4c"; return; }
	return 1
}

if ! cc=$(find_compiler) || [ -z "$cc" ]; then
	if [ -n "${P4C:-}" ]; then
		echo "make p4: P4C=$P4C is not an executable compiler." >&2
		exit 1
	fi
	echo "make p4: no Tofino compiler: none of \$P4C, bf-p4c / p4c-barefoot on PATH, \$SDE_INSTALL/bin/bf-p4c, \$SDE/install/bin/bf-p4c."
	echo "  Build p4lang/p4c with -DENABLE_TOFINO=ON (docs/p4.md \"Building the compiler\") or install Intel P4 Studio,"
	echo "  then: P4C=/path/to/bf-p4c make p4"
	echo "  Nothing was compiled."
	if [ -n "${CI:-}" ]; then
		echo "make p4: CI is set: a missing compiler is a failure." >&2
		exit 1
	fi
	exit 0
fi

# stages_used DIR: the MAU stage count of the compiled pipe: the last table
# allocation bf-p4c reports in logs/table_summary.log (it retries; the last
# one is what it kept), else logs/mau.resources.log; empty when the
# compiler wrote neither.
stages_used() {
	local n f
	n=$(find "$1" -path '*/logs/table_summary.log' | while read -r f; do
		sed -n 's/.*Number of stages in table allocation: *\([0-9][0-9]*\).*/\1/p' "$f" | tail -1
	done | sort -n | tail -1)
	if [ -z "$n" ]; then
		n=$(find "$1" -path '*/logs/mau.resources.log' -exec \
			sed -n 's/.*[Ss]tages* used[^0-9]*\([0-9][0-9]*\).*/\1/p' {} + 2>/dev/null | sort -n | tail -1)
	fi
	echo "$n"
}

compile() { # profile dir [defines...]
	local profile=$1 dir=$2
	shift 2
	# The log lies beside the output directory: bf-p4c empties that one.
	rm -rf "$dir" "$dir.log" && mkdir -p "$dir" || return 1
	echo "make p4: $profile profile → $dir ($cc)"
	local t0=$SECONDS
	# -g writes the resource logs (pipe/logs/table_summary.log,
	# mau.resources.log, phv_allocation_summary_*.log) the stage check reads.
	# shellcheck disable=SC2086 # P4FLAGS is a flag list
	if ! "$cc" --target tofino --arch tna --std p4-16 -g -o "$dir" \
		--p4runtime-files "$dir/p4info.txt" --p4runtime-format text --p4runtime-force-std-externs \
		"$@" ${P4FLAGS:-} "$src" 2>&1 | tee "$dir.log"; then
		echo "make p4: $profile profile FAILED after $((SECONDS - t0)) s (log: $dir.log)" >&2
		local m
		m=$(stages_used "$dir")
		[ -n "$m" ] && echo "make p4: $profile profile: the compiler's last table allocation used $m MAU stages; Tofino 1 has $max_stages" >&2
		return 1
	fi
	echo "make p4: $profile profile: compiled in $((SECONDS - t0)) s"
	if ! find "$dir" -name tofino.bin -size +0 | grep -q .; then
		echo "make p4: $profile profile: no tofino.bin written (log: $dir.log)" >&2
		return 1
	fi
	if grep 'error:' "$dir.log" | grep -qv 'warning'; then
		echo "make p4: $profile profile: the compiler reported errors (log: $dir.log)" >&2
		return 1
	fi
	if [ ! -s "$dir/p4info.txt" ]; then
		echo "make p4: $profile profile: no P4Info written ($dir/p4info.txt)" >&2
		return 1
	fi
	if [ "$profile" = payload1024 ] && ! grep -q 'next_step.loopback_port' "$dir/p4info.txt"; then
		echo "make p4: $profile profile: the P4Info has no Ingress.next_step.loopback_port: -DPAYLOAD_1024 did not take effect" >&2
		return 1
	fi
	# The Processor register's type in the P4Info: value_pair_t's members
	# are bit<16> exactly in the 16-bit profile (what p4rt.P4Info.elementBytes reads).
	local w16=0
	grep -A 8 'name: "first"' "$dir/p4info.txt" | grep -q 'bitwidth: 16' && w16=1
	if [ "$profile" = wire16 ] && [ $w16 -ne 1 ]; then
		echo "make p4: $profile profile: the P4Info's Processor lanes are not 16-bit: -DWIRE_16 did not take effect" >&2
		return 1
	fi
	if [ "$profile" != wire16 ] && [ $w16 -ne 0 ]; then
		echo "make p4: $profile profile: the P4Info's Processor lanes are 16-bit: a 32-bit profile was built with -DWIRE_16" >&2
		return 1
	fi
	local n
	n=$(stages_used "$dir")
	if [ -z "$n" ]; then
		echo "make p4: $profile profile: compiled; the stage count was not found in the compiler's logs (check $dir/*/logs by hand)"
	elif [ "$n" -gt "$max_stages" ]; then
		echo "make p4: $profile profile uses $n MAU stages; Tofino 1 has $max_stages" >&2
		return 1
	else
		echo "make p4: $profile profile: $n of $max_stages MAU stages"
	fi
}

status=0
compile default "$out/default" || status=1
compile test "$out/test" -DTEST_PROFILE || status=1
compile payload1024 "$out/payload1024" -DPAYLOAD_1024 || status=1
compile wire16 "$out/wire16" -DWIRE_16 || status=1
if [ $status -ne 0 ]; then
	exit 1
fi
cp "$out/default/p4info.txt" "$out/p4info.txt"
echo "make p4: P4Info for the controller: $out/p4info.txt (test profile: $out/test/p4info.txt, --pool-size 64; 1024 B profile: $out/payload1024/p4info.txt; 16-bit profile: $out/wire16/p4info.txt)"
