"""swml: PyTorch on swml-rdma's in-network aggregation (docs/pytorch.md).

    import swml, torch.distributed as dist  # importing swml registers "swml"
    dist.init_process_group("swml")         # RANK, WORLD_SIZE, MASTER_ADDR/PORT
    model = torch.nn.parallel.DistributedDataParallel(model)

or, with any backend, the DDP hook:

    model.register_comm_hook(swml.HookState(swml.init()), swml.allreduce_hook)

Never call swml from a forked child of a process that loaded it: use spawn.
"""

import os

from ._lib import (BFLOAT16, FLOAT16, FLOAT32, INT32, ForkError, Session,  # noqa: F401
                   SwmlError, load)


def init(**kwargs):
    """Load libswml.so and join the job: a Session (see its arguments; what
    is not given comes from the environment, e.g. torchrun's RANK and
    WORLD_SIZE and SWML_CONTROLLER). Without session_id and
    $SWML_SESSION_ID, after init_process_group, the ranks agree on a fresh
    session id through the process group's store, so two jobs on one switch
    do not collide (docs/pytorch.md "The backend or the hook")."""
    if kwargs.get("session_id") is None and not os.environ.get("SWML_SESSION_ID"):
        try:
            import torch.distributed as dist
        except ImportError:
            dist = None
        if dist is not None and dist.is_available():
            from . import backend
            kwargs["session_id"] = backend.hook_session_id()
    return Session(**kwargs)


def _register_if_torch():
    # Third-party backends register on import (oneCCL's bindings do): with
    # torch installed, init_process_group("swml") works after `import swml`.
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if dist.is_available():
        from . import backend
        backend.register()


_register_if_torch()


def __getattr__(name):
    if name in ("register", "ProcessGroupSwml", "allreduce_hook", "HookState", "process_group"):
        from . import backend
        return getattr(backend, name)
    raise AttributeError(name)
