"""Shared set-up of the PyTorch tests and benchmark: each rank is a spawned
process (never fork: see docs/pytorch.md) that joins the job at the switch
started by run.sh."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


def rank_env(rank, world, net, master_port):
    """The environment torchrun would give, plus where the switch is: the
    switch at 127.<net>.1, rank r's NIC at 127.<net>.(2+r)."""
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port),
        SWML_ADDR=f"127.{net}.{2 + rank}",
    )


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
