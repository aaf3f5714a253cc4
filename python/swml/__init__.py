"""swml: PyTorch on swml-rdma's in-network aggregation (docs/pytorch.md).

    import swml, torch.distributed as dist
    swml.register()                         # the "swml" backend
    dist.init_process_group("swml")         # torchrun's RANK, WORLD_SIZE, MASTER_ADDR
    model = torch.nn.parallel.DistributedDataParallel(model)

or, with any backend, the DDP hook:

    model.register_comm_hook(swml.HookState(swml.init()), swml.allreduce_hook)

Never call swml from a forked child of a process that loaded it: use spawn.
"""

from ._lib import FLOAT32, INT32, ForkError, Session, SwmlError, load  # noqa: F401


def init(**kwargs):
    """Load libswml.so and join the job: a Session (see its arguments; what
    is not given comes from the environment, e.g. torchrun's RANK and
    WORLD_SIZE and SWML_CONTROLLER)."""
    return Session(**kwargs)


def __getattr__(name):
    # The torch parts import torch only when used.
    if name in ("register", "ProcessGroupSwml", "allreduce_hook", "HookState", "process_group"):
        from . import backend
        return getattr(backend, name)
    raise AttributeError(name)
