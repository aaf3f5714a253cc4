#!/usr/bin/env bash
# scripts/p4.sh — the open-source Tofino compiler for p4/rdma_switch (docs/p4.md).
#
#   scripts/p4.sh compiler          print the bf-p4c driver: $P4C if set, else the
#                                   prebuilt copy beside the repository
#                                   (../shared/tools/bf-p4c/install.sh, unpacked once)
#   scripts/p4.sh p4info            check that the P4Info fixtures the P4Runtime
#                                   backend is tested against
#                                   (aggregation/control/p4rt/testdata/p4info.txt and
#                                   p4info_1024.txt) are what the compiler writes for
#                                   the default and -DPAYLOAD_1024 profiles
#   scripts/p4.sh p4info --update   rewrite them from a fresh compile
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

case "${1:-}" in
compiler)
	compiler
	;;
p4info)
	td=$root/aggregation/control/p4rt/testdata
	if [ "${2:-}" = --update ]; then
		p4info "$td/p4info.txt"
		p4info "$td/p4info_1024.txt" -DPAYLOAD_1024
		echo "scripts/p4.sh: wrote $td/p4info.txt and p4info_1024.txt"
		exit 0
	fi
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	p4info "$tmp/p4info.txt"
	p4info "$tmp/p4info_1024.txt" -DPAYLOAD_1024
	status=0
	for f in p4info.txt p4info_1024.txt; do
		if ! diff -u "$td/$f" "$tmp/$f"; then
			echo "scripts/p4.sh: $td/$f differs from what the compiler writes: run scripts/p4.sh p4info --update" >&2
			status=1
		fi
	done
	[ $status -eq 0 ] && echo "scripts/p4.sh: the P4Info fixtures equal a fresh compile"
	exit $status
	;;
*)
	sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
