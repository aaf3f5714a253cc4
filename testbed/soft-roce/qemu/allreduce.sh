#!/bin/bash
# allreduce.sh — the all-reduce scenarios of the Soft-RoCE guest (see
# harness.sh and guest-init.sh, which runs "bash /bin/allreduce.sh NAME").
#
# Lab (built by guest-init.sh): rxe0 on veth0 in the init netns (10.0.0.1,
# fd00::1); netns "peer" on veth1 (10.0.0.2, fd00::2). Here:
#   - `swml-rdma switch` (software switch + controller) runs in netns peer,
#     at 10.0.0.2 or fd00::2: it is a different host as far as rxe knows;
#   - `swml-rdma worker --nic ibverbs` processes run in the init netns and
#     share rxe0 (one GID, distinct QPs), --addr choosing the GID;
#   - userspace-NIC workers (--nic soft) run in netns peer at 10.0.0.3+.
# Every worker checks every result (int32 exact, float32 against the
# float64 reference and bit-identical across ranks) and exits 1 on a
# mismatch; a scenario passes only if every process did what it must.
# Every step is bounded by a timeout; nothing asserts speed.
#
# Exit status: 0 pass, 1 fail. guest-init.sh reports the scenario's rxe0
# hw_counters deltas for the harness's summary.
set -u
SW=/bin/swml-rdma
IP=/usr/sbin/ip
CNT=/sys/class/infiniband/rxe0/ports/1/hw_counters
T=${SWML_STEP_TIMEOUT:-90} # seconds per job
LOG=/tmp/allreduce
mkdir -p $LOG
# Small jobs: TCG runs rxe's kernel code at a few MB/s. One-packet
# messages (WRITE ONLY with immediate) by default (SWML_TEST_MSG_SIZE): p4app's
# shape. 64 KiB is 32 messages per QP, enough to wrap its slots.
JOB=(--size 64KiB --iters 3 --warmup 1 --packet-size 1024 --msg-size ${SWML_TEST_MSG_SIZE:-1KiB} --qps 2 --connect-timeout 30s --json)
# The worker's defaults (1 KiB packets, 16 KiB messages, 8 QPs, --writes
# auto): a job with an rxe worker sends packet writes on every worker, as
# the controller tells them (docs/protocol.md "Message writes and packet
# writes"), because rxe's UC responder wedges when a multi-packet WRITE
# loses a packet (docs/testbed.md, "Known limit"). 128 KiB is one message per
# QP per call, in set 0 and set 1 in turn.
ITERS=3 WARMUP=1
DEFAULTS=(--size 128KiB --iters $ITERS --warmup $WARMUP --connect-timeout 30s --json)

say() { echo "allreduce: $*"; }
fail() {
	say "FAIL: $*"
	# What the switch saw and what rxe counted, for the console log.
	say "switch log (tail):"
	tail -20 $LOG/switch.log 2>/dev/null
	say "switch metrics:"
	switch_metric_dump | grep -E '^swml_(switch|controller)_' | grep -v ' 0$' | head -40
	say "rxe0 hw_counters (non-zero):"
	for f in $CNT/*; do v=$(cat "$f" 2>/dev/null); [ "$v" != 0 ] && echo "  ${f##*/} $v"; done
	exit 1
}

counter() { cat $CNT/"$1" 2>/dev/null || echo 0; }

swpid=
start_switch() { # family extra-switch-flags...
	local fam=$1
	shift
	stop_switch
	if [ "$fam" = 6 ]; then
		SWADDR=fd00::2 CTRL="[fd00::2]:50051" WADDR=fd00::1
	else
		SWADDR=10.0.0.2 CTRL=10.0.0.2:50051 WADDR=10.0.0.1
	fi
	# rxe computes the ICRC of IPv4 packets over the IPv4 ID it chose, which
	# a UDP socket does not see: verify-ipv6 checks IPv6 requests only.
	$IP netns exec peer $SW switch --addr $SWADDR --controller-addr $CTRL --metrics-addr 127.0.0.1:9400 \
		--icrc verify-ipv6 --session-timeout 60s --log-level ${SWML_SWITCH_LOG:-info} "$@" >$LOG/switch.log 2>&1 &
	swpid=$!
	sleep 0.5
	kill -0 $swpid 2>/dev/null || {
		cat $LOG/switch.log
		fail "switch did not start"
	}
}
stop_switch() {
	[ -n "$swpid" ] || return 0
	kill -TERM $swpid 2>/dev/null
	wait $swpid 2>/dev/null
	swpid=
}
trap 'stop_switch; [ -n "${victim:-}" ] && kill -KILL $victim 2>/dev/null' EXIT

