"""Exact sums through the switch (docs/quantization.md "Exact sums"): the
first check a new user runs after init_process_group("swml") — two ranks,
`x = torch.ones(4096); dist.all_reduce(x)` — gives world_size in every
element, exactly, as Gloo does; so do halves and small integers, in float32,
bfloat16 and float16."""

import pytest

import common


def exact_rank(rank, world):
    import torch
    import torch.distributed as dist
    import swml  # noqa: F401 - registers the backend
    dist.init_process_group("swml")
    res = {}

    def check(name, x, want):
        res[name] = {"exact": bool(torch.equal(x, want)), "dtype": str(x.dtype),
                     "got": sorted({float(v) for v in x.double().unique()[:4]})}

    x = torch.ones(4096)
    dist.all_reduce(x)
    check("ones", x, torch.full((4096,), float(world)))
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        for v in (1.0, 0.5):
            x = torch.full((4096,), v, dtype=dt)
            dist.all_reduce(x)
            check(f"{dt} {v}", x, torch.full((4096,), world * v, dtype=dt))
        ints = torch.arange(4096) % 101 - 50  # |Σ| ≤ 50·world: exact in every format
        x = (ints + rank).to(dt)
        dist.all_reduce(x)
        want = sum(ints + r for r in range(world)).to(dt)
        check(f"{dt} integers", x, want)
    swml.process_group().shutdown()
    dist.destroy_process_group()
    return res


@pytest.mark.parametrize("world", [2, 3])
def test_exact_sums(world):
    """all_reduce(ones) == world_size exactly (not 1.9999999), and the same
    for 0.5, small integers, bf16 and fp16, on every rank."""
    rs = common.launch(world, exact_rank)
    for r in rs:
        for name, c in r.items():
            if name == "rank":
                continue
            assert c["exact"], f"rank {r['rank']} {name} ({c['dtype']}): got {c['got']}, want the exact sum"
