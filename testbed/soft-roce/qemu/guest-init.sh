#!/bin/busybox sh
# /init of the Soft-RoCE test guest (see harness.sh). Loads rxe, builds the
# lab, runs the scenarios named on the kernel command line
# (swml.scenarios=a,b,c) and prints one "SWML-RESULT <name> PASS|FAIL|SKIP"
# line per scenario, then SWML-DONE, then powers off.
/bin/busybox mkdir -p /proc /sys /dev /run /tmp
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/usr/sbin
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:/usr/lib64
IP=/usr/sbin/ip # iproute2; a bare "ip" is busybox's applet

halt() {
	echo "SWML-DONE t=$(cut -d" " -f1 /proc/uptime) s"
	sync
	poweroff -f
	sleep 5
}

scenarios=
timeout_s=120
for kv in $(cat /proc/cmdline); do
	case $kv in
	swml.scenarios=*) scenarios=${kv#swml.scenarios=} ;;
	swml.timeout=*) timeout_s=${kv#swml.timeout=} ;;
	swml.msgsize=*) export SWML_TEST_MSG_SIZE=${kv#swml.msgsize=} ;;
	swml.benchspin=*) export SWML_BENCH_SPIN=${kv#swml.benchspin=} ;; # rxe-bench: the defaults also with --busy-poll (off: not)
	swml.bench=*) # size,iters,timeout,qps of rxe-bench
		IFS=, read -r SWML_BENCH_SIZE SWML_BENCH_ITERS SWML_BENCH_TIMEOUT SWML_BENCH_QPS <<EOF
${kv#swml.bench=}
EOF
		export SWML_BENCH_SIZE SWML_BENCH_ITERS SWML_BENCH_TIMEOUT SWML_BENCH_QPS
		;;
	esac
done
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
ulimit -l unlimited 2>/dev/null

setup_failed() {
	echo "guest: lab setup failed: $*"
	for s in $(echo "$scenarios" | tr , ' '); do echo "SWML-RESULT $s FAIL (lab setup: $*)"; done
	halt
}

echo "guest: init started at $(cut -d" " -f1 /proc/uptime) s"
for m in $(cat /lib/modules/load-order); do
	insmod "/lib/modules/$m" || setup_failed "insmod $m"
done

# Lab: rxe0 on veth0 (init netns, 10.0.0.1 / fd00::1); the userspace peer
# lives in netns "peer" on veth1 (10.0.0.2 / fd00::2). rxe owns UDP 4791 in
# the init netns, so the soft NIC must be in another one.
$IP link set lo up
$IP netns add peer || setup_failed "ip netns add"
$IP link add veth0 mtu 9000 type veth peer name veth1 mtu 9000 || setup_failed "veth"
$IP link set veth1 netns peer
$IP addr add 10.0.0.1/24 dev veth0
$IP -6 addr add fd00::1/64 dev veth0 nodad
$IP link set veth0 up
$IP -n peer link set lo up
$IP -n peer addr add 10.0.0.2/24 dev veth1
$IP -n peer -6 addr add fd00::2/64 dev veth1 nodad
$IP -n peer link set veth1 up
rdma link add rxe0 type rxe netdev veth0 || setup_failed "rdma link add rxe0"
i=0
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
	i=$((i + 1))
	[ $i -gt 100 ] && setup_failed "rxe0 port never became ACTIVE"
	sleep 0.1
done
# The IPv6 GIDs appear once the addresses are usable.
i=0
until grep -q 'fd00' /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null || cat /sys/class/infiniband/rxe0/ports/1/gids/* | grep -q '^fd00:0000'; do
	i=$((i + 1))
	[ $i -gt 50 ] && break
	sleep 0.1
done
# hw_counters are cached for "lifespan" ms; scenarios compare exact deltas.
echo 0 >/sys/class/infiniband/rxe0/ports/1/hw_counters/lifespan 2>/dev/null
echo "guest: lab up after $(cut -d" " -f1 /proc/uptime) s: rxe0 $(cat /sys/class/infiniband/rxe0/ports/1/state), kernel $(uname -r)"

blob() { # name command...
	local name=$1
	shift
	echo "SWML-BLOB-BEGIN $name"
	"$@" | base64
	echo "SWML-BLOB-END"
}

# capture_sysfs copies the rxe0 sysfs tree (regular files and the symlinks
# the discovery code follows) into a tarball, for rdma/rdmadev/testdata/sysfs.
capture_sysfs() {
	d=/tmp/cap
	rm -rf $d
	mkdir -p $d/class/infiniband $d/class/net $d/class/infiniband_verbs
	real=$(readlink -f /sys/class/infiniband/rxe0)
	cp_tree() { # src dst
		mkdir -p "$2"
		for f in "$1"/*; do
			n=${f##*/}
			if [ -L "$f" ]; then
				case $n in device | subsystem | driver | power) continue ;; esac
				ln -s "$(readlink "$f")" "$2/$n"
			elif [ -d "$f" ]; then
				case $n in power) continue ;; esac
				cp_tree "$f" "$2/$n"
			elif [ -r "$f" ]; then
				cat "$f" >"$2/$n" 2>/dev/null || rm -f "$2/$n"
			fi
		done
	}
	cp_tree "$real" "$d/devices/virtual/infiniband/rxe0"
	ln -s ../../devices/virtual/infiniband/rxe0 $d/class/infiniband/rxe0
	for n in veth0 lo; do
		mkdir -p $d/class/net/$n
		for f in address ifindex mtu operstate type; do cat /sys/class/net/$n/$f >$d/class/net/$n/$f; done
	done
	(cd $d && tar czf - .)
}