switch_metric_dump() { $IP netns exec peer wget -q -O - http://127.0.0.1:9400/metrics 2>/dev/null; }
switch_metric() { # name: its value from the switch's /metrics
	switch_metric_dump | awk -v n="$1" '$1==n{print $2; exit}'
}

# run_job tag session workers dtype nics...: runs one worker per nic
# (ibverbs or soft), waits for all (bounded), fails unless all passed.
# Leaves each rank's JSON in $LOG/tag.RANK.json.
run_job() {
	local tag=$1 sid=$2 n=$3 dtype=$4
	shift 4
	local pids=() r=0 nic
	for nic in "$@"; do
		if [ "$nic" = ibverbs ]; then
			timeout $T $SW worker --nic ibverbs --addr $WADDR --controller $CTRL --session-id $sid \
				--rank $r --workers $n --dtype $dtype "${JOB[@]}" >$LOG/$tag.$r.json 2>$LOG/$tag.$r.log &
		else
			local a=10.0.0.$((3 + r))
			[ "$WADDR" = fd00::1 ] && a=fd00::$((3 + r))
			timeout $T $IP netns exec peer $SW worker --nic soft --addr $a --controller $CTRL --session-id $sid \
				--rank $r --workers $n --dtype $dtype "${JOB[@]}" >$LOG/$tag.$r.json 2>$LOG/$tag.$r.log &
		fi
		pids+=($!)
		r=$((r + 1))
	done
	local bad=0
	for r in "${!pids[@]}"; do
		if ! wait "${pids[$r]}"; then
			bad=1
			say "$tag rank $r ($(sed -n $((r + 1))p <<<"$(printf '%s\n' "$@")")) failed:"
			tail -5 $LOG/$tag.$r.log
		elif ! grep -q '"verified": true' $LOG/$tag.$r.json; then
			bad=1
			say "$tag rank $r printed no verified result"
		fi
	done
	say "job $tag: rxe0 rcvd_pkts $(counter rcvd_pkts) sent_pkts $(counter sent_pkts) rdma_recvs $(counter rdma_recvs) (totals)"
	[ $bad = 0 ] || fail "job $tag"
	say "job $tag: $n workers ($*), $dtype: every result verified"
}

# all_packet_writes tag workers: every rank of the job sent packet writes
# in every call, warm-up included (the job's choice, not a flag).
all_packet_writes() {
	local r calls=$((ITERS + WARMUP))
	for r in $(seq 0 $(($2 - 1))); do
		grep -Eq "\"packet_write_calls\": $calls(,|\$)" $LOG/$1.$r.json ||
			fail "$1 rank $r: $(grep -o '"packet_write_calls": [0-9]*' $LOG/$1.$r.json) of $calls calls sent packet writes"
	done
	say "job $1: every rank sent packet writes in all $calls calls"
}

digest() { # tag rank: the rank's result digest
	sed -n 's/.*"result_sha256": "\([0-9a-f]*\)".*/\1/p' $LOG/$1.$2.json
}

# Soft workers live in netns peer next to the switch.
add_soft_addrs() {
	local i
	for i in 3 4 5 6; do
		$IP -n peer addr add 10.0.0.$i/24 dev veth1 2>/dev/null
		$IP -n peer -6 addr add fd00::$i/64 dev veth1 nodad 2>/dev/null
	done
}

# p4app_setup prepares the guest for p4app-switchML's client:
#   - GID index 2 = 10.0.0.1. p4app registers the IPv4 of GID index 2
#     (hard-coded, rdma_endpoint.cc GetIPv4) and uses switchml.cfg's gid_index
#     as its QPs' source GID. rxe has one (RoCE v2) GID per address; as the
#     lab is built, index 1 is 10.0.0.1 and 2 is fd00::1. Re-adding the
#     addresses after a placeholder one moves 10.0.0.1 to index 2 (the other
#     scenarios find their GID by address, so the order is theirs to ignore);
#   - hugepages: the client maps its buffer with MAP_HUGETLB at 1 << 44
#     (one 2 MiB page per process with switchml.cfg.example's window).
P4GID_PLACEHOLDER=192.168.254.1/32
P4=/opt/p4app
p4app_setup() {
	local g=/sys/class/infiniband/rxe0/ports/1/gids/2 i=0 why
	# harness.sh leaves /opt/p4app/unavailable ("SKIP: …"/"FAIL: …") when
	# it could not build the client.
	if [ -e $P4/unavailable ]; then
		why=$(cat $P4/unavailable)
		say "$why"
		case $why in SKIP:*) echo "${why#SKIP: }" >/tmp/skip-reason; exit 77 ;; esac
		exit 1
	fi
	[ -x $P4/allreduce_benchmark ] || fail "$P4/allreduce_benchmark is not in the guest"
	$IP -6 addr del fd00::1/64 dev veth0
	$IP addr del 10.0.0.1/24 dev veth0
	$IP addr add $P4GID_PLACEHOLDER dev veth0
	sleep 0.2 # the GID table follows address events from a workqueue
	$IP addr add 10.0.0.1/24 dev veth0
	sleep 0.2
	$IP -6 addr add fd00::1/64 dev veth0 nodad
	until [ "$(cat $g 2>/dev/null)" = 0000:0000:0000:0000:0000:ffff:0a00:0001 ]; do
		i=$((i + 1))
		[ $i -gt 50 ] && fail "rxe0 GID index 2 is $(cat $g 2>/dev/null), not 10.0.0.1 (p4app's client reads its IPv4 there): $(cat /sys/class/infiniband/rxe0/ports/1/gids/[0-4] | tr '\n' ' ')"
		sleep 0.1
	done
	echo 8 >/proc/sys/vm/nr_hugepages
	grep -q '^HugePages_Total: *[1-9]' /proc/meminfo || fail "no hugepages in the guest (p4app's client needs MAP_HUGETLB)"
	say "p4app set-up: rxe0 GID 2 = 10.0.0.1, $(grep HugePages_Total /proc/meminfo | tr -s ' ')"
}
p4app_teardown() {
	$IP addr del $P4GID_PLACEHOLDER dev veth0 2>/dev/null
	echo 0 >/proc/sys/vm/nr_hugepages
}

