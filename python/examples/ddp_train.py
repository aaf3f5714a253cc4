"""A minimal DDP training script on the swml backend, started by any
launcher that sets the environment contract (docs/pytorch.md):
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and for swml SWML_CONTROLLER
and SWML_ADDR (this rank's RoCE address).

    python3 ddp_train.py [--steps 20]
"""

import argparse

import torch
import torch.distributed as dist

import swml  # noqa: F401 - importing swml registers the "swml" backend


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    steps = p.parse_args().steps
    dist.init_process_group("swml")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 16, generator=g)
    y = x.sum(1, keepdim=True).tanh()
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print(f"rank {rank}/{world}: step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