run_one() { # scenario
	case $1 in
	smoke)
		rdma link show && ibv_devinfo -v -d rxe0 | head -40 &&
			cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/* 2>/dev/null | sort | uniq -c &&
			cat /sys/class/infiniband/rxe0/ports/1/gids/0 /sys/class/infiniband/rxe0/ports/1/gids/1
		;;
	capture-sysfs) blob rxe-sysfs.tar.gz capture_sysfs ;;
	devices) /bin/swml-rdma devices && /bin/swml-rdma devices --json >/tmp/devices.json && cat /tmp/devices.json &&
		grep -q '"rcvd_pkts"' /tmp/devices.json ;;
	rdmadev) /bin/rdmadev.test -test.v -test.run 'TestHostMatchesOwnReader|TestListDevicesHost' ;;
	lab-script)
		# The host lab script must tear down and rebuild this very lab,
		# idempotently, and leave it working.
		bash /bin/lab.sh down && bash /bin/lab.sh down && bash /bin/lab.sh up && bash /bin/lab.sh up >/dev/null &&
			timeout "$timeout_s" /bin/interop -scenario ibv-loopback
		;;
	allreduce-* | worker-killed | rxe-bench) timeout "$timeout_s" bash /bin/allreduce.sh "$1" ;;
	*) timeout "$timeout_s" /bin/interop -scenario "$1" ;;
	esac
}

for s in $(echo "$scenarios" | tr , ' '); do
	echo "guest: === scenario $s (t=$(cut -d" " -f1 /proc/uptime) s)"
	c=/sys/class/infiniband/rxe0/ports/1/hw_counters
	r0=$(cat $c/rcvd_pkts) s0=$(cat $c/sent_pkts)
	rm -f /tmp/skip-reason
	run_one "$s"
	rc=$?
	# rxe0's packet counters over the scenario, for the harness's summary.
	echo "SWML-COUNTERS $s $(($(cat $c/rcvd_pkts) - r0)) $(($(cat $c/sent_pkts) - s0))"
	case $rc in
	0) echo "SWML-RESULT $s PASS t=$(cut -d" " -f1 /proc/uptime)" ;;
	77) echo "SWML-RESULT $s SKIP ($(cat /tmp/skip-reason 2>/dev/null || echo scenario reported it cannot run)) t=$(cut -d" " -f1 /proc/uptime)" ;;
	143 | 124) echo "SWML-RESULT $s FAIL (timed out after ${timeout_s}s) t=$(cut -d" " -f1 /proc/uptime)" ;;
	*) echo "SWML-RESULT $s FAIL (exit $rc) t=$(cut -d" " -f1 /proc/uptime)" ;;
	esac
done
halt
