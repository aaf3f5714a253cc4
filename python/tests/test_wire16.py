"""The 16-bit wire (docs/pytorch.md "Which wire a dtype uses"): bfloat16 and
float16 all-reduces go through a 16-bit-wire session by default, float32
stays on the 32-bit wire unless SWML_WIRE=16, and SWML_WIRE=32 keeps every
dtype on the 32-bit wire; the sums of ones are exact either way."""

import os

import pytest

import common


def wire_rank(rank, world, setting):
    if setting is None:
        os.environ.pop("SWML_WIRE", None)
    else:
        os.environ["SWML_WIRE"] = setting
    import torch
    import torch.distributed as dist
    import swml
    dist.init_process_group("swml")
    pg = swml.process_group()
    res = {"wire": {str(dt): pg.wire_bits(dt) for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int32)}}
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        x = torch.ones(5000, dtype=dt)  # several messages, the last one partial
        dist.all_reduce(x)
        res[str(dt)] = bool(torch.equal(x, torch.full((5000,), float(world), dtype=dt)))
    pg.shutdown()
    dist.destroy_process_group()
    return res


@pytest.mark.parametrize("setting,want", [
    (None, {"torch.float32": 32, "torch.bfloat16": 16, "torch.float16": 16, "torch.int32": 32}),
    ("16", {"torch.float32": 16, "torch.bfloat16": 16, "torch.float16": 16, "torch.int32": 32}),
    ("32", {"torch.float32": 32, "torch.bfloat16": 32, "torch.float16": 32, "torch.int32": 32}),
])
def test_wire16(setting, want):
    """bf16 all_reduce(ones) == world_size exactly over the 16-bit wire, and
    the group says which wire each dtype used (pg.wire_bits)."""
    world = 2
    for r in common.launch(world, wire_rank, setting):
        assert r["wire"] == want, f"rank {r['rank']} SWML_WIRE={setting}: wires {r['wire']}, want {want}"
        for dt in ("torch.bfloat16", "torch.float16", "torch.float32"):
            assert r[dt], f"rank {r['rank']} SWML_WIRE={setting}: {dt} all_reduce(ones) != {world}"
