"""pytest set-up of the PyTorch tests: one `swml-rdma switch` for the whole
run on a fresh loopback /16 (run.sh runs pytest in a private network
namespace when root). The tests use the installed swml package
(`pip install ./python`), never the source tree."""

import pytest

import common


@pytest.fixture(scope="session", autouse=True)
def switch():
    """The switch (common.start_switch): SWML_NET and SWML_CONTROLLER are
    set for the tests and their spawned ranks."""
    with common.start_switch() as addr:
        yield addr
