"""Fixtures of the kernel tests: the compiled module, located and loaded through mamba_ssm._loader.

ci/test.sh builds ``mamba_ssm/_C.abi3.so`` in place before pytest; without it these tests skip with the
loader's reason (they never build the module themselves: that is the build tests' job).
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(scope="session")
def compiled():
    """The mamba_ssm._families.selective_scan.compiled module with _C loaded, or a skip naming why not."""
    from mamba_ssm import _loader

    result = _loader.load()
    if not result.loaded:
        pytest.skip(
            f"mamba_ssm._C is not loaded: {result.reason} (build it: "
            "MAMBA_FORCE_BUILD=TRUE python setup.py build_ext --inplace)"
        )
    import mamba_ssm._families.selective_scan.compiled as backend

    return backend


@pytest.fixture
def torch_threads():
    """Sets torch's intra-op thread count for the test (the CPU ops split their tasks across that many
    threads) and restores it after: call it with the count."""
    import torch

    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


# Case counts of the HIP-CPU emulation (test_hipcpu_kernels.py::test_emulated) per layout and resume
# schedule, printed in the terminal summary (shown under -q as well), so CI's log says how many ran.
_HIPCPU_TALLY = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if getattr(item, "originalname", None) != "test_emulated" or not hasattr(item, "callspec"):
        return
    if rep.when == "call" or (rep.when == "setup" and rep.outcome != "passed"):
        p = item.callspec.params
        counts = _HIPCPU_TALLY.setdefault(f"{p['layout']}/{p['schedule']}", {})
        counts[rep.outcome] = counts.get(rep.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter):
    if not _HIPCPU_TALLY:
        return
    terminalreporter.write_line("HIP-CPU emulated GPU kernels (cases per layout/schedule):")
    for run, counts in sorted(_HIPCPU_TALLY.items()):
        detail = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        terminalreporter.write_line(f"  {run}: {sum(counts.values())} cases: {detail}")
