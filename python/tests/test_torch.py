"""PyTorch through the switch, under pytest (run.sh installs the package and
runs `python3 -m pytest python/tests`; conftest.py starts `swml-rdma switch`).
Every multi-rank test spawns its ranks (common.launch)."""

import math
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import common

STEPS = 25
LR = 0.3
U = 2.0 ** -24  # float32 unit roundoff
UNIT16 = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def make_model(torch):
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                               torch.nn.Tanh(), torch.nn.Linear(64, 1))


def make_data(torch, rank):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(256, 16, generator=g)
    w = torch.linspace(-1, 1, 16)
    y = (x @ w / 2).tanh().unsqueeze(1) + 0.05 * torch.randn(256, 1, generator=g)
    return x, y


def allreduce_bound(xs, unit16=0.0):
    """Per-element bound of the switch's sum of xs (float64 copies of each
    rank's tensor), docs/quantization.md "Error bound": (1+4u)·n/F +
    8u·Σ|x_i| with F ≥ ((2^31−1)/n)/2^(e+1) for the largest block exponent
    e; for a 16-bit result (unit16 = its unit roundoff) also
    (1+u16)·that + u16·Σ|x_i| + 2^-25."""
    n = len(xs)
    m = max(float(x.abs().max()) for x in xs)
    e = math.ceil(math.log2(m)) if m > 0 else -126
    f = ((2 ** 31 - 1) / n) / 2.0 ** (e + 1)
    sum_abs = sum(x.abs() for x in xs)
    b = (1 + 4 * U) * n / f + 8 * U * sum_abs
    if unit16:
        b = (1 + unit16) * b + unit16 * sum_abs + 2.0 ** -25
    return b


# -- the package -------------------------------------------------------------

