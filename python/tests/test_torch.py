"""PyTorch through the switch (run by run.sh, which starts `swml-rdma switch`
and sets SWML_CONTROLLER and SWML_NET). Each check prints PASS or raises.

    test_torch.py train N    swml vs gloo, N ranks: loss curves, params identical every step, int32 exact
    test_torch.py kill N     a rank killed mid-training: the others raise a clear exception in bounded time
    test_torch.py fork       a forked child of a process that loaded libswml fails clearly
"""

import json
import math
import multiprocessing
import os
import queue
import random
import signal
import sys
import tempfile
import time
import traceback

import common

STEPS = 25
LR = 0.3
# Bound the waits on child processes (hang detection, not performance).
HANG_S = float(os.environ.get("SWML_TEST_HANG_S", "240"))


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


def allreduce_bound(xs):
    """Per-element bound of the switch's float32 sum of xs (one tensor per
    rank), from docs/quantization.md "Error bound": n/F + 4u·Σ|x_i|, with
    F ≥ ((2^31-1)/n)/2^(e+1) for the largest block exponent e."""
    import torch
    n = len(xs)
    m = max(float(x.abs().max()) for x in xs)
    e = math.ceil(math.log2(m)) if m > 0 else -126
    f = ((2 ** 31 - 1) / n) / 2.0 ** (e + 1)
    return n / f + 4 * 2.0 ** -24 * sum(x.abs() for x in xs)


def worker(rank, world, backend, port, out, kill_at):
    import torch
    import torch.distributed as dist
    common.rank_env(rank, world, os.environ["SWML_NET"], port)
    if kill_at >= 0:
        import faulthandler
        faulthandler.dump_traceback_later(HANG_S / 2, exit=False)
    try:
        import swml
        swml.register()
        dist.init_process_group("gloo" if backend == "hook" else backend)
        res = {"rank": rank, "losses": [], "events": []}

        # 1. One all-reduce of random floats against the quantization bound
        # (every rank can rebuild every rank's input from its seed).
        xs = [torch.randn(100_000, generator=torch.Generator().manual_seed(7 + r)) * (r + 1) for r in range(world)]
        got = xs[rank].clone()
        dist.all_reduce(got)
        exact = torch.stack([x.double() for x in xs]).sum(0)
        err = (got.double() - exact).abs()
        bound = allreduce_bound([x.double() for x in xs])
        res["float_max_err"] = float(err.max())
        res["float_within_bound"] = bool((err <= bound).all())
        # 2. int32: exact, with values that use the full range.
        ints = [torch.randint(-(2 ** 31) // world, 2 ** 31 // world, (50_001,), dtype=torch.int32,
                              generator=torch.Generator().manual_seed(9 + r)) for r in range(world)]
        got_i = ints[rank].clone()
        dist.all_reduce(got_i)
        want_i = torch.stack([i.long() for i in ints]).sum(0)
        res["int32_exact"] = bool(torch.equal(got_i.long(), want_i))

        # 3. Train: DDP, SGD, fixed seeds, rank-local data.
        model = torch.nn.parallel.DistributedDataParallel(make_model(torch), bucket_cap_mb=0.01)
        if backend == "hook":  # Gloo for everything, the switch for DDP's buckets
            state = swml.HookState(swml.init())
            model.register_comm_hook(state, swml.allreduce_hook)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        x, y = make_data(torch, rank)
        identical = True
        for step in range(STEPS):
            if step == kill_at and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            t0 = time.monotonic()
            try:
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
            except Exception as e:  # noqa: BLE001 - reported to the parent
                res["raised"] = f"{type(e).__name__}: {e}"
                res["raised_after_s"] = time.monotonic() - t0
                res["raised_step"] = step
                out.put(res)
                out.close()
                out.join_thread()  # put() is flushed by a thread: wait for it before _exit
                os._exit(3)  # skip destroy_process_group: Gloo would wait for the dead rank
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            res["losses"].append(float(mean) / world)
            flat = torch.cat([p.detach().flatten() for p in model.parameters()])
            all_flat = [torch.empty_like(flat) for _ in range(world)]
            dist.all_gather(all_flat, flat)  # Gloo under swml too
            if not all(torch.equal(all_flat[0], f) for f in all_flat):
                identical = False
        res["params_identical_every_step"] = identical
        res["final"] = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
        if backend == "swml":
            swml.process_group().shutdown()
        if backend == "hook":
            state.completer.stop()
            state.session.close()
        dist.destroy_process_group()
        out.put(res)
    except Exception:  # noqa: BLE001
        out.put({"rank": rank, "error": traceback.format_exc()})
        raise