# p4app_job tag type err: one job of $P4WORKERS (default 2) workers of p4app's allreduce_benchmark
# (--verify, --err percent; 0 = exact for int32 with patch 03) on the switch
# started last. Each rank runs in its own directory with its switchml.cfg:
# switchml.cfg.example with its rank and the client's retransmission timer
# at $P4TIMER ms (default 5000 instead of the example's 100). Under TCG a
# result can take longer than 100 ms; the timer then resends, the switch
# answers the resend with a duplicate result, and p4app's client, whose one
# buffer per QP is both send source and result target, can send that result
# as its next message's data: with 100 ms this scenario got wrong sums (the
# same on both ranks) without any loss (docs/interop.md, P3).
# Returns 0 when both ranks verified, 1 when the switch refused rank 0's
# registration (reason in $p4why), 2 otherwise (wrong sums, a crash or a
# timeout; printed).
P4TIMER=5000
P4NUMEL=16384 P4JOBS=2
p4why=
p4app_job() {
	local tag=$1 ty=$2 err=$3 pids=() r d t0 n=${P4WORKERS:-2} live rcs=()
	t0=$(cut -d' ' -f1 /proc/uptime)
	for r in $(seq 0 $((n - 1))); do
		d=$LOG/$tag.$r.d
		mkdir -p $d
		sed -e "s/^rank = .*/rank = $r/" -e "s/^num_workers = .*/num_workers = $n/" -e "s/^timeout = .*/timeout = $P4TIMER/" \
			$P4/switchml.cfg.example >$d/switchml.cfg
		(cd $d && ulimit -c 0 && SWITCHML_NO_BIND=1 GLOG_logtostderr=1 exec timeout $T $P4/allreduce_benchmark --tensor-type $ty \
			--tensor-numel $P4NUMEL --num-warmup-jobs 1 --num-jobs $P4JOBS --verify 1 --err $err) >$LOG/$tag.$r.log 2>&1 &
		pids+=($!)
	done
	# A refused registration is a glog CHECK failure in rank 0 (abort);
	# the other ranks would wait in the Barrier until their deadline: as
	# soon as one rank has failed a check, end the others.
	while :; do
		live=0
		for r in "${pids[@]}"; do kill -0 "$r" 2>/dev/null && live=1; done
		[ $live = 1 ] || break
		grep -qs '^F[0-9]' $LOG/$tag.*.log && break
		sleep 0.2
	done
	sleep 0.5
	kill -KILL "${pids[@]}" 2>/dev/null
	for r in "${pids[@]}"; do
		wait "$r" 2>/dev/null
		rcs+=($?)
	done
	local rc0=${rcs[0]}
	say "job $tag: ended after $(awk -v a="$t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN{printf "%.1f", b-a}') s (exit status by rank: ${rcs[*]})"
	# Running totals since the switch started: packets, retransmissions
	# (resends p4app's timer made), unicasts (those answered into a
	# completed slot: duplicate results), drops.
	say "job $tag: rxe0 rcvd_pkts $(counter rcvd_pkts) sent_pkts $(counter sent_pkts); switch:" \
		"$(switch_metric_dump | grep -E '^swml_(switch_(packets|retransmissions|unicasts|drops)_total|controller_(sessions_active|sessions_ended_total|pool_slots_used))' |
			grep -v ' 0$' | sed 's/^swml_//' | tr '\n' ' ')(totals)"
	if [ $rc0 != 0 ] && grep -q 'Error contacting coordinator' $LOG/$tag.0.log; then
		p4why=$(grep -o 'Error contacting coordinator.*' $LOG/$tag.0.log | head -1)
		say "job $tag: rank 0 was refused: $p4why"
		return 1
	fi
	local bad=0
	for r in $(seq 0 $((n - 1))); do
		if ! grep -q 'Data verified successfully' $LOG/$tag.$r.log; then
			bad=1
			say "$tag rank $r (exit ${rcs[$r]}) did not verify:"
			{ grep -h 'Verification\|^F[0-9]' $LOG/$tag.$r.log || grep -v '^\s*$' $LOG/$tag.$r.log; } | sed -n '1,3p;$p'
		fi
	done
	[ $bad = 0 ] || return 2
	say "job $tag: $n p4app workers, $ty: $(grep -h 'Data verified' $LOG/$tag.0.log) (every rank; $(grep -h '^Median' $LOG/$tag.0.log))"
}

