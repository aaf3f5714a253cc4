#!/usr/bin/python3
"""One rank of DDP training in the network lab (`swml-rdma lab --systems ddp-swml,ddp-gloo`).

Run by the lab in worker namespace `rank`, with GLOO_SOCKET_IFNAME set to
the worker's link (Gloo's and the swml backend's inner Gloo group's TCP
cross the same shaped links as the switch's RoCE) and, for --backend swml,
SWML_CONTROLLER (the switch namespace's controller) and SWML_ADDR (this
worker's address): torch.distributed's environment contract, docs/pytorch.md.

The model is a multi-layer perceptron, --layers hidden Linear(width, width)
between Linear(64, width) and Linear(width, 16), ReLU between, so that the
gradient all-reduce, not the arithmetic, dominates a step. Every rank builds
it from seed 0 (DDP broadcasts rank 0's anyway), trains on its own fixed
synthetic batch (seed 1000 + rank) against a fixed teacher, tanh(x @ T), with
SGD. --dtype bf16 or fp16 sends the gradients in 16 bits through a
communication hook that does what DDP's bf16_compress_hook and
fp16_compress_hook do (torch 1.13's bf16_compress_hook refuses to register
without CUDA and NCCL): on swml the 16-bit buckets take the 16-bit wire
where the switch has one. Gloo in torch 1.13 cannot sum bfloat16 on CPU
("Invalid scalar type"): the lab runs Gloo's 16-bit rows with fp16.

--warmup untimed steps, then --steps timed ones (forward, backward with
DDP's all-reduces, optimizer); then --compute-steps forward and backward
passes under no_sync() (no all-reduce: the arithmetic alone, every rank at
once as in training). Prints one JSON object: {"rank", "backend", "dtype",
"wire_bits" (swml: the wire the gradients took; 0 otherwise), "params",
"allreduce_bytes_per_step", "step_ns", "fwd_bwd_ns", "optimizer_ns" (per
timed step), "compute_ns" (per no_sync pass), "losses" (every step's, warm-up
included), "params_sha256" (the final parameters, float32 little-endian:
the same on every rank), "param_l2", "cpu_user_ns", "cpu_sys_ns" (this
process's CPU over the timed steps, every thread)}; on a failure
{"rank", "error"} and exit status 1.
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

IN, OUT = 64, 16
DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_model(width, layers):
    mods = [torch.nn.Linear(IN, width)]
    for _ in range(layers):
        mods += [torch.nn.ReLU(), torch.nn.Linear(width, width)]
    mods += [torch.nn.ReLU(), torch.nn.Linear(width, OUT)]
    return torch.nn.Sequential(*mods)


def compress_hook(state, bucket):
    """DDP's bf16_compress_hook and fp16_compress_hook (torch 1.13's
    bf16_compress_hook refuses to register without CUDA and NCCL): the
    bucket averaged in state's (world size, dtype), written back as float32."""
    world, dtype = state
    buf = bucket.buffer()
    compressed = buf.to(dtype).div_(world)
    fut = dist.all_reduce(compressed, async_op=True).get_future()

    def decompress(f):
        buf.copy_(f.value()[0])
        return buf
    return fut.then(decompress)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("swml", "gloo"), required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--master", required=True, help="rank 0's HOST:PORT for the rendezvous")
    ap.add_argument("--dtype", choices=tuple(DTYPES), default="float32", help="the gradients' dtype in the all-reduce")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--compute-steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300, help="seconds for the rendezvous and each collective")
    a = ap.parse_args()
    torch.set_num_threads(1)  # the lab's hosts share a few cores
    wire_bits = 0
    if a.backend == "swml":
        import swml  # noqa: F401 - registers the "swml" backend
    dist.init_process_group(a.backend, init_method="tcp://" + a.master, rank=a.rank,
                            world_size=a.workers, timeout=datetime.timedelta(seconds=a.timeout))
    grad_dtype = DTYPES[a.dtype]
    if a.backend == "swml":
        wire_bits = swml.process_group().wire_bits(grad_dtype)

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(make_model(a.width, a.layers))
    if grad_dtype != torch.float32:
        model.register_comm_hook((a.workers, grad_dtype), compress_hook)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    g = torch.Generator().manual_seed(1000 + a.rank)
    x = torch.randn(a.batch, IN, generator=g)
    teacher = torch.randn(IN, OUT, generator=torch.Generator().manual_seed(7)) / IN ** 0.5
    y = torch.tanh(x @ teacher)

    losses, step_ns, fwd_bwd_ns, opt_ns = [], [], [], []
    cpu_user = cpu_sys = 0.0
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            dist.barrier()
            r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter_ns()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # returns when DDP's all-reduces are done
        t1 = time.perf_counter_ns()
        opt.step()
        t2 = time.perf_counter_ns()
        losses.append(loss.item())
        if step >= a.warmup:
            step_ns.append(t2 - t0)
            fwd_bwd_ns.append(t1 - t0)
            opt_ns.append(t2 - t1)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_user, cpu_sys = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().astype("<f4").tobytes()).hexdigest()
    l2 = float(flat.double().norm())

    # The arithmetic alone: forward and backward without DDP's all-reduce,
    # all ranks at once (they share the host's cores as in training).
    compute_ns = []
    dist.barrier()
    with model.no_sync():
        for _ in range(a.compute_steps):
            t0 = time.perf_counter_ns()
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            compute_ns.append(time.perf_counter_ns() - t0)
    dist.barrier()
    if a.backend == "swml":
        swml.process_group().shutdown()
    dist.destroy_process_group()
    print(json.dumps({"rank": a.rank, "backend": a.backend, "dtype": a.dtype, "wire_bits": wire_bits,
                      "params": params, "allreduce_bytes_per_step": params * torch.tensor([], dtype=grad_dtype).element_size(),
                      "step_ns": step_ns, "fwd_bwd_ns": fwd_bwd_ns, "optimizer_ns": opt_ns,
                      "compute_ns": compute_ns, "losses": losses, "params_sha256": digest, "param_l2": l2,
                      "cpu_user_ns": int(cpu_user * 1e9), "cpu_sys_ns": int(cpu_sys * 1e9)}))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - reported to the lab as JSON
        print(json.dumps({"rank": int(sys.argv[sys.argv.index("--rank") + 1]) if "--rank" in sys.argv else -1,
                          "error": "%s: %s" % (type(e).__name__, e)}))
        sys.exit(1)
