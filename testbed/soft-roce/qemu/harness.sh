#!/usr/bin/env bash
# harness.sh — run Soft-RoCE (rdma_rxe) interop scenarios inside a QEMU guest.
#
# This machine's kernel (and most CI/container kernels) has no RDMA. Debian's
# kernel package has rdma_rxe, and QEMU boots it under TCG in a few seconds.
# The harness:
#   1. makes sure the host tools are there (apt-installs them as root, SKIPs
#      with exit 0 otherwise);
#   2. fetches the kernel package linux-image-amd64 depends on (apt-get
#      download + dpkg-deb -x; never installed) and extracts vmlinux;
#   3. builds a base busybox initramfs (modules, iproute2, rdma, libibverbs,
#      the rxe provider) — cached under ${XDG_CACHE_HOME:-$HOME/.cache}/swml-rdma;
#   4. builds the scenario binary (go build -tags ibverbs ./internal/interop/cmd/interop)
#      into a small extra archive appended to the base one;
#   5. boots the guest, whose /init loads rxe, builds a veth pair into a
#      second netns, adds rxe0 and runs the scenarios; each scenario prints
#      a marker line "SWML-RESULT <name> PASS|FAIL|SKIP" that this script checks
#      (QEMU's exit status says nothing about the guest).
#
# Usage: harness.sh [-k] [scenario|all|list ...]
#   -k            keep the work directory (console log, initramfs) and print it
# Environment:
#   SWML_QEMU_TIMEOUT   seconds for the whole guest run (default 1200)
#   SWML_SCENARIO_TIMEOUT seconds per scenario inside the guest (default 300)
#   SWML_TEST_MSG_SIZE  --msg-size of the all-reduce scenarios but
#                       allreduce-ibverbs and allreduce-mixed, which run the
#                       worker's defaults (default 1KiB: one-packet messages;
#                       e.g. 16KiB for 16-packet ones)
#   SWML_BENCH_SIZE, SWML_BENCH_ITERS, SWML_BENCH_TIMEOUT, SWML_BENCH_QPS
#                       rxe-bench's tensor size (default 4MiB), measured
#                       all-reduces (3), bound per job in s (300) and
#                       worker QPs (8)
#   SWML_BENCH_SPIN     rxe-bench also runs the defaults with --busy-poll
#                       this long (default 1ms; off: not)
#   SWML_GUEST_APPEND   more kernel parameters for the guest (e.g.
#                       "clocksource=tsc tsc=reliable")
#   SWML_ARTIFACTS      directory where blobs printed by the guest
#                       (e.g. the captured sysfs tree) are written
#   SWML_P4APP_DIR      p4app-switchML's client sources and build.sh for
#                       allreduce-p4app (default ../shared/interop/p4app-switchml
#                       beside the repository)
#   XDG_CACHE_HOME      cache root (downloads, kernel, base initramfs, p4app build)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/swml-rdma
QEMU_TIMEOUT=${SWML_QEMU_TIMEOUT:-1200}
SCENARIO_TIMEOUT=${SWML_SCENARIO_TIMEOUT:-300}

# Scenario names, in the order "all" runs them. Keep in sync with
# internal/interop (the guest runs /bin/interop <name>) and guest-init.sh.
ALL_SCENARIOS=(
	ibv-loopback
	rxe-to-soft-ipv4 rxe-to-soft-ipv6
	soft-to-rxe-ipv4 soft-to-rxe-ipv6
	bad-icrc rxe-uc-truncated
	allreduce-ibverbs allreduce-mixed allreduce-ibverbs-loss allreduce-packet-writes worker-killed
	rdmadev allreduce-p4app
)
EXTRA_SCENARIOS=(smoke capture-sysfs devices lab-script allreduce-p4app-loss rxe-bench)

log() { printf 'harness: %s\n' "$*" >&2; }
# skip MESSAGE: outside CI a skip is exit 0 with a clear message; with CI
# set (any non-empty value, as GitHub Actions and .ci/run set it) the real
# stack is required and a skip fails the run.
skip() {
	if [ -n "${CI:-}" ]; then
		echo "FAIL (CI is set, so the Soft-RoCE scenarios must run): $*"
		exit 1
	fi
	echo "SKIP: $*"
	exit 0
}
die() { printf 'harness: FAIL: %s\n' "$*" >&2; exit 1; }