def test_import_registers_backend(tmp_path):
    """`import swml` works from any directory (the installed package, with
    libswml.so inside) and registers the "swml" backend."""
    code = textwrap.dedent("""
        import os, swml, torch.distributed as dist
        lib = os.path.join(os.path.dirname(swml.__file__), "libswml.so")
        assert os.path.exists(lib), lib
        assert swml.load()._name == lib, swml.load()._name
        assert dist.Backend("swml") == "swml"
        print("ok", swml.__file__)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("SWML_LIB", "PYTHONPATH")}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "site-packages" in r.stdout or "dist-packages" in r.stdout, f"swml imported from the source tree, not the installed package: {r.stdout}"


def test_signal_path_gated_on_torch_version():
    from swml import backend
    assert backend._torch_version("1.13.0a0") == (1, 13)
    assert backend._torch_version("2.3.1+cpu") == (2, 3)
    import torch
    assert backend.SIGNAL_PATH == (backend._torch_version(torch.__version__) < (2, 0))


def _forked_child(q):
    try:
        import swml
        swml.init(rank=0, world_size=1)
        q.put("no error")
    except Exception as e:  # noqa: BLE001
        q.put(f"{type(e).__name__}: {e}")


def test_fork():
    """A forked child of a process that loaded the library gets ForkError,
    not a hang."""
    import swml
    swml.load()
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_forked_child, args=(q,))
    p.start()
    try:
        msg = q.get(timeout=60)
    finally:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    assert msg.startswith("ForkError") and "spawn" in msg, msg


def test_no_switch(tmp_path):
    """With no switch, init_process_group("swml") says it is waiting, then
    fails with swml.SwmlError naming the address and what to start, after
    SWML_CONNECT_TIMEOUT (not torch's 30-minute timeout)."""
    code = textwrap.dedent("""
        import os, socket, time, swml, torch.distributed as dist
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        os.environ.update(SWML_CONTROLLER=f"127.0.0.1:{port}", SWML_CONNECT_TIMEOUT="1s")
        t0 = time.monotonic()
        try:
            dist.init_process_group("swml", init_method="tcp://127.0.0.1:%d" % (port + 1 if port < 65535 else port - 1),
                                    rank=0, world_size=1)
        except swml.SwmlError as e:
            print("CAUGHT", type(e).__name__, e.code, f"{time.monotonic() - t0:.1f}s", e)
        else:
            print("NO ERROR")
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "CAUGHT SwmlError -4" in r.stdout, (r.stdout, r.stderr)
    assert "start `swml-rdma switch" in r.stdout and "127.0.0.1:" in r.stdout, r.stdout
    assert "waiting for the controller" in r.stderr, r.stderr


# -- training ------------------------------------------------------------------

def train_rank(rank, world, backend, kill_at=-1):
    import torch
    import torch.distributed as dist
    import swml  # registers the backend
    dist.init_process_group("gloo" if backend == "hook" else backend)
    res = {"losses": [], "identical": True}
    if backend != "hook":
        # One float32 all-reduce against the quantization bound (every rank
        # rebuilds every rank's input from its seed), one int32 exact.
        xs = [torch.randn(100_000, generator=torch.Generator().manual_seed(7 + r)) * (r + 1) for r in range(world)]
        got = xs[rank].clone()
        dist.all_reduce(got)
        exact = torch.stack([x.double() for x in xs]).sum(0)
        err = (got.double() - exact).abs()
        res["float_max_err"] = float(err.max())
        res["float_within_bound"] = bool((err <= allreduce_bound([x.double() for x in xs])).all())
        ints = [torch.randint(-(2 ** 31) // world, 2 ** 31 // world, (50_001,), dtype=torch.int32,
                              generator=torch.Generator().manual_seed(9 + r)) for r in range(world)]
        got_i = ints[rank].clone()
        dist.all_reduce(got_i)
        res["int32_exact"] = bool(torch.equal(got_i.long(), torch.stack([i.long() for i in ints]).sum(0)))

    model = torch.nn.parallel.DistributedDataParallel(make_model(torch), bucket_cap_mb=0.01)
    if backend == "hook":  # Gloo for everything, the switch for DDP's buckets
        state = swml.HookState(swml.init())
        model.register_comm_hook(state, swml.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = make_data(torch, rank)
    for step in range(STEPS):
        if step == kill_at and rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.monotonic()
        try:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        except Exception as e:  # noqa: BLE001 - the kill test looks at it
            return {"raised_type": f"{type(e).__module__}.{type(e).__name__}", "is_swml_error": isinstance(e, swml.SwmlError),
                    "code": getattr(e, "code", None), "raised": str(e), "raised_after_s": time.monotonic() - t0,
                    "raised_step": step, "exit_now": True}
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        res["losses"].append(float(mean) / world)
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        all_flat = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(all_flat, flat)  # Gloo under swml too
        res["identical"] &= all(torch.equal(all_flat[0], f) for f in all_flat)
    res["final"] = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    if backend == "swml":
        swml.process_group().shutdown()
    if backend == "hook":
        state.completer.stop()
        state.session.close()
    dist.destroy_process_group()
    return res


@pytest.mark.parametrize("world", [2, 4])
def test_train(world):
    """DDP through the switch trains as Gloo does: parameters bit-identical
    across ranks after every step, loss curves and final parameters agree;
    float32 within the quantization bound, int32 exact."""
    sw = common.launch(world, train_rank, "swml")
    gl = common.launch(world, train_rank, "gloo")
    for r in sw:
        assert r["float_within_bound"], f"rank {r['rank']}: float32 all-reduce error {r['float_max_err']:.3g} above the bound"
        assert r["int32_exact"], f"rank {r['rank']}: int32 all-reduce not exact"
        assert r["identical"], f"rank {r['rank']}: parameters differ from rank 0's (swml)"
    assert all(r["identical"] for r in gl)
    ls, lg = sw[0]["losses"], gl[0]["losses"]
    dev = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ls, lg))
    print(f"{world} ranks: max relative loss deviation swml vs gloo {dev:.3g}; gloo loss {lg[0]:.4f} -> {lg[-1]:.4f}")
    # Per step the switch's sum is within ~n²·2^-31 of the gradient scale
    # (docs/quantization.md); over 25 steps of SGD that stays far below 1e-3.
    assert len(ls) == STEPS and dev < 1e-3
    assert lg[-1] < 0.8 * lg[0], "the model does not train"
    pdev = max(abs(a - b) for a, b in zip(sw[0]["final"], gl[0]["final"]))
    assert pdev < 1e-3, f"final parameters swml vs gloo differ by {pdev:.3g}"


def test_ddp_hook():
    """Gloo plus swml.allreduce_hook for DDP's buckets: as Gloo."""
    hk = common.launch(2, train_rank, "hook")
    gl = common.launch(2, train_rank, "gloo")
    assert all(r["identical"] for r in hk)
    dev = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(hk[0]["losses"], gl[0]["losses"]))
    assert dev < 1e-3, f"hook vs gloo loss curves: relative deviation {dev:.3g}"


def test_kill():
    """Rank 1 SIGKILLs itself at step 5: the others raise swml.SwmlError
    (the type, not torch's RuntimeError) naming the dead rank."""
    rs = common.launch(4, train_rank, "swml", 5, want=3)
    for r in rs:
        assert r.get("raised"), f"rank {r['rank']} did not raise"
        assert r["is_swml_error"], f"rank {r['rank']} raised {r['raised_type']}, not swml.SwmlError: {r['raised'][:300]}"
        assert r["code"] == -3, r  # SWML_EPEER
        assert "rank 1" in r["raised"], r["raised"][:300]
        print(f"rank {r['rank']}: {r['raised_type']} at step {r['raised_step']} after {r['raised_after_s']:.2f} s: {r['raised'][:200]}")


# -- mixed precision and overflow -----------------------------------------------

def half_rank(rank, world):
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    import swml  # noqa: F401 - registers the backend
    dist.init_process_group("swml")
    res = {}
    # bf16 and fp16 tensors through the switch against a float64 reference.
    for name, dt in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        xs = [(torch.randn(50_000, generator=torch.Generator().manual_seed(3 + r)) * (r + 1)).to(dt) for r in range(world)]
        got = xs[rank].clone()
        dist.all_reduce(got)
        assert got.dtype == dt
        exact = torch.stack([x.double() for x in xs]).sum(0)
        err = (got.double() - exact).abs()
        bound = allreduce_bound([x.double() for x in xs], UNIT16[name])
        res[name] = {"max_err": float(err.max()), "within": bool((err <= bound).all()),
                     "sum": got.double().sum().item()}
    # DDP's fp16 compression hook on the swml group, and the same for bf16
    # (torch 1.13's bf16_compress_hook refuses to register without CUDA
    # and NCCL): the buckets cross the switch as 16-bit tensors.
    def bf16_hook(_, bucket):  # not named bf16_compress_hook: DDP checks the name
        buf = bucket.buffer()
        compressed = buf.to(torch.bfloat16).div_(world)
        fut = dist.all_reduce(compressed, async_op=True).get_future()

        def decompress(f):
            buf.copy_(f.value()[0])
            return buf
        return fut.then(decompress)

    hooks = {"bf16_compress_hook": bf16_hook, "fp16_compress_hook": default_hooks.fp16_compress_hook}
    for hook in ("bf16_compress_hook", "fp16_compress_hook"):
        model = torch.nn.parallel.DistributedDataParallel(make_model(torch), bucket_cap_mb=0.01)
        model.register_comm_hook(None, hooks[hook])
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        x, y = make_data(torch, rank)
        losses, identical = [], True
        for _ in range(10):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(float(mean) / world)
            flat = torch.cat([p.detach().flatten() for p in model.parameters()])
            all_flat = [torch.empty_like(flat) for _ in range(world)]
            dist.all_gather(all_flat, flat)
            identical &= all(torch.equal(all_flat[0], f) for f in all_flat)
        res[hook] = {"losses": losses, "identical": identical}
    swml.process_group().shutdown()
    dist.destroy_process_group()
    return res


def test_half_precision():
    """bf16 and fp16 all-reduces go through the switch within the bound of
    docs/quantization.md; DDP with the bf16/fp16 compression hooks trains,
    parameters identical on every rank."""
    rs = common.launch(2, half_rank)
    for r in rs:
        for name in ("bfloat16", "float16"):
            assert r[name]["within"], f"rank {r['rank']} {name}: error {r[name]['max_err']:.3g} above the bound"
            assert r[name]["sum"] == rs[0][name]["sum"], f"{name}: ranks disagree"
        for hook in ("bf16_compress_hook", "fp16_compress_hook"):
            assert r[hook]["identical"], f"rank {r['rank']} {hook}: parameters differ across ranks"
            ls = r[hook]["losses"]
            assert ls[-1] < 0.9 * ls[0], f"{hook}: the model does not train: {ls}"
    print({n: rs[0][n]["max_err"] for n in ("bfloat16", "float16")})


def overflow_rank(rank, world, overflow_step):
    """A GradScaler-style loop (torch.cuda.amp.GradScaler needs CUDA; this
    is its logic): scaled loss, and when any gradient is non-finite, skip
    the step and halve the scale. Rank 1's loss overflows at overflow_step."""
    import torch
    import torch.distributed as dist
    import swml
    dist.init_process_group("swml")
    model = torch.nn.parallel.DistributedDataParallel(make_model(torch), bucket_cap_mb=0.01)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = make_data(torch, rank)
    scale, found, losses, identical = 2.0 ** 12, [], [], True
    for step in range(8):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        s = float("inf") if (rank == 1 and step == overflow_step) else scale
        (loss * s).backward()
        inf = any(not bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        found.append(inf)
        if inf:
            scale /= 2  # skip the step
        else:
            for p in model.parameters():
                p.grad.div_(scale)
            opt.step()
        losses.append(float(loss))
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        all_flat = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(all_flat, flat)
        identical &= all(torch.equal(all_flat[0], f) for f in all_flat) and bool(torch.isfinite(flat).all())
    # A float16 tensor with one Inf: its block (one message) comes back NaN
    # on every rank, the rest is summed.
    t = torch.ones(20_000, dtype=torch.float16)
    if rank == 0:
        t[5000] = float("inf")
    dist.all_reduce(t)
    nan = torch.isnan(t)
    swml.process_group().shutdown()
    dist.destroy_process_group()
    return {"found": found, "losses": losses, "identical": identical, "scale": scale,
            "nan_at": [int(nan.nonzero().min()), int(nan.nonzero().max())] if bool(nan.any()) else None,
            "rest_is_sum": bool((t[~nan] == 2).all())}


def test_overflow_propagates():
    """An overflowed gradient on one rank comes back non-finite on every
    rank: each skips that step (and only that one) and lowers the scale, the
    job goes on, parameters stay identical."""
    rs = common.launch(2, overflow_rank, 3)
    for r in rs:
        assert r["found"] == [i == 3 for i in range(8)], f"rank {r['rank']}: non-finite gradients at steps {r['found']}"
        assert r["identical"], f"rank {r['rank']}: parameters differ across ranks or are not finite"
        assert r["scale"] == 2.0 ** 11
        assert r["losses"][-1] < r["losses"][0]
        # Messages of 16 KiB carry 4096 elements: element 5000 is in message 1.
        assert r["nan_at"] == [4096, 8191], r["nan_at"]
        assert r["rest_is_sum"]


# -- mismatches ----------------------------------------------------------------------

def mismatch_rank(rank, world):
    import torch
    import torch.distributed as dist
    import swml
    dist.init_process_group("swml")
    t = torch.ones(1000 + rank)
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
        after = "returned"
    except swml.SwmlError as e:
        return {"code": e.code, "msg": str(e), "after_s": time.monotonic() - t0, "exit_now": True}
    return {"code": None, "msg": after, "exit_now": True}


def test_length_mismatch():
    """Ranks calling all_reduce with different lengths: each raises
    swml.SwmlError "length mismatch" (the exponent round carries the
    length), not a peer timeout."""
    rs = common.launch(2, mismatch_rank)
    for r in rs:
        assert r["code"] == -10, r  # SWML_EMISMATCH
        assert "length mismatch" in r["msg"] and f"has {1000 + r['rank']} elements" in r["msg"], r["msg"]
        print(f"rank {r['rank']} after {r['after_s']:.2f} s: {r['msg'][:200]}")


# -- the launcher the docs recommend ---------------------------------------------------

def test_env_launcher(tmp_path):
    """docs/pytorch.md's launcher for torch 1.13 (whose torchrun does not run
    on Python 3.11): one process per rank with RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT and SWML_ADDR, here exactly the loop the docs show."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "ddp_train.py")
    net = os.environ["SWML_NET"]
    launcher = textwrap.dedent(f"""
        set -e
        export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={common.free_port()}
        pids=
        for RANK in 0 1; do
            RANK=$RANK SWML_ADDR=127.{net}.$((2 + RANK)) {sys.executable} {script} --steps 5 &
            pids="$pids $!"
        done
        for p in $pids; do wait $p; done
    """)
    env = dict(os.environ)
    env["SWML_SESSION_ID"] = str(int(time.time()) % (1 << 30) + 7)
    r = subprocess.run(["bash", "-c", launcher], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=common.HANG_S)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        assert f"rank {rank}/2: step 5 loss" in r.stdout, r.stdout + r.stderr


# -- TLS to the controller ------------------------------------------------------------

def make_pki(d, host):
    """A CA, a certificate for the controller at host and one for the
    ranks, made with the openssl commands of docs/security.md "TLS for
    remote workers"."""
    def sh(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    sh("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
       "-subj", "/CN=swml-ca", "-keyout", "ca.key", "-out", "ca.pem")
    for name, ext in (("controller", f"subjectAltName=IP:{host}"), ("worker", "extendedKeyUsage=clientAuth")):
        sh("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={name}",
           "-keyout", f"{name}.key", "-out", f"{name}.csr")
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext + "\n")
        sh("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
           "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    return {k: os.path.join(d, k) for k in ("ca.pem", "controller.pem", "controller.key", "worker.pem", "worker.key")}


def tls_rank(rank, world):
    import torch
    import torch.distributed as dist
    import swml  # noqa: F401 - registers the backend
    res = {}
    try:
        dist.init_process_group("swml")
    except swml.SwmlError as e:
        return {"code": e.code, "raised": str(e), "exit_now": True}
    xs = [torch.full((10_000,), float(r + 1)) for r in range(world)]
    got = xs[rank].clone()
    dist.all_reduce(got)
    res["float_sum"] = float(got[0])
    res["float_exact"] = bool(torch.equal(got, torch.full_like(got, sum(range(1, world + 1)))))
    ints = torch.arange(5_000, dtype=torch.int32) * (rank + 1)
    dist.all_reduce(ints)
    res["int32_exact"] = bool(torch.equal(ints, torch.arange(5_000, dtype=torch.int32) * sum(range(1, world + 1))))
    swml.process_group().shutdown()
    dist.destroy_process_group()
    return res


def test_tls(tmp_path):
    """A switch serving mutual TLS (--tls-cert, --tls-key, --tls-client-ca):
    2 ranks with SWML_TLS_CA, SWML_TLS_CERT and SWML_TLS_KEY all-reduce
    through it; a rank without SWML_TLS_* is told the controller speaks
    TLS and to set SWML_TLS_CA, one without a certificate to set
    SWML_TLS_CERT and SWML_TLS_KEY."""
    saved = dict(os.environ)
    net = common.fresh_net()
    while net == os.environ.get("SWML_NET"):
        net = common.fresh_net()
    pki = make_pki(str(tmp_path), f"127.{net}.1")
    args = ("--tls-cert", pki["controller.pem"], "--tls-key", pki["controller.key"], "--tls-client-ca", pki["ca.pem"])
    try:
        for v in ("SWML_TLS_CA", "SWML_TLS_CERT", "SWML_TLS_KEY", "SWML_TLS_SERVER_NAME"):
            os.environ.pop(v, None)
        with common.start_switch(args, net=net):
            os.environ["SWML_CONNECT_TIMEOUT"] = "5s"
            plain = common.launch(1, tls_rank)[0]
            assert plain.get("raised"), plain
            assert "speaks TLS; this client dials plaintext" in plain["raised"], plain["raised"]
            assert "set SWML_TLS_CA to the CA that signed the switch's --tls-cert" in plain["raised"], plain["raised"]
            os.environ["SWML_TLS_CA"] = pki["ca.pem"]
            nocert = common.launch(1, tls_rank)[0]
            assert "requires a client certificate" in nocert.get("raised", ""), nocert
            assert "set SWML_TLS_CERT and SWML_TLS_KEY" in nocert["raised"], nocert["raised"]
            os.environ.update(SWML_TLS_CERT=pki["worker.pem"], SWML_TLS_KEY=pki["worker.key"])
            rs = common.launch(2, tls_rank)
            for r in rs:
                assert "raised" not in r, r
                assert r["float_exact"] and r["int32_exact"], r
            print(f"2 ranks over mutual TLS: float32 sum {rs[0]['float_sum']}, int32 exact")
    finally:
        os.environ.clear()
        os.environ.update(saved)