sid=100
case ${1:-} in
allreduce-ibverbs)
	# The worker's defaults (DEFAULTS: no --msg-size, no --writes).
	JOB=("${DEFAULTS[@]}")
	for fam in 4 6; do
		start_switch $fam
		for n in 2 4; do
			for dt in float32 int32; do
				sid=$((sid + 1))
				nics=()
				for _ in $(seq $n); do nics+=(ibverbs); done
				run_job ib$fam-$n-$dt $sid $n $dt "${nics[@]}"
				all_packet_writes ib$fam-$n-$dt $n
				# Every rank ends with the same bytes.
				d0=$(digest ib$fam-$n-$dt 0)
				[ -n "$d0" ] || fail "no result digest from rank 0"
				for r in $(seq 1 $((n - 1))); do
					[ "$(digest ib$fam-$n-$dt $r)" = "$d0" ] || fail "ib$fam-$n-$dt: rank $r's result differs from rank 0's"
				done
			done
		done
		stop_switch
	done
	;;
allreduce-mixed)
	# The worker's defaults: the soft workers send packet writes too, as
	# the controller tells every worker of a job with an rxe one.
	JOB=("${DEFAULTS[@]}")
	add_soft_addrs
	for fam in 4 6; do
		# The soft workers call the controller from inside the switch's
		# netns, so the gRPC peer address is the switch's own, not the RoCE
		# address they register: allow the mismatch.
		start_switch $fam --allow-address-mismatch
		for dt in float32 int32; do
			sid=$((sid + 1))
			run_job mixed$fam-$dt $sid 4 $dt ibverbs soft ibverbs soft
			all_packet_writes mixed$fam-$dt 4
			d0=$(digest mixed$fam-$dt 0)
			for r in 1 2 3; do
				[ "$(digest mixed$fam-$dt $r)" = "$d0" ] || fail "mixed$fam-$dt: rank $r's result differs from rank 0's"
			done
		done
		stop_switch
	done
	;;
allreduce-ibverbs-loss)
	# The same job with and without 1% loss at the switch (ingress and
	# egress): the results must be the same bytes.
	for dt in float32 int32; do
		start_switch 4
		sid=$((sid + 1))
		run_job clean-$dt $sid 4 $dt ibverbs ibverbs ibverbs ibverbs
		start_switch 4 --loss 0.01
		sid=$((sid + 1))
		run_job lossy-$dt $sid 4 $dt ibverbs ibverbs ibverbs ibverbs
		for r in 0 1 2 3; do
			a=$(digest clean-$dt $r) b=$(digest lossy-$dt $r)
			[ -n "$a" ] && [ "$a" = "$b" ] || fail "$dt rank $r: result with 1% loss ($b) differs from the loss-free one ($a)"
		done
		say "$dt: results with 1% loss are bit-identical to the loss-free run"
		grep -h '"retransmissions"' $LOG/lossy-$dt.*.json | tr -d ' ,' | sed 's/^/allreduce: lossy /'
	done
	stop_switch
	;;