keep=0
while getopts k opt; do
	case $opt in
	k) keep=1 ;;
	*) die "usage: $0 [-k] [scenario|all|list ...]" ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] && set -- all

scenarios=()
for a in "$@"; do
	case $a in
	all) scenarios+=("${ALL_SCENARIOS[@]}") ;;
	list)
		printf '%s\n' "${ALL_SCENARIOS[@]}" "${EXTRA_SCENARIOS[@]}"
		exit 0
		;;
	*)
		ok=0
		for s in "${ALL_SCENARIOS[@]}" "${EXTRA_SCENARIOS[@]}"; do [ "$s" = "$a" ] && ok=1; done
		[ $ok = 1 ] || die "unknown scenario '$a' (known: ${ALL_SCENARIOS[*]} ${EXTRA_SCENARIOS[*]})"
		scenarios+=("$a")
		;;
	esac
done

# ---------------------------------------------------------------- host tools
RXE_PROVIDER=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
need_pkgs() {
	local missing=()
	command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
	# busybox-static: a static /bin/busybox with insmod (the guest has no libc for it).
	{ [ -x /bin/busybox ] && /bin/busybox insmod --help >/dev/null 2>&1 && ! { ldd /bin/busybox 2>/dev/null || true; } | grep -q libc; } || missing+=(busybox-static)
	command -v cpio >/dev/null || missing+=(cpio)
	[ -e "$RXE_PROVIDER" ] && [ -e /etc/libibverbs.d/rxe.driver ] || missing+=(ibverbs-providers)
	command -v ibv_devinfo >/dev/null || missing+=(ibverbs-utils)
	[ -e /usr/include/infiniband/verbs.h ] || missing+=(libibverbs-dev)
	command -v rdma >/dev/null || missing+=(iproute2)
	[ -x /usr/sbin/ip ] || missing+=(iproute2)
	command -v xz >/dev/null || missing+=(xz-utils)
	command -v apt-get >/dev/null || { echo "no-apt"; return; }
	printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' '
}
missing=$(need_pkgs)
missing=${missing% }
if [ "$missing" = no-apt ]; then
	skip "soft-roce harness: needs a Debian/Ubuntu host (apt-get) for the kernel package and tools"
fi
if [ -n "${missing// /}" ]; then
	if [ "$(id -u)" != 0 ]; then
		skip "soft-roce harness: missing packages: $missing (run as root, or: sudo apt-get install -y --no-install-recommends $missing)"
	fi
	log "installing: $missing"
	t0=$SECONDS
	export DEBIAN_FRONTEND=noninteractive
	timeout 600 apt-get update -q >/dev/null
	# shellcheck disable=SC2086
	timeout 900 apt-get install -y -q --no-install-recommends $missing >/dev/null
	log "installed in $((SECONDS - t0)) s"
fi
command -v go >/dev/null || die "go is not on PATH"

# ---------------------------------------------------------------- kernel
mkdir -p "$CACHE"
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ -z "$kpkg" ]; then
	if [ "$(id -u)" = 0 ]; then
		timeout 600 apt-get update -q >/dev/null
		kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
	fi
	[ -n "$kpkg" ] || die "cannot resolve the kernel package behind linux-image-amd64 (apt-get update?)"
