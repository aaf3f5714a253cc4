#!/usr/bin/env bash
# PyTorch tests (and, with "bench", the benchmark) of python/swml against a
# real `swml-rdma switch` on loopback, in a private network namespace when
# run as root. Installs the package the way a user does (pip install ./python,
# into a virtual environment that sees Debian's python3-torch) and runs the
# tests with pytest from outside the source tree. Needs Debian's
# python3-torch and python3-pytest (/usr/bin/python3): installed when root,
# a failure under CI when missing, a skip otherwise.
#
#   python/tests/run.sh [pytest args]   the tests, e.g. -k overflow, -x, --junitxml=out.xml
#   python/tests/run.sh bench [args]    swml vs gloo, 4 ranks, 4/16/64 MiB
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
PY=${SWML_PYTHON:-/usr/bin/python3}
mode=test
if [ "${1:-}" = bench ]; then mode=bench; shift; fi

if [ -z "${SWML_IN_NETNS:-}" ]; then
	if ! "$PY" -c 'import torch, pytest, setuptools, wheel, pip' 2>/dev/null; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			echo "==> installing python3-torch python3-pytest python3-setuptools python3-wheel python3-venv"
			export DEBIAN_FRONTEND=noninteractive
			apt-get -o DPkg::Lock::Timeout=600 update -qq
			apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
				python3-torch python3-pytest python3-setuptools python3-wheel python3-venv python3-pip >/dev/null
		fi
		if ! "$PY" -c 'import torch, pytest, setuptools, wheel, pip' 2>/dev/null; then
			if [ -n "${CI:-}" ]; then
				echo "FAIL: $PY cannot import torch, pytest, setuptools, wheel and pip (apt-get install python3-torch python3-pytest python3-setuptools python3-wheel python3-pip)"; exit 1
			fi
			echo "SKIP-NOTE: $PY lacks torch or pytest (apt-get install python3-torch python3-pytest): PyTorch tests skipped"; exit 0
		fi
	fi
	echo "==> building bin/swml-rdma"
	go build -o bin/swml-rdma ./cmd/swml-rdma
	# The package as a user installs it: pip builds libswml.so (go build
	# -buildmode=c-shared) into it. A venv that sees the system's torch;
	# no package index is needed (--no-index, the system's setuptools).
	venv=${SWML_VENV:-$repo/build/pyvenv}
	echo "==> pip install ./python into $venv"
	rm -rf "$venv"
	"$PY" -m venv --system-site-packages --without-pip "$venv"
	"$venv/bin/python" -m pip install -q --no-build-isolation --no-index --disable-pip-version-check ./python
	export SWML_VENV=$venv
	# A private network namespace: nothing else binds our loopback
	# addresses or UDP 4791 there.
	if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
		exec unshare -n env SWML_IN_NETNS=1 "$0" $([ $mode = bench ] && echo bench) "$@"
	fi
fi
if [ -n "${SWML_IN_NETNS:-}" ]; then ip link set lo up; fi
py=$SWML_VENV/bin/python
export SWML_BIN=$repo/bin/swml-rdma
unset SWML_LIB PYTHONPATH

case $mode in
test)
	# From outside the tree, so `import swml` is the installed package.
	cd /tmp
	exec "$py" -m pytest -p no:cacheprovider -v -rA "$repo/python/tests" "$@"
	;;
bench)
	# The benchmark starts its own switch through the same fixture code.
	cd /tmp
	exec "$py" "$repo/python/tests/bench_torch.py" "$@"
	;;
esac