allreduce-packet-writes)
	# 16-packet messages on rxe, which only packet writes make possible
	# (docs/protocol.md "Message writes and packet writes"): every WRITE in
	# both directions is a one-packet one. With and without 1% loss; the
	# results must be the same bytes, and int32 the same as with one-packet
	# messages (exact sums do not depend on the message size).
	BASE=(--size 128KiB --iters 3 --warmup 1 --packet-size 1024 --qps 2 --connect-timeout 30s --json)
	JOB=("${BASE[@]}" --msg-size 16KiB --writes packet)
	for dt in float32 int32; do
		start_switch 4
		sid=$((sid + 1))
		run_job pw-clean-$dt $sid 4 $dt ibverbs ibverbs ibverbs ibverbs
		start_switch 4 --loss 0.01
		sid=$((sid + 1))
		run_job pw-lossy-$dt $sid 4 $dt ibverbs ibverbs ibverbs ibverbs
		for r in 0 1 2 3; do
			a=$(digest pw-clean-$dt $r) b=$(digest pw-lossy-$dt $r)
			[ -n "$a" ] && [ "$a" = "$b" ] || fail "$dt rank $r: packet writes with 1% loss ($b) differ from the loss-free run ($a)"
			grep -q '"writes": "packet"' $LOG/pw-lossy-$dt.$r.json || fail "$dt rank $r: the worker did not report packet writes"
		done
		say "$dt: 16-packet messages as packet writes, with 1% loss bit-identical to the loss-free run"
		grep -h '"retransmissions"' $LOG/pw-lossy-$dt.*.json | tr -d ' ,' | sed 's/^/allreduce: lossy /'
		# The switch's gap notices (zero-length WRITE ONLY WITH
		# IMMEDIATE, docs/protocol.md "Gap notices") reached the
		# workers through rxe: a notice counts only once rxe completed
		# it, and the packets it named were resent; rxe sent the
		# workers' tail probes (zero-length writes too) to the switch.
		notices=$(grep -ho '"gap_notices": *[0-9]*' $LOG/pw-lossy-$dt.*.json | awk -F: '{s += $2} END {print s + 0}')
		resent=$(grep -ho '"notice_resends": *[0-9]*' $LOG/pw-lossy-$dt.*.json | awk -F: '{s += $2} END {print s + 0}')
		probes=$(grep -ho '"tail_probes": *[0-9]*' $LOG/pw-lossy-$dt.*.json | awk -F: '{s += $2} END {print s + 0}')
		[ "$notices" -gt 0 ] && [ "$resent" -gt 0 ] && [ "$probes" -gt 0 ] ||
			fail "$dt: with 1% loss the workers got $notices gap notices, resent $resent packets on them and sent $probes tail probes; rxe must send and complete zero-length writes"
		say "$dt: $notices gap notices completed by rxe, $resent packets resent on them, $probes tail probes sent"
	done
	sid=$((sid + 1))
	start_switch 4
	JOB=("${BASE[@]}" --msg-size 1KiB)
	run_job pw-onepkt-int32 $sid 4 int32 ibverbs ibverbs ibverbs ibverbs
	[ "$(digest pw-onepkt-int32 0)" = "$(digest pw-clean-int32 0)" ] || fail "int32: 16-packet packet writes and one-packet messages give different sums"
	say "int32: the same sums as one-packet messages"
	stop_switch
	;;
worker-killed)
	# A pool of exactly one job's slots (2 QPs × 1 packet per message): the
	# second job registers only if the first one's slots were freed.
	start_switch 4 --pool-size 2
	sid=$((sid + 1))
	pids=()
	for r in 0 1 2; do
		# Rank 1, the victim, runs without timeout(1) so that $! is the
		# worker itself; it is killed below, or by the EXIT trap.
		t=(timeout $T)
		[ $r = 1 ] && t=()
		"${t[@]}" $SW worker --nic ibverbs --addr $WADDR --controller $CTRL --session-id $sid \
			--rank $r --workers 3 --dtype float32 "${JOB[@]}" --iters 100000 >$LOG/kill.$r.json 2>$LOG/kill.$r.log &
		pids+=($!)
	done
	# Wait until every worker has joined and all-reduces are running.
	i=0
	until [ "$(grep -l 'joined job' $LOG/kill.*.log 2>/dev/null | wc -l)" = 3 ]; do
		i=$((i + 1))
		[ $i -gt 600 ] && fail "the 3 workers never joined (see $LOG)"
		sleep 0.1
	done
	sleep 2
	for p in "${pids[@]}"; do kill -0 $p 2>/dev/null || fail "a worker ended before the kill"; done
	victim=${pids[1]}
	t0=$(cut -d' ' -f1 /proc/uptime)
	kill -KILL "$victim"
	for r in 0 2; do
		wait "${pids[$r]}"
		rc=$?
		t1=$(cut -d' ' -f1 /proc/uptime)
		el=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')
		msg=$(grep -v '^\s*$' $LOG/kill.$r.log | tail -1)
		say "rank $r: exit $rc ${el}s after the kill: $msg"
		[ "$rc" = 1 ] || fail "rank $r exited $rc after rank 1 was killed (want 1: a failed job)"
		awk -v e="$el" 'BEGIN{exit !(e < 2)}' || fail "rank $r took ${el}s (> 2 s) to fail after rank 1 was killed"
		grep -qi 'rank 1\|peer\|gone\|abort\|keep-alive' <<<"$msg" || fail "rank $r's error does not say what happened: $msg"
	done
	wait "${pids[1]}" 2>/dev/null
	# The switch frees the dead job's slots and serves a new job.
	i=0
	until [ "$(switch_metric swml_controller_pool_slots_used)" = 0 ]; do
		i=$((i + 1))
		[ $i -gt 100 ] && fail "the switch still holds the dead job's slots after 10 s ($(switch_metric swml_controller_pool_slots_used) used)"
		sleep 0.1
	done
	say "switch freed the killed job's slots"
	sid=$((sid + 1))
	run_job after-kill $sid 2 int32 ibverbs ibverbs
	stop_switch
	;;
