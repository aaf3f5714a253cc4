#!/usr/bin/python3
"""One rank of Gloo's all_reduce in the network lab (`swml-rdma lab`).

Run by the lab in worker namespace `rank`, with GLOO_SOCKET_IFNAME set to
the worker's link, so Gloo's traffic crosses the same shaped links as
SwitchML's. Rank r's input is standard normal float32 from a generator
seeded with 1000 + r; every rank rebuilds every rank's input, and every
result is checked against the float64 sum within float32 rounding
(N * 2^-24 * sum |x|, the bound the project's ring is held to). A barrier
precedes each all_reduce, which alone is timed. Prints one JSON object:
{"rank", "times_ns" (measured all-reduces), "result_sha256" (the last
result, float32 little-endian: the same on every rank), "verified",
"cpu_user_ns", "cpu_sys_ns" (this process's CPU inside the measured
all-reduces, every thread)}; on a
wrong result {"rank", "error"} and exit status 1.
"""
import argparse
import datetime
import hashlib
import json
import resource
import sys
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--master", required=True, help="rank 0's HOST:PORT for the rendezvous")
    ap.add_argument("--elements", type=int, required=True, help="float32 elements per tensor")
    ap.add_argument("--iters", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300, help="seconds for the rendezvous and each collective")
    a = ap.parse_args()
    torch.set_num_threads(1)  # the lab's hosts share a few cores
    dist.init_process_group("gloo", init_method="tcp://" + a.master, rank=a.rank,
                            world_size=a.workers, timeout=datetime.timedelta(seconds=a.timeout))

    def rank_input(r):
        g = torch.Generator().manual_seed(1000 + r)
        return torch.randn(a.elements, generator=g, dtype=torch.float32)

    mine = rank_input(a.rank)
    ref = torch.zeros(a.elements, dtype=torch.float64)
    sum_abs = torch.zeros(a.elements, dtype=torch.float64)
    for r in range(a.workers):
        x = rank_input(r).double()
        ref += x
        sum_abs += x.abs()
    bound = sum_abs * (a.workers * 2.0 ** -24)
    del sum_abs
    buf = torch.empty_like(mine)
    times = []
    cpu_user = cpu_sys = 0.0  # seconds of this process's CPU inside the measured all-reduces
    for it in range(a.warmup + a.iters):
        buf.copy_(mine)
        dist.barrier()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter_ns()
        dist.all_reduce(buf)
        elapsed = time.perf_counter_ns() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        bad = ((buf.double() - ref).abs() > bound).nonzero()
        if len(bad) > 0:
            i = int(bad[0])
            print(json.dumps({"rank": a.rank, "error": "RESULT MISMATCH: all-reduce %d of %d: element %d: %r, float64 reference %r, bound %g"
                              % (it + 1, a.warmup + a.iters, i, float(buf[i]), float(ref[i]), float(bound[i]))}))
            sys.exit(1)
        if it >= a.warmup:
            times.append(elapsed)
            cpu_user += r1.ru_utime - r0.ru_utime
            cpu_sys += r1.ru_stime - r0.ru_stime
    digest = hashlib.sha256(buf.numpy().astype("<f4").tobytes()).hexdigest()
    dist.destroy_process_group()
    print(json.dumps({"rank": a.rank, "times_ns": times, "result_sha256": digest, "verified": True,
                      "cpu_user_ns": int(cpu_user * 1e9), "cpu_sys_ns": int(cpu_sys * 1e9)}))


if __name__ == "__main__":
    main()
