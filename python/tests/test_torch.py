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


def allreduce_bound(xs, unit16=0.0, wire=32):
    """Per-element bound of the switch's sum of xs (float64 copies of each
    rank's tensor), docs/quantization.md "Error bound": (1+u)·n·δ/F +
    u·Σ|x_i| with F = 2^(31−⌈log2 n⌉−e) for the largest block exponent e
    (the smallest with 2^e > max|x|), δ = 1/2 (1 for n a power of two from
    256); on the 16-bit wire (wire=16) F = 2^(15−⌈log2 n⌉−e) and δ = 1 for
    every power of two n; for a 16-bit result (unit16 = its unit roundoff)
    also (1+u16)·that + u16·Σ|x_i| + 2^-25. Plus n·2^-53·Σ|x_i|: the
    float64 reference sum's own rounding."""
    n = len(xs)
    m = max(float(x.abs().max()) for x in xs)
    e = min(max(math.frexp(m)[1], -128), 126) if m > 0 else -128
    f = 2.0 ** min(wire - 1 - (n - 1).bit_length() - e, 126)
    pow2 = n & (n - 1) == 0
    delta = 1.0 if pow2 and (n >= 256 or wire == 16) else 0.5
    sum_abs = sum(x.abs() for x in xs)
    b = (1 + U) * n * delta / f + U * sum_abs
    if unit16:
        b = (1 + unit16) * b + unit16 * sum_abs + 2.0 ** -25
    return b + n * 2.0 ** -53 * sum_abs


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