allreduce-p4app)
	# p4app-switchML's own C++ worker (RDMA backend, `allreduce_benchmark
	# --verify`), which harness.sh builds from ../shared/interop/p4app-switchml
	# into /opt/p4app, through `swml-rdma switch` on rxe: a float32 job, then
	# an int32 job (exact) right after it on the same switch, 2 workers each
	# (docs/interop.md, "p4app-switchML's client on rxe").
	p4app_setup
	start_switch 4
	p4app_job p4-float32 float 1
	rc=$?
	[ $rc = 0 ] || fail "p4app job p4-float32 ($([ $rc = 1 ] && echo "refused: $p4why" || echo "see above"))"
	# The second job on the same switch: p4app's workers never end their
	# session, so this needs the switch to end the finished p4app job when
	# a new p4app rank 0 registers.
	p4app_job p4-int32 int32 0
	second=$?
	[ $second = 2 ] && fail "p4app job p4-int32 (the second job on the switch)"
	if [ $second = 1 ]; then
		say "int32 again on a fresh switch, to check the sums anyway:"
		start_switch 4
		p4app_job p4-int32-fresh int32 0 || fail "p4app job p4-int32-fresh"
	fi
	if [ $second = 0 ]; then
		v=$(switch_metric 'swml_controller_sessions_ended_total{reason="replaced"}')
		[ "${v:-0}" = 1 ] || fail "the second p4app job ran, but the switch did not end the first one as replaced (swml_controller_sessions_ended_total{reason=\"replaced\"} ${v:-0}, want 1)"
		say "the switch ended the finished p4app job when the next job's rank 0 registered (reason \"replaced\")"
	fi
	# The project's own ibverbs workers on the same switch, in the shape of
	# p4app's jobs (64 KiB, 32 QPs, one 1 KiB packet per message), while a
	# finished p4app job may still hold slots [0, 32): they register
	# elsewhere in the pool. Their retransmissions are printed beside the
	# switch's counters (~85 % of packets were once resent in this lab).
	JOB=(--size 64KiB --iters 3 --warmup 1 --packet-size 1024 --msg-size 1KiB --qps 32 --connect-timeout 30s --json)
	sid=$((sid + 1))
	run_job own-int32 $sid 2 int32 ibverbs ibverbs
	for r in 0 1; do
		say "own-int32 rank $r: $(tr -d ' \n' <$LOG/own-int32.$r.json | grep -o '"median_ns":[0-9]*\|"packets":[0-9]*\|"retransmissions":[0-9]*' | tr '\n' ' ')"
	done
	stop_switch
	p4app_teardown
	[ $second = 0 ] || fail "a second p4app job right after the first on the same switch was refused: $p4why"
	say "p4app-switchML's client: float32 and int32 (exact) verified, two jobs back to back on one switch"
	;;
allreduce-p4app-loss)
	# A measurement, not in "all": p4app's client with its own 100 ms
	# timer, int32 jobs of 2 workers (exact: any wrong element shows), 6
	# without and 6 with --loss 0.01 at the switch, each job on a fresh
	# switch (a p4app job holds slots [0, 32) until it idles out). Prints
	# the tally and the switch's retransmissions and unicasts (duplicate
	# results); fails only if a job could not run. docs/interop.md,
	# "Known behaviour".
	p4app_setup
	P4TIMER=100
	for loss in 0 0.01; do
		ok=0 bad=0 rt=0 uc=0
		for i in 1 2 3 4 5 6; do
			start_switch 4 --loss $loss
			p4app_job p4loss-$loss-$i int32 0
			case $? in 0) ok=$((ok + 1)) ;; 1) fail "p4app job refused: $p4why" ;; *) bad=$((bad + 1)) ;; esac
			v=$(switch_metric swml_switch_retransmissions_total) w=$(switch_metric swml_switch_unicasts_total)
			rt=$((rt + ${v:-0})) uc=$((uc + ${w:-0}))
		done
		say "TALLY p4app timer ${P4TIMER} ms, loss $loss: $ok of 6 jobs verified, $bad wrong or failed; switch: $rt retransmissions, $uc duplicate results (unicasts)"
	done
	stop_switch
	p4app_teardown
	;;