fi
kdir=$CACHE/kernel/$kpkg
if [ ! -e "$kdir/.done" ]; then
	log "fetching $kpkg (cached in $kdir)"
	rm -rf "$kdir" && mkdir -p "$kdir/dl"
	# apt's sandbox user must be able to write the download directory.
	chmod 0777 "$kdir/dl"
	(cd "$kdir/dl" && timeout 600 apt-get download -q "$kpkg" >/dev/null 2>&1) || die "apt-get download $kpkg failed"
	timeout 300 dpkg-deb -x "$kdir"/dl/*.deb "$kdir/root"
	vmlinuz=$(ls "$kdir"/root/boot/vmlinuz-*)
	# vmlinuz is a bzImage whose payload is an xz stream; the uncompressed
	# ELF boots in 2-3 s under TCG instead of 5-7 s.
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1)
	[ -n "$off" ] || die "no xz stream in $vmlinuz"
	tail -c +"$((off + 1))" "$vmlinuz" | xz -dc 2>/dev/null >"$kdir/vmlinux" || true
	head -c 4 "$kdir/vmlinux" | grep -q ELF || die "could not extract vmlinux from $vmlinuz"
	rm -rf "$kdir/dl"
	touch "$kdir/.done"
fi
kver=$(ls "$kdir/root/lib/modules")

# ---------------------------------------------------------------- base initramfs
# Files of the base archive are copied under "$1" at their own path, below
# usr/ (the guest has lib -> usr/lib like a merged-/usr Debian).
copy_into() { # root file...
	local root=$1 f dst
	shift
	for f in "$@"; do
		dst=$f
		case $dst in /lib/* | /lib64/* | /bin/* | /sbin/*) dst=/usr$dst ;; esac
		mkdir -p "$root$(dirname "$dst")"
		cp -L "$f" "$root$dst"
	done
}
copy_with_libs() { # root binary...
	local root=$1 b
	shift
	for b in "$@"; do
		copy_into "$root" "$b"
		{ ldd "$b" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}' | while read -r l; do
			copy_into "$root" "$l"
		done
	done
}

# Modules rxe and the lab need; dependencies are resolved from each module's
# depends= field, so the list survives kernel upgrades.
MODULES=(crc32_generic veth rdma_rxe)
mod_file() { find "$kdir/root/lib/modules/$kver" -name "$1.ko" -o -name "$1.ko.xz" -o -name "$(echo "$1" | tr _ -).ko" | head -1; }
declare -A mod_seen=()
mod_order=()
mod_resolve() {
	local m=$1 f deps d
	[ -n "${mod_seen[$m]:-}" ] && return
	mod_seen[$m]=1
	f=$(mod_file "$m")
	[ -n "$f" ] || die "module $m not in $kpkg"
	deps=$(busybox strings "$f" | sed -n 's/^depends=//p' | head -1)
	for d in ${deps//,/ }; do mod_resolve "$d"; done
	mod_order+=("$f")
}

base_key=$(cat "$HERE/harness.sh" "$HERE/guest-init.sh" | sha256sum | cut -c1-12)
base=$CACHE/base-$kpkg-$base_key.cpio
if [ ! -e "$base" ]; then
	log "building base initramfs $base"
	t0=$SECONDS
	broot=$(mktemp -d)
	trap 'rm -rf "$broot"' EXIT
	mkdir -p "$broot"/{bin,dev,proc,sys,run,tmp,etc,root,usr/bin,usr/sbin,usr/lib64,usr/lib/x86_64-linux-gnu,var}
	ln -s usr/lib "$broot/lib"
	ln -s usr/lib64 "$broot/lib64"
	ln -s ../run "$broot/var/run"
	cp /bin/busybox "$broot/bin/busybox"
	install -m 0755 "$HERE/guest-init.sh" "$broot/init"
	copy_with_libs "$broot" /usr/sbin/ip "$(command -v rdma)" "$(command -v ibv_devinfo)" "$RXE_PROVIDER" /bin/bash
	copy_into "$broot" /etc/libibverbs.d/rxe.driver
	for m in "${MODULES[@]}"; do mod_resolve "$m"; done
	mkdir -p "$broot/lib/modules"
	: >"$broot/lib/modules/load-order"
	for f in "${mod_order[@]}"; do
		n=$(basename "$f")
		case $n in *.xz) xz -dc "$f" >"$broot/lib/modules/${n%.xz}"; n=${n%.xz} ;; *) cp "$f" "$broot/lib/modules/$n" ;; esac
		echo "$n" >>"$broot/lib/modules/load-order"
	done
	(cd "$broot" && find . | cpio -o -H newc --quiet) >"$base.tmp"
	mv "$base.tmp" "$base"
	rm -rf "$broot"
	trap - EXIT
	log "base initramfs built in $((SECONDS - t0)) s ($(du -h "$base" | cut -f1))"
fi

# ---------------------------------------------------------------- binaries under test
work=$(mktemp -d)
if [ $keep = 1 ]; then
	log "work directory: $work"
else
	trap 'rm -rf "$work"' EXIT
fi
t0=$SECONDS
mkdir -p "$work/extra/bin"
(cd "$REPO" && CGO_ENABLED=1 timeout 600 go build -tags ibverbs -o "$work/extra/bin/interop" ./internal/interop/cmd/interop) ||
	die "go build -tags ibverbs ./internal/interop/cmd/interop failed"
(cd "$REPO" && CGO_ENABLED=1 timeout 600 go build -tags ibverbs -o "$work/extra/bin/swml-rdma" ./cmd/swml-rdma) ||
	log "note: cmd/swml-rdma does not build; the 'devices' scenario will fail"
# rdma/rdmadev's host tests (rdmamap against the package's own sysfs reader)
# run on the guest's real rxe sysfs in the rdmadev scenario.
(cd "$REPO" && timeout 600 go test -c -o "$work/extra/bin/rdmadev.test" ./rdma/rdmadev) ||
	log "note: rdma/rdmadev's tests do not build; the 'rdmadev' scenario will fail"
install -m 0755 "$HERE/../lab.sh" "$work/extra/bin/lab.sh"
install -m 0755 "$HERE/allreduce.sh" "$work/extra/bin/allreduce.sh"
for b in "$work"/extra/bin/*; do
	{ ldd "$b" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}' | while read -r l; do copy_into "$work/extra" "$l"; done
done

# p4app-switchML's C++ client (scenario allreduce-p4app), built from
# ../shared/interop/p4app-switchml beside the repository with its build.sh
# (cached per content of that directory) and put in the guest under
# /opt/p4app with its ldd libraries. If it cannot be had, /opt/p4app/unavailable
# says why ("SKIP: …" or "FAIL: …") and the scenario reports that; with CI
# set a SKIP is a failure (verdict below).
P4APP_DIR=${SWML_P4APP_DIR:-$REPO/../shared/interop/p4app-switchml}
p4app_unavailable() { # SKIP|FAIL reason
	log "allreduce-p4app: $1: $2"
	mkdir -p "$work/extra/opt/p4app"
	echo "$1: $2" >"$work/extra/opt/p4app/unavailable"
}
if [[ " ${scenarios[*]} " == *" allreduce-p4app"[\ -]* || " ${scenarios[*]} " == *" rxe-bench "* ]]; then
	if [ ! -x "$P4APP_DIR/build.sh" ]; then
		p4app_unavailable SKIP "no p4app-switchML client sources at $P4APP_DIR (set SWML_P4APP_DIR; see docs/interop.md)"
	else
		t1=$SECONDS
		p4key=$(cd "$P4APP_DIR" && cat build.sh ./*.tar.* patches/* switchml.cfg.example | sha256sum | cut -c1-12)
		p4dir=$CACHE/p4app-$p4key
		if [ ! -e "$p4dir/.done" ]; then
			log "building p4app-switchML's client ($P4APP_DIR/build.sh, cached in $p4dir)"
			rm -rf "$p4dir" && mkdir -p "$p4dir"
			if p4bin=$(timeout 900 "$P4APP_DIR/build.sh" "$p4dir/build" 2>"$p4dir/build.err") &&
				[ -x "$p4bin/allreduce_benchmark" ]; then
				mkdir -p "$p4dir/bin" && cp "$p4bin/allreduce_benchmark" "$p4bin/hello_world" "$p4dir/bin/"
				rm -rf "$p4dir/build/src"
				touch "$p4dir/.done"
				log "p4app client built in $((SECONDS - t1)) s"
			fi
		fi
		if [ -e "$p4dir/.done" ]; then
			mkdir -p "$work/extra/opt/p4app"
			cp "$p4dir"/bin/* "$P4APP_DIR/switchml.cfg.example" "$work/extra/opt/p4app/"
			for b in "$p4dir"/bin/*; do
				{ ldd "$b" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}' | while read -r l; do copy_into "$work/extra" "$l"; done
			done
		else
			why="$P4APP_DIR/build.sh failed: $(tail -3 "$p4dir/build.err" "$p4dir/build/build.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
			if [ "$(id -u)" != 0 ]; then
				p4app_unavailable SKIP "$why (not root: its packages may be missing; run as root or see build.sh)"
			else
				p4app_unavailable FAIL "$why"
			fi
		fi
	fi
fi
(cd "$work/extra" && find . | cpio -o -H newc --quiet) >"$work/extra.cpio"
cat "$base" "$work/extra.cpio" >"$work/initramfs.cpio"
log "binaries built and packed in $((SECONDS - t0)) s"

# ---------------------------------------------------------------- boot
list=$(IFS=,; echo "${scenarios[*]}")
log "booting $kpkg with scenarios: $list"
t0=$SECONDS
set +e
timeout --foreground -k 10 "$QEMU_TIMEOUT" qemu-system-x86_64 \
	-accel tcg,thread=multi -cpu max -smp 2 -m 1024 \
	-nographic -no-reboot -nic none \
	-kernel "$kdir/vmlinux" -initrd "$work/initramfs.cpio" \
	-append "console=ttyS0 panic=-1 quiet swml.scenarios=$list swml.timeout=$SCENARIO_TIMEOUT swml.msgsize=${SWML_TEST_MSG_SIZE:-1KiB} swml.bench=${SWML_BENCH_SIZE:-4MiB},${SWML_BENCH_ITERS:-3},${SWML_BENCH_TIMEOUT:-300},${SWML_BENCH_QPS:-8} swml.benchspin=${SWML_BENCH_SPIN:-1ms} ${SWML_GUEST_APPEND:-}" \
	</dev/null >"$work/console.log" 2>&1
qrc=$?
set -e
tr -d '\r' <"$work/console.log" >"$work/console.txt"
log "guest ran $((SECONDS - t0)) s (qemu exit $qrc)"
[ $qrc = 124 ] && log "guest timed out after $QEMU_TIMEOUT s"

# Blobs: the guest prints "SWML-BLOB-BEGIN <name>", base64 lines, "SWML-BLOB-END".
if [ -n "${SWML_ARTIFACTS:-}" ]; then
	mkdir -p "$SWML_ARTIFACTS"
	awk -v dir="$SWML_ARTIFACTS" '
		/^SWML-BLOB-BEGIN /{name=$2; f=dir "/" name ".b64"; printf "" > f; on=1; next}
		/^SWML-BLOB-END/{on=0; close(f); next}
		on{print >> f}' "$work/console.txt"
	for f in "$SWML_ARTIFACTS"/*.b64; do
		[ -e "$f" ] || continue
		base64 -d <"$f" >"${f%.b64}" && rm "$f"
		log "artifact ${f%.b64}"
	done
fi

# ---------------------------------------------------------------- verdict
grep -v '^SWML-BLOB\|^[A-Za-z0-9+/=]\{76\}$' "$work/console.txt" | sed 's/^/guest| /' >&2 || true
fail=0
# Summary: scenario, result, guest seconds, rxe0 packets received/sent
# (hw_counters deltas guest-init.sh printed; "-" if none).
summary=$(printf '%-24s %-6s %9s %10s %10s\n' scenario result seconds rxe-rcvd rxe-sent)
for s in "${scenarios[@]}"; do
	line=$(grep -a "^SWML-RESULT $s " "$work/console.txt" | tail -1 || true)
	t0=$({ grep -a "^guest: === scenario $s " "$work/console.txt" || true; } | tail -1 | sed 's/.*t=\([0-9.]*\) s.*/\1/')
	t1=$(printf '%s\n' "$line" | sed -n 's/.* t=\([0-9.]*\)$/\1/p')
	dur=-
	[ -n "$t0" ] && [ -n "$t1" ] && dur=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
	cnt=$({ grep -a "^SWML-COUNTERS $s " "$work/console.txt" || true; } | tail -1 | cut -d' ' -f3,4)
	rcvd=${cnt% *} sent=${cnt#* }
	[ -n "$cnt" ] || rcvd=- sent=-
	case $line in
	*" PASS"*) res=PASS; echo "PASS $s" ;;
	*" SKIP"*)
		res=SKIP
		why=$(printf '%s\n' "${line#*SKIP }" | sed 's/ t=[0-9.]*$//')
		if [ -n "${CI:-}" ]; then
			echo "FAIL $s: skipped, and CI is set (the real stack must run in CI): $why"
			fail=1
			res=FAIL
		else
			echo "SKIP $s: $why"
		fi
		;;
	*" FAIL"*) res=FAIL; echo "FAIL $s"; fail=1 ;;
	*) res=FAIL; echo "FAIL $s (no result marker: guest crashed or timed out)"; fail=1 ;;
	esac
	summary+=$'\n'$(printf '%-24s %-6s %9s %10s %10s' "$s" "$res" "$dur" "$rcvd" "$sent")
done
grep -q '^SWML-DONE' "$work/console.txt" || { log "guest did not reach SWML-DONE"; fail=1; }
echo
echo "$summary"
exit $fail
