#!/usr/bin/env bash
# PyTorch tests (and, with "bench", the benchmark) of python/swml against a
# real `swml-rdma switch` on loopback, in a private network namespace when
# run as root. Needs Debian's python3-torch (/usr/bin/python3): installed
# when root, a failure under CI when missing, a skip otherwise.
#
#   python/tests/run.sh          the tests (2 and 4 ranks, kill, fork)
#   python/tests/run.sh bench    swml vs gloo, 4 ranks, 4/16/64 MiB
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${SWML_PYTHON:-/usr/bin/python3}
mode=${1:-test}

if [ -z "${SWML_IN_NETNS:-}" ]; then
	if ! "$PY" -c 'import torch' 2>/dev/null; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			echo "==> installing python3-torch"
			export DEBIAN_FRONTEND=noninteractive
			apt-get -o DPkg::Lock::Timeout=600 update -qq
			apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends python3-torch >/dev/null
		fi
		if ! "$PY" -c 'import torch' 2>/dev/null; then
			if [ -n "${CI:-}" ]; then
				echo "FAIL: $PY cannot import torch (install python3-torch)"; exit 1
			fi
			echo "SKIP-NOTE: $PY has no torch (apt-get install python3-torch): PyTorch tests skipped"; exit 0
		fi
	fi
	echo "==> building bin/swml-rdma and bin/libswml.so"
	go build -o bin/swml-rdma ./cmd/swml-rdma
	go build -buildmode=c-shared -o bin/libswml.so ./cmd/libswml
	# A private network namespace: nothing else binds our loopback
	# addresses or UDP 4791 there.
	if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
		exec unshare -n env SWML_IN_NETNS=1 "$0" "$@"
	fi
fi
if [ -n "${SWML_IN_NETNS:-}" ]; then ip link set lo up; fi

# The switch at 127.<net>.1, the ranks at 127.<net>.2…; a fresh /16 per run.
export SWML_NET=${SWML_NET:-$((100 + RANDOM % 100)).$((RANDOM % 250))}
export SWML_LIB=$PWD/bin/libswml.so
ctl_port=$((20000 + RANDOM % 20000))
export SWML_CONTROLLER=127.$SWML_NET.1:$ctl_port
export SWML_PEER_TIMEOUT=${SWML_PEER_TIMEOUT:-10s}
log=$(mktemp)
bin/swml-rdma switch --addr "127.$SWML_NET.1" --controller-addr "$SWML_CONTROLLER" --log-level warn >"$log" 2>&1 &
sw=$!
trap 'kill $sw 2>/dev/null; wait $sw 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.$SWML_NET.1/$ctl_port") 2>/dev/null && break
	sleep 0.1
done

case $mode in
test)
	"$PY" python/tests/test_torch.py fork
	"$PY" python/tests/test_torch.py train 2
	"$PY" python/tests/test_torch.py train 4
	"$PY" python/tests/test_torch.py kill 4
	;;
bench)
	"$PY" python/tests/bench_torch.py "${@:2}"
	;;
*)
	echo "usage: $0 [test|bench]"; exit 2 ;;
esac