def launch(world, backend, kill_at=-1):
    os.environ["SWML_SESSION_ID"] = str(random.randrange(1, 1 << 31))  # the hook's session
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = common.free_port()
    procs = [ctx.Process(target=worker, args=(r, world, backend, port, out, kill_at)) for r in range(world)]
    for p in procs:
        p.start()
    want = world - (1 if kill_at >= 0 else 0)
    results = {}
    deadline = time.monotonic() + HANG_S
    try:
        while len(results) < want:
            try:
                r = out.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{backend} {world} ranks: only ranks {sorted(results)} reported within {HANG_S} s (hang)")
            if "error" in r:
                raise AssertionError(f"{backend} rank {r['rank']} failed:\n{r['error']}")
            results[r["rank"]] = r
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [results[k] for k in sorted(results)]


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"PASS {what}")


def train(world):
    sw = launch(world, "swml")
    gl = launch(world, "gloo")
    for r in sw:
        check(r["float_within_bound"], f"{world} ranks: rank {r['rank']} float32 all-reduce within the quantization bound (max error {r['float_max_err']:.3g})")
        check(r["int32_exact"], f"{world} ranks: rank {r['rank']} int32 all-reduce exact")
        check(r["params_identical_every_step"], f"{world} ranks: rank {r['rank']} parameters bit-identical to rank 0's after every step (swml)")
    for r in gl:
        check(r["params_identical_every_step"], f"{world} ranks: rank {r['rank']} parameters identical after every step (gloo)")
    ls, lg = sw[0]["losses"], gl[0]["losses"]
    dev = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ls, lg))
    # Per step the switch's sum is within ~n²·2^-31 of the gradient scale
    # (docs/quantization.md); over 25 steps of SGD that stays far below 1e-3.
    check(len(ls) == STEPS and dev < 1e-3, f"{world} ranks: swml and gloo loss curves agree (max relative deviation {dev:.3g} over {STEPS} steps; loss {lg[0]:.4f} -> {lg[-1]:.4f})")
    check(lg[-1] < 0.8 * lg[0], f"{world} ranks: the model trains (gloo loss {lg[0]:.4f} -> {lg[-1]:.4f})")
    pdev = max(abs(a - b) for a, b in zip(sw[0]["final"], gl[0]["final"]))
    check(pdev < 1e-3, f"{world} ranks: final parameters swml vs gloo within 1e-3 (max difference {pdev:.3g})")
    if world == 2:
        hk = launch(world, "hook")
        for r in hk:
            check(r["params_identical_every_step"], f"{world} ranks: rank {r['rank']} parameters identical after every step (gloo + swml.allreduce_hook)")
        lh = hk[0]["losses"]
        dev = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(lh, lg))
        check(len(lh) == STEPS and dev < 1e-3, f"{world} ranks: DDP hook and gloo loss curves agree (max relative deviation {dev:.3g})")


def kill(world):
    t0 = time.monotonic()
    rs = launch(world, "swml", kill_at=5)
    took = time.monotonic() - t0
    for r in rs:
        msg = r.get("raised", "")
        check(msg and "swml" in msg, f"kill: rank {r['rank']} raised at step {r.get('raised_step')} after {r.get('raised_after_s', 0):.1f} s: {msg[:300]!r}")
    print(f"kill: {world} ranks, rank 1 killed at step 5, the others raised; whole run {took:.1f} s")


def _forked_child(q):
    try:
        import swml
        swml.init(rank=0, world_size=1)
        q.put("no error")
    except swml.ForkError as e:
        q.put(f"ForkError: {e}")
    except Exception as e:  # noqa: BLE001
        q.put(f"{type(e).__name__}: {e}")


def fork():
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
    check(msg.startswith("ForkError") and "spawn" in msg, f"fork: a forked child fails clearly: {msg[:200]!r}")


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "train":
        train(int(sys.argv[2]))
    elif what == "kill":
        kill(int(sys.argv[2]))
    elif what == "fork":
        fork()
    else:
        sys.exit(f"unknown test {what!r}: train N, kill N or fork")
