#!/usr/bin/env bash
# lab.sh — a Soft-RoCE lab on a Linux host whose kernel has rdma_rxe.
#
#   lab.sh up      build it (idempotent): netns + veth + rxe0, addresses
#   lab.sh down    tear it down (idempotent)
#   lab.sh status  show what exists
#
# Layout (the same as the QEMU guest, testbed/soft-roce/qemu/guest-init.sh):
#   init netns:  veth0 10.0.0.1/24 fd00::1/64, rxe0 on veth0 (rxe owns UDP 4791 here)
#   netns peer:  veth1 10.0.0.2/24 fd00::2/64 — the userspace NIC (verbs/soft) or
#                the software switch lives here, on its own UDP 4791
# Both ends have MTU 9000 so every path MTU up to 4096 fits.
# Override names with SWML_LAB_NS, SWML_LAB_RXE, SWML_LAB_VETH (prefix).
set -euo pipefail

NS=${SWML_LAB_NS:-peer}
RXE=${SWML_LAB_RXE:-rxe0}
V=${SWML_LAB_VETH:-veth}
A4=10.0.0.1 B4=10.0.0.2 A6=fd00::1 B6=fd00::2
IP=/usr/sbin/ip
[ -x $IP ] || IP=$(command -v ip)

die() { echo "lab: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "run as root (network namespaces and rdma links need CAP_NET_ADMIN)"; }

up() {
	need_root
	command -v rdma >/dev/null || die "the rdma tool is missing: apt-get install iproute2"
	if [ ! -d /sys/module/rdma_rxe ]; then
		modprobe rdma_rxe 2>/dev/null || die "this kernel has no rdma_rxe module; use testbed/soft-roce/qemu/harness.sh instead"
	fi
	modprobe crc32_generic 2>/dev/null || true
	$IP netns list | grep -qw "^$NS" || $IP netns add "$NS"
	if ! $IP link show "${V}0" >/dev/null 2>&1; then
		$IP link add "${V}0" mtu 9000 type veth peer name "${V}1" mtu 9000
		$IP link set "${V}1" netns "$NS"
	fi
	$IP addr replace $A4/24 dev "${V}0"
	$IP -6 addr replace $A6/64 dev "${V}0" nodad
	$IP link set "${V}0" up
	$IP -n "$NS" link set lo up
	$IP -n "$NS" addr replace $B4/24 dev "${V}1"
	$IP -n "$NS" -6 addr replace $B6/64 dev "${V}1" nodad
	$IP -n "$NS" link set "${V}1" up
	rdma link show "$RXE/1" >/dev/null 2>&1 || rdma link add "$RXE" type rxe netdev "${V}0"
	for _ in $(seq 50); do grep -q ACTIVE "/sys/class/infiniband/$RXE/ports/1/state" 2>/dev/null && break; sleep 0.1; done
	grep -q ACTIVE "/sys/class/infiniband/$RXE/ports/1/state" || die "$RXE did not become ACTIVE"
	echo 0 >"/sys/class/infiniband/$RXE/ports/1/hw_counters/lifespan" 2>/dev/null || true
	status
	cat <<-NEXT

	lab is up. Next:
	  go run ./cmd/swml-rdma devices                       # rxe0, its RoCE v2 GIDs ($A4, $A6)
	  go build -tags ibverbs -o /tmp/interop ./internal/interop/cmd/interop
	  /tmp/interop -list                                   # the scenarios
	  /tmp/interop -scenario ibv-loopback                  # run one (as root, from this netns)
	  $IP netns exec $NS <cmd>                             # run a userspace peer on $B4 / $B6
	  tshark -i ${V}0 -Y infiniband                        # watch the RoCEv2 packets
	  $0 down                                              # tear it down
	NEXT
}

down() {
	need_root
	rdma link show "$RXE/1" >/dev/null 2>&1 && rdma link delete "$RXE"
	$IP link show "${V}0" >/dev/null 2>&1 && $IP link delete "${V}0"
	$IP netns list | grep -qw "^$NS" && $IP netns delete "$NS"
	echo "lab: down"
}

status() {
	echo "== rdma links"
	rdma link show 2>/dev/null || echo "(none)"
	echo "== ${V}0 (init netns)"
	$IP -brief addr show "${V}0" 2>/dev/null || echo "(missing)"
	echo "== ${V}1 (netns $NS)"
	$IP -n "$NS" -brief addr show "${V}1" 2>/dev/null || echo "(missing)"
	if [ -d "/sys/class/infiniband/$RXE" ]; then
		echo "== $RXE GIDs (index type address)"
		# One grep over the (1024-entry) table; only populated entries have a type.
		grep -Hv '^0000:0000:0000:0000:0000:0000:0000:0000$' /sys/class/infiniband/$RXE/ports/1/gids/* 2>/dev/null |
			while IFS=: read -r path gid; do
				i=${path##*/}
				t=$(cat "/sys/class/infiniband/$RXE/ports/1/gid_attrs/types/$i" 2>/dev/null) || continue
				echo "$i $t $gid"
			done
		echo "== $RXE counters: rcvd_pkts $(cat /sys/class/infiniband/$RXE/ports/1/hw_counters/rcvd_pkts) sent_pkts $(cat /sys/class/infiniband/$RXE/ports/1/hw_counters/sent_pkts)"
	fi
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
*) die "usage: $0 up|down|status" ;;
esac
