"""Shared set-up of the PyTorch tests and benchmark: each rank is a spawned
process (never fork: see docs/pytorch.md) that joins the job at the switch
the test session started (conftest.py; run.sh for the benchmark)."""

import contextlib
import multiprocessing
import os
import queue
import random
import socket
import subprocess
import tempfile
import time
import traceback
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Bound the waits on child processes (hang detection, not performance).
HANG_S = float(os.environ.get("SWML_TEST_HANG_S", "240"))


def rank_env(rank, world, net, master_port, first_addr=2):
    """The environment a launcher gives (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT; torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE: every rank
    on this host), plus this rank's NIC address 127.<net>.(first_addr+rank)."""
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port),
        SWML_ADDR=f"127.{net}.{first_addr + rank}",
    )


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(target, rank, world, port, out, args, first_addr):
    rank_env(rank, world, os.environ["SWML_NET"], port, first_addr)
    try:
        res = target(rank, world, *args) or {}
        out.put({"rank": rank, **res})
        if res.get("exit_now"):
            # A peer is dead: skip interpreter shutdown, where Gloo and the
            # process group would wait for it. Flush the queue first.
            out.close()
            out.join_thread()
            os._exit(0)
    except BaseException:  # noqa: BLE001 - reported to the parent
        out.put({"rank": rank, "error": traceback.format_exc()})
        raise


def launch(world, target, *args, want=None, agree_session=False, first_addr=2):
    """Run target(rank, world, *args) in world spawned ranks (a fresh
    session id, so the runs of one switch never share a job); returns the
    dicts the ranks returned, by rank. A rank that raises fails the test.
    want: how many ranks must report (default all). agree_session: no
    SWML_SESSION_ID, the ranks agree on one through the store as a user's
    job does. first_addr: the last byte of rank 0's NIC address (jobs that
    run at the same time need their own)."""
    if agree_session:
        os.environ.pop("SWML_SESSION_ID", None)
    else:
        os.environ["SWML_SESSION_ID"] = str(random.randrange(1, 1 << 30))
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_run, args=(target, r, world, port, out, args, first_addr)) for r in range(world)]
    for p in procs:
        p.start()
    want = world if want is None else want
    results = {}
    deadline = time.monotonic() + HANG_S
    try:
        while len(results) < want:
            try:
                r = out.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"only ranks {sorted(results)} of {world} reported within {HANG_S} s (hang)")
            if "error" in r:
                raise AssertionError(f"rank {r['rank']} failed:\n{r['error']}")
            results[r["rank"]] = r
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [results[k] for k in sorted(results)]


def _wait_port(host, port, proc, log, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"swml-rdma switch exited ({proc.returncode}):\n{open(log).read()}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"swml-rdma switch did not listen on {host}:{port} within {timeout} s:\n{open(log).read()}")


_SWITCH_ENV = ("SWML_NET", "SWML_CONTROLLER", "SWML_SWITCH_METRICS")


def fresh_net():
    """A random loopback /16 (127.<net>.0.0) for a switch and its ranks."""
    return f"{100 + random.randrange(100)}.{random.randrange(250)}"


@contextlib.contextmanager
def start_switch(args=(), net=None, fresh=False):
    """Run `swml-rdma switch` ($SWML_BIN, else the repository's
    bin/swml-rdma) with args at 127.<net>.1 on a loopback /16 (net, else
    $SWML_NET, else a fresh one), ranks at 127.<net>.2…; sets SWML_NET,
    SWML_CONTROLLER and SWML_SWITCH_METRICS (its /metrics URL) for the
    ranks and yields the controller's address. fresh: a /16 of its own even
    inside another start_switch (a test that needs a switch to itself); the
    outer switch's variables come back after."""
    binary = os.environ.get("SWML_BIN", os.path.join(ROOT, "bin", "swml-rdma"))
    if not os.path.exists(binary):
        raise RuntimeError(f"{binary} missing: build it with `make build` or set SWML_BIN")
    saved = {k: os.environ.get(k) for k in _SWITCH_ENV}
    net = net or (not fresh and os.environ.get("SWML_NET")) or fresh_net()
    while fresh and net == saved["SWML_NET"]:
        net = fresh_net()
    host = f"127.{net}.1"
    port = 20000 + random.randrange(20000)
    metrics = port + 20000
    log = tempfile.NamedTemporaryFile(prefix="swml-switch-", suffix=".log", delete=False).name
    with open(log, "w") as out:
        proc = subprocess.Popen([binary, "switch", "--addr", host, "--controller-addr", f"{host}:{port}",
                                 "--metrics-addr", f"{host}:{metrics}", "--log-level", "warn", *args],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_port(host, port, proc, log)
        _wait_port(host, metrics, proc, log)
        os.environ.update(SWML_NET=net, SWML_CONTROLLER=f"{host}:{port}",
                          SWML_SWITCH_METRICS=f"http://{host}:{metrics}/metrics")
        os.environ.setdefault("SWML_PEER_TIMEOUT", "10s")
        yield f"{host}:{port}"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.unlink(log)


def switch_metric(name):
    """{labels: value} of one metric of the switch's /metrics
    (SWML_SWITCH_METRICS), labels as the text between the braces."""
    with urllib.request.urlopen(os.environ["SWML_SWITCH_METRICS"], timeout=10) as r:
        text = r.read().decode()
    got = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            series, value = line.rsplit(" ", 1)
            got[series[len(name):].strip("{}")] = float(value)
    return got
