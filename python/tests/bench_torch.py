"""swml backend vs Gloo: time per all-reduce and ATE/s at 4 ranks on
loopback (run through run.sh bench; it starts its own switch).

    bench_torch.py [--ranks 4] [--sizes 4,16,64] [--rounds 3] [--iters 5]

Each rank has a Gloo default group and an swml ProcessGroup on the same
store; each round runs --iters all-reduces with one and then the other,
alternating which goes first. Times are rank 0's, from the call to the
end of work.wait(), median over every round; ATE/s = elements ÷ median."""

import argparse
import os
import statistics
import time

import common


def worker(rank, world, port, sizes, rounds, iters, out):
    import torch
    import torch.distributed as dist
    common.rank_env(rank, world, os.environ["SWML_NET"], port)
    import swml
    from swml.backend import ProcessGroupSwml
    dist.init_process_group("gloo")
    gloo = dist.distributed_c10d._get_default_group()
    store = dist.distributed_c10d._get_default_store()
    from datetime import timedelta
    sw = ProcessGroupSwml(dist.PrefixStore("bench-swml", store), rank, world, timedelta(seconds=120))
    times = {}
    for mib in sizes:
        n = mib * (1 << 20) // 4
        x = torch.randn(n, generator=torch.Generator().manual_seed(rank)) * 1e-3
        for rnd in range(rounds):
            order = [("gloo", gloo), ("swml", sw)]
            if rnd % 2:
                order.reverse()
            for name, pg in order:
                gloo.barrier().wait()
                pg.allreduce([x.clone()]).wait()  # warm-up
                for _ in range(iters):
                    y = x.clone()
                    gloo.barrier().wait()
                    t0 = time.perf_counter()
                    pg.allreduce([y]).wait()
                    times.setdefault((mib, name), []).append(time.perf_counter() - t0)
    sw.shutdown()
    if rank == 0:
        out.put(times)


def main():
    with common.start_switch():
        bench()


def bench():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--sizes", default="4,16,64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = common.free_port()
    ps = [ctx.Process(target=worker, args=(r, a.ranks, port, sizes, a.rounds, a.iters, out)) for r in range(a.ranks)]
    for p in ps:
        p.start()
    times = out.get(timeout=1800)
    for p in ps:
        p.join(timeout=60)
    print(f"{a.ranks} ranks, {a.rounds} alternating rounds x {a.iters} all-reduces per backend and size; load average {os.getloadavg()[0]:.1f}")
    print(f"{'size':>6} {'gloo median':>12} {'swml median':>12} {'gloo ATE/s':>11} {'swml ATE/s':>11} {'swml/gloo':>9}")
    for mib in sizes:
        n = mib * (1 << 20) // 4
        g = statistics.median(times[(mib, "gloo")])
        s = statistics.median(times[(mib, "swml")])
        print(f"{mib:>4}MiB {g * 1e3:>10.1f}ms {s * 1e3:>10.1f}ms {n / g:>11.3g} {n / s:>11.3g} {g / s:>8.2f}x")


if __name__ == "__main__":
    main()
