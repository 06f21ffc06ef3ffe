"""Op coverage: every OpInfo op of PyTorch's op_db, eager and compiled, on the device.

For each op and each dtype the capability manifest claims (and the op supports on the
device's dtype tables), the op's sample inputs are built on the device and run

1. eagerly, against the CPU (float64 where the op has it): a difference is the device's
   eager kernels (verdict ``eager-wrong``);
2. under torch.compile (inductor, fresh cache) against eager, with the plugin's oracle: a
   difference is the compiler or the device's code generation (``compiled-wrong``), an
   exception is ``compile-error``. A device without an inductor code generator gets step 1
   and a skip that says so.

The first line of a failure starts with the verdict and the op; the verdict and the op are
also recorded on the test report (user properties ``flagos_verdict`` and ``flagos_op``).
Which ops, dtypes and samples run is the tier's choice (ops_support.py: FLAGOS_OPS_TIER,
``ci`` by default, ``full`` for many cores and machines).
"""

from __future__ import annotations

from typing import Any

import pytest

import ops_support

pytestmark = [
    # no "inductor" requirement: on a device without a code generator the cases still check the
    # eager kernels against the CPU, and skip the compiled half with the reason
    # the samples provoke torch's own warnings (deprecations, "not supported" notes): not findings
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "op_case" in metafunc.fixturenames:
        ops_support.parametrize(metafunc, backward=metafunc.function.__name__ == "test_backward")


def test_forward(
    op_case: Any,
    flagos_device: Any,
    fresh_inductor_cache: Any,
    assert_compiles_like_eager: Any,
    record_property: Any,
    request: pytest.FixtureRequest,
) -> None:
    ops_support.run_case(
        op_case,
        flagos_device,
        assert_compiles_like_eager,
        record_property,
        backward=False,
        compile_missing=ops_support.why_not_compiled(request.config),
    )


def test_backward(
    op_case: Any,
    flagos_device: Any,
    fresh_inductor_cache: Any,
    assert_compiles_like_eager: Any,
    record_property: Any,
    request: pytest.FixtureRequest,
) -> None:
    ops_support.run_case(
        op_case,
        flagos_device,
        assert_compiles_like_eager,
        record_property,
        backward=True,
        compile_missing=ops_support.why_not_compiled(request.config),
    )