rxe-bench)
	# A measurement, not in "all": the project's ibverbs workers, float32,
	# $SWML_BENCH_SIZE (default 4 MiB), 2 then 4 workers, $SWML_BENCH_QPS
	# QPs (default 8, the worker's), 1 KiB
	# packets, in the two shapes rxe accepts (explicit message writes are
	# refused on rxe: tried first, it must fail in configuration): one
	# packet per message (p4app's shape) and the defaults, 16-packet
	# messages that the job sends as packet writes. Each job is bounded by
	# $SWML_BENCH_TIMEOUT s (default 300). Then p4app-switchML's client at
	# the same size with its own 100 ms timer as the reference, when
	# harness.sh could build it (docs/testbed.md, "rxe-bench").
	# Prints per job: each rank's median,
	# packets and retransmissions (--json), the worker's timer counters
	# (its /metrics, scraped while it runs: they survive a timeout), the
	# switch's counters, rxe0's hw_counters and the UDP drop counters of
	# both namespaces (rises over the job). Fails only on a wrong result or
	# a job that could not start; a job past its bound is a measurement.
	BT=${SWML_BENCH_TIMEOUT:-300}
	BSIZE=${SWML_BENCH_SIZE:-4MiB}
	JOB=(--size $BSIZE --iters ${SWML_BENCH_ITERS:-3} --warmup 1 --qps ${SWML_BENCH_QPS:-8} --connect-timeout 30s --json)
	# The guest's clock: every process reads it (Go's scheduler and the
	# engine often), and under emulation a clock the vDSO cannot read is a
	# system call and a device access per read.
	CS=/sys/devices/system/clocksource/clocksource0
	say "BENCH guest clocksource: $(cat $CS/current_clocksource 2>/dev/null) (available: $(cat $CS/available_clocksource 2>/dev/null))"
	bench_snap() { # file: rxe0 hw_counters and UDP counters of both netns
		{
			for f in $CNT/*; do [ "${f##*/}" = lifespan ] || echo "rxe.${f##*/} $(cat "$f")"; done
			awk '/^Udp:/{if(!h){split($0,k);h=1}else{for(i=2;i<=NF;i++)print "udp-init." k[i], $i}}' /proc/net/snmp
			$IP netns exec peer awk '/^Udp:/{if(!h){split($0,k);h=1}else{for(i=2;i<=NF;i++)print "udp-switch." k[i], $i}}' /proc/net/snmp
			# the guest's CPU time (USER_HZ ticks): user, system, idle, softirq
			awk '$1=="cpu"{print "cpu.user", $2+$3; print "cpu.system", $4; print "cpu.idle", $5+$6; print "cpu.softirq", $8}' /proc/stat
		} >"$1"
	}
	bench_delta() { # before after: the counters that rose
		awk 'NR==FNR{a[$1]=$2;next} $2-a[$1]!=0{printf "%s %d\n", $1, $2-a[$1]}' "$1" "$2" | grep -v 'InDatagrams\|OutDatagrams' | tr '\n' ' '
	}
	bench_job() { # tag workers worker-flags...
		local tag=$1 n=$2 pids=() r scr t0 t1 rc to=0 gmp
		shift 2
		sid=$((sid + 1))
		# Each Go process its share of the guest's CPUs, as the network lab
		# gives (docs/benchmarks.md "One host's CPUs, shared").
		gmp=$(($(grep -c ^processor /proc/cpuinfo) / (n + 1)))
		[ $gmp -ge 1 ] || gmp=1
		export GOMAXPROCS=$gmp
		start_switch 4 --cpuprofile $LOG/$tag.switch.prof
		bench_snap $LOG/$tag.before
		t0=$(cut -d' ' -f1 /proc/uptime)
		for r in $(seq 0 $((n - 1))); do
			timeout $BT $SW worker --nic ibverbs --addr $WADDR --controller $CTRL --session-id $sid --rank $r --workers $n \
				--dtype float32 --metrics-addr 127.0.0.1:$((9500 + r)) --cpuprofile "$LOG/$tag.{rank}.prof" "${JOB[@]}" "$@" >$LOG/$tag.$r.json 2>$LOG/$tag.$r.log &
			pids+=($!)
		done
		# Keep each rank's last /metrics page.
		(while :; do
			for r in $(seq 0 $((n - 1))); do
				# (busybox's wget -T dies of SIGSEGV: timeout(1) bounds it)
				timeout 5 wget -q -O - http://127.0.0.1:$((9500 + r))/metrics >$LOG/$tag.$r.m.tmp 2>/dev/null &&
					mv $LOG/$tag.$r.m.tmp $LOG/$tag.$r.metrics
			done
			sleep 1
		done) &
		scr=$!
		for r in $(seq 0 $((n - 1))); do
			wait ${pids[$r]}
			rc=$?
			case $rc in
			0) ;;
			124) to=1 ;;
			*)
				say "BENCH $tag rank $r: exit $rc: $(grep -v '^\s*$' $LOG/$tag.$r.log | tail -1)"
				grep -q 'RESULT MISMATCH' $LOG/$tag.$r.log && fail "$tag: rank $r's result is wrong"
				;;
			esac
		done
		t1=$(cut -d' ' -f1 /proc/uptime)
		kill $scr 2>/dev/null
		wait $scr 2>/dev/null
		bench_snap $LOG/$tag.after
		say "BENCH $tag: $n workers x $BSIZE float32 (--qps ${SWML_BENCH_QPS:-8} $*, GOMAXPROCS $gmp), $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s for the job$([ $to = 1 ] && echo ", NOT FINISHED within ${BT} s")"
		for r in $(seq 0 $((n - 1))); do
			say "BENCH $tag rank $r: $(tr -d ' \n' <$LOG/$tag.$r.json | grep -o '"median_ns":[0-9]*\|"packets":[0-9]*\|"retransmissions":[0-9]*\|"writes":"[a-z]*"\|"packet_write_calls":[0-9]*\|"cpu_user_ns":[0-9]*\|"cpu_sys_ns":[0-9]*\|"verified":[a-z]*' | tr '\n' ' ')"
			say "BENCH $tag rank $r metrics: $(grep -E '^swml_worker_[a-z_]*_total|^swml_rdma_' $LOG/$tag.$r.metrics 2>/dev/null | grep -v ' 0$\|hw_counters' | sed 's/{[^}]*}//; s/^swml_//' | tr '\n' ' ')"
		done
		say "BENCH $tag switch: $(switch_metric_dump | grep -E '^swml_switch_[a-z_]*_total' | grep -v ' 0$' | sed 's/^swml_switch_//' | tr '\n' ' ')"
		say "BENCH $tag counters: $(bench_delta $LOG/$tag.before $LOG/$tag.after)"
		stop_switch
		unset GOMAXPROCS
		# Go CPU profiles of rank 0 and the switch, as blobs: harness.sh
		# writes them to $SWML_ARTIFACTS (go tool pprof -top FILE). The
		# format of guest-init.sh's blob, whose busybox sh cannot export
		# the function to this bash.
		for f in $LOG/$tag.0.prof $LOG/$tag.switch.prof; do
			[ -s $f ] || continue
			echo "SWML-BLOB-BEGIN rxe-bench-${f##*/}"
			base64 <$f
			echo "SWML-BLOB-END"
		done
	}
	# Message writes: refused before any packet (exit 1, not a timeout).
	start_switch 4
	run_msg=$(timeout 60 $SW worker --nic ibverbs --addr $WADDR --controller $CTRL --session-id 99 --rank 0 --workers 1 --dtype float32 --writes message --json 2>&1 >/dev/null)
	stop_switch
	case $run_msg in
	*"--writes message: "*wedges*) say "BENCH message writes: refused on rxe as expected: ${run_msg#*: }" ;;
	*) fail "--writes message (16 KiB messages) was not refused on rxe: $run_msg" ;;
	esac
	for n in 2 4; do
		bench_job rxe-1pkt-${n}w $n --msg-size 1KiB
		bench_job rxe-defaults-${n}w $n
		# The defaults again, polling an empty CQ for $SWML_BENCH_SPIN
		# (default 1ms, off: not) before blocking on its channel
		# (--busy-poll; by default the worker does not on rxe).
		[ "${SWML_BENCH_SPIN:-1ms}" = off ] || bench_job rxe-spin-${n}w $n --busy-poll ${SWML_BENCH_SPIN:-1ms}
	done
	if [ -e $P4/unavailable ] || [ ! -x $P4/allreduce_benchmark ]; then
		say "BENCH p4app: not measured: $(cat $P4/unavailable 2>/dev/null || echo "$P4/allreduce_benchmark is not in the guest")"
	else
		# Same elements as $BSIZE of float32, 2 then 4 workers, the
		# client's own 100 ms timer; p4app_job verifies and prints p4app's
		# median.
		p4app_setup
		P4TIMER=100 P4NUMEL=$(($(echo $BSIZE | sed 's/MiB/*1048576/; s/KiB/*1024/') / 4)) P4JOBS=${SWML_BENCH_ITERS:-3}
		T=$BT
		for P4WORKERS in 2 4; do
			start_switch 4
			bench_snap $LOG/p4.before
			p4app_job p4bench-${P4WORKERS}w float 1
			rc=$?
			bench_snap $LOG/p4.after
			say "BENCH p4app: $P4WORKERS workers x $BSIZE float32 (timer ${P4TIMER} ms): $([ $rc = 0 ] && grep -h '^Median' $LOG/p4bench-${P4WORKERS}w.0.log || echo "did not verify (rc $rc)")"
			say "BENCH p4app counters, $P4WORKERS workers: $(bench_delta $LOG/p4.before $LOG/p4.after)"
			stop_switch
		done
		P4WORKERS=2
		p4app_teardown
	fi
	;;
*)
	fail "unknown scenario '${1:-}'"
	;;
esac
exit 0