def test_share_of_host():
    """A launcher's count of the ranks on this host (torchrun's
    LOCAL_WORLD_SIZE, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE) sets the
    library's Go threads to this rank's share of the CPUs, at least 1, when
    it loads — also when the count was set in the process before the load
    (the library reads C's environment); GOMAXPROCS, which the runtime
    reads at start, wins; without either the runtime keeps every CPU."""
    query = "import swml; print(swml.load().swml_set_threads(0))"
    cpus = len(os.sched_getaffinity(0))
    for add, code, want in (({}, query, cpus), ({"LOCAL_WORLD_SIZE": "2"}, query, max(1, cpus // 2)),
                            ({"OMPI_COMM_WORLD_LOCAL_SIZE": str(4 * cpus)}, query, 1),
                            ({"LOCAL_WORLD_SIZE": "2", "GOMAXPROCS": "3"}, query, 3),
                            ({}, "import os; os.environ['LOCAL_WORLD_SIZE'] = '2'; " + query, max(1, cpus // 2))):
        env = {k: v for k, v in os.environ.items() if k not in ("GOMAXPROCS", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")}
        env.update(add)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert int(r.stdout.strip()) == want, f"{add} {code}: {r.stdout.strip()} threads, want {want}"


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
        state.close()
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
    import swml
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
        wire = swml.process_group().wire_bits(dt)  # 16 where the switch has a 16-bit pipeline
        bound = allreduce_bound([x.double() for x in xs], UNIT16[name], wire)
        res[name] = {"max_err": float(err.max()), "within": bool((err <= bound).all()),
                     "sum": got.double().sum().item(), "wire": wire}
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
    """bf16 and fp16 all-reduces go through the switch (on the 16-bit wire:
    the test switch has a 16-bit pipeline) within the bound of
    docs/quantization.md; DDP with the bf16/fp16 compression hooks trains,
    parameters identical on every rank."""
    rs = common.launch(2, half_rank)
    for r in rs:
        for name in ("bfloat16", "float16"):
            assert r[name]["wire"] == 16, f"rank {r['rank']} {name}: the {r[name]['wire']}-bit wire, want the 16-bit one"
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
    wire = swml.process_group().wire_bits(torch.float16)
    swml.process_group().shutdown()
    dist.destroy_process_group()
    return {"found": found, "losses": losses, "identical": identical, "scale": scale, "wire": wire,
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
        # Messages of 16 KiB carry 4096 elements on the 32-bit wire (element
        # 5000 is in message 1), 8192 on the 16-bit wire (in message 0).
        vals = 16384 * 8 // r["wire"]
        assert r["nan_at"] == [5000 // vals * vals, (5000 // vals + 1) * vals - 1], (r["wire"], r["nan_at"])
        assert r["rest_is_sum"]


# -- non-contiguous tensors -----------------------------------------------------

def strided_rank(rank, world):
    """Every path an all_reduce can take, with strided views: each result
    exactly what the same values give in a contiguous tensor (bit for bit:
    the switch's quantization is deterministic; the exact sum for int32 and
    for Gloo's float64), and the elements around each view untouched."""
    import torch
    import torch.distributed as dist
    import swml
    dist.init_process_group("swml")
    bad = []

    def check(name, got, want):
        if not torch.equal(got, want):
            bad.append(f"{name}: got {got.flatten()[:12].tolist()}, want {want.flatten()[:12].tolist()}")

    def vals(r, n, dtype):  # rank r's input
        v = torch.arange(n) * (r + 1) + 100 * r
        return v.to(dtype) if dtype == torch.int32 else v.to(dtype) / 3

    def dense_sum(view):  # the same values all-reduced as a contiguous tensor
        c = view.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(c)
        return c

    for dtype in (torch.float32, torch.int32, torch.bfloat16, torch.float16, torch.float64):
        if dtype in (torch.int32, torch.float64):  # exact sums: check the reference too
            x = [vals(r, 16, dtype) for r in range(world)]
            check(f"{dtype} dense", dense_sum(x[rank]), sum(v.double() for v in x).to(dtype))
        # Every other element: the switch for the first four dtypes, Gloo
        # (float64) for the last; the odd elements must stay as they were.
        x = vals(rank, 128, dtype)
        before = x.clone()
        want = dense_sum(x[::2])
        dist.all_reduce(x[::2])
        check(f"{dtype} x[::2]", x[::2], want)
        check(f"{dtype} x[1::2] untouched", x[1::2], before[1::2])
        # One column of a matrix, asynchronously.
        m = vals(rank, 8 * 6, dtype).reshape(8, 6)
        before = m.clone()
        want = dense_sum(m[:, 2])
        dist.all_reduce(m[:, 2], async_op=True).wait()
        check(f"{dtype} m[:, 2]", m[:, 2], want)
        check(f"{dtype} other columns untouched", torch.cat([m[:, :2], m[:, 3:]], 1), torch.cat([before[:, :2], before[:, 3:]], 1))
        # The same logical 6x8 tensor, transposed on even ranks and dense on
        # odd ones: the sum is element by element, whatever the layout.
        logical = vals(rank, 48, dtype).reshape(6, 8)
        want = dense_sum(logical)
        t = logical.t().contiguous().t() if rank % 2 == 0 else logical.clone()
        assert t.is_contiguous() == (rank % 2 == 1)
        dist.all_reduce(t)
        check(f"{dtype} transposed", t, want)
    # Gloo for other ops, and the other collectives, on strided views.
    x = vals(rank, 20, torch.float32)
    before = x.clone()
    dist.all_reduce(x[::2], op=dist.ReduceOp.MAX)
    check("MAX x[::2]", x[::2], torch.stack([vals(r, 20, torch.float32)[::2] for r in range(world)]).max(0).values)
    check("MAX x[1::2] untouched", x[1::2], before[1::2])
    x = vals(rank, 20, torch.float32)
    before = x.clone()
    dist.reduce(x[::2], dst=0)
    if rank == 0:
        check("reduce x[::2]", x[::2], sum(vals(r, 20, torch.float32)[::2] for r in range(world)))
    check("reduce x[1::2] untouched", x[1::2], before[1::2])
    x = vals(rank, 20, torch.float32)
    before = x.clone()
    dist.broadcast(x[::2], src=world - 1)
    check("broadcast x[::2]", x[::2], vals(world - 1, 20, torch.float32)[::2])
    check("broadcast x[1::2] untouched", x[1::2], before[1::2])
    outs = [torch.full((20,), -1.0) for _ in range(world)]
    dist.all_gather([o[::2] for o in outs], vals(rank, 20, torch.float32)[::2])
    for r in range(world):
        check(f"all_gather from {r}", outs[r][::2], vals(r, 20, torch.float32)[::2])
        check(f"all_gather from {r}: the rest untouched", outs[r][1::2], torch.full((10,), -1.0))
    # Point to point (a Gloo Work without a Future).
    y = torch.full((20,), -1.0)
    if rank == 0:
        dist.send(vals(0, 20, torch.float32)[::2], dst=1)
    elif rank == 1:
        dist.recv(y[::2], src=0)
        check("recv y[::2]", y[::2], vals(0, 20, torch.float32)[::2])
        check("recv y[1::2] untouched", y[1::2], torch.full((10,), -1.0))
    swml.process_group().shutdown()
    dist.destroy_process_group()
    return {"bad": bad}


def test_strided():
    """all_reduce of non-contiguous tensors (every other element, a column,
    a transposed matrix; through the switch and through the inner Gloo
    group) and Gloo's other collectives on strided views: exact results,
    neighbouring elements untouched. torch 1.13's Gloo alone gets every one
    of the strided cases wrong."""
    for r in common.launch(2, strided_rank):
        assert not r["bad"], f"rank {r['rank']}:\n" + "\n".join(r["bad"])


# -- the end of a job ------------------------------------------------------------------

ENDED = "swml_controller_sessions_ended_total"
# A job's sessions at a switch with a 16-bit pipeline (docs/pytorch.md
# "Which wire a dtype uses"): float32, the 16-bit wire's, int32.
SESSIONS = 3


def ending_rank(rank, world, how):
    """A job that ends without calling shutdown(): with DDP through the
    backend, through the hook on Gloo, or with a plain all_reduce and
    destroy_process_group, after which the group is collected and its
    session must be closed at once (not at exit)."""
    import gc
    import weakref
    import torch
    import torch.distributed as dist
    import swml
    dist.init_process_group("gloo" if how == "hook" else "swml")
    res = {}
    if how == "destroy":
        t = torch.ones(1000)
        dist.all_reduce(t)
        res["sum"] = float(t[0])
        pg = swml.process_group()
        session, ref = pg.session, weakref.ref(pg)
        del pg
        dist.destroy_process_group()
        gc.collect()
        res["collected"] = ref() is None
        res["closed_on_destroy"] = session.closed
        return res
    model = torch.nn.parallel.DistributedDataParallel(make_model(torch), bucket_cap_mb=0.01)
    if how == "hook":
        model.register_comm_hook(swml.HookState(swml.init()), swml.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = make_data(torch, rank)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()
    _kept.append(model)  # the model, its group or hook live on: the session ends at exit
    return res


_kept = []


def _wait_ended(before, n):
    """The switch's sessions_ended_total once n more sessions ended (or
    after common.HANG_S), and the change by reason."""
    deadline = time.monotonic() + common.HANG_S
    while True:
        now = common.switch_metric(ENDED)
        delta = {k: now.get(k, 0) - before.get(k, 0) for k in now}
        if sum(delta.values()) >= n or time.monotonic() > deadline:
            return now, {k: v for k, v in delta.items() if v}


UNCAUGHT = textwrap.dedent("""
    import torch, torch.distributed as dist, swml
    dist.init_process_group("swml")
    t = torch.ones(10, dtype=torch.int32)
    dist.all_reduce(t)
    assert int(t[0]) == 2, t
    raise RuntimeError("the training script failed")
""")


def test_clean_end():
    """Jobs that end normally without shutdown() (DDP through the backend,
    plain all_reduce + destroy_process_group, DDP with the hook on Gloo)
    end their three sessions each cleanly at the switch: reason "end", no
    keepalive_lost or abort. A rank dying of an uncaught exception aborts
    instead. Read from a switch of its own's /metrics."""
    with common.start_switch(fresh=True):
        before = common.switch_metric(ENDED)
        assert 'reason="end"' in before, before
        for how in ("swml", "destroy", "hook"):
            rs = common.launch(2, ending_rank, how, agree_session=(how == "hook"))
            before, delta = _wait_ended(before, SESSIONS)
            assert delta == {'reason="end"': SESSIONS}, f"{how}: sessions ended {delta}, want {SESSIONS} by reason end"
            if how == "destroy":
                for r in rs:
                    assert abs(r["sum"] - 2.0) < 1e-6, r
                    assert r["collected"] and r["closed_on_destroy"], r
        # Run as a script (a launcher's way): an uncaught exception aborts.
        env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(common.free_port()))
        env.pop("SWML_SESSION_ID", None)
        net = os.environ["SWML_NET"]
        procs = [subprocess.Popen([sys.executable, "-c", UNCAUGHT], cwd="/tmp", stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  env=dict(env, RANK=str(r), SWML_ADDR=f"127.{net}.{2 + r}")) for r in range(2)]
        outs = [p.communicate(timeout=common.HANG_S)[0] for p in procs]
        for p, out in zip(procs, outs):
            assert p.returncode == 1 and "the training script failed" in out, out
        _, delta = _wait_ended(before, SESSIONS)
        assert delta == {'reason="abort"': SESSIONS}, f"uncaught exception: sessions ended {delta}, want {SESSIONS} by reason abort"


# -- two hook jobs on one switch ---------------------------------------------------------

def hook_job_rank(rank, world, barrier):
    """DDP on Gloo with swml.allreduce_hook and swml.init()'s session id
    agreed through the store; every rank of both jobs joins before any
    trains, so both jobs hold their sessions at once."""
    import torch
    import torch.distributed as dist
    import swml
    dist.init_process_group("gloo")
    state = swml.HookState(swml.init())
    barrier.wait(timeout=common.HANG_S)
    model = torch.nn.parallel.DistributedDataParallel(make_model(torch), bucket_cap_mb=0.01)
    model.register_comm_hook(state, swml.allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = make_data(torch, rank)
    losses = []
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
    state.close()
    dist.destroy_process_group()
    return {"losses": losses, "identical": all(torch.equal(all_flat[0], f) for f in all_flat)}


def test_hook_jobs_share_switch():
    """Two DDP-hook jobs at once on one switch, neither naming a session
    id: each agrees on its own through its store, so they do not collide;
    both train, the same model on the same data, to the same losses."""
    from concurrent.futures import ThreadPoolExecutor
    barrier = multiprocessing.get_context("spawn").Barrier(4)
    with ThreadPoolExecutor(2) as ex:
        jobs = [ex.submit(common.launch, 2, hook_job_rank, barrier, agree_session=True, first_addr=2 + 2 * j)
                for j in range(2)]
        a, b = [j.result() for j in jobs]
    for r in a + b:
        assert r["identical"], f"rank {r['rank']}: parameters differ across its job's ranks"
    la, lb = a[0]["losses"], b[0]["losses"]
    assert la[-1] < la[0], la
    assert max(abs(x - y) for x, y in zip(la, lb)) <= 1e-6 * abs(la[0]), (la, lb)


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
