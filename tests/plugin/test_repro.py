"""Repro scripts: written on failure, fail standalone while the bug is there, pass once fixed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# imported here, not inside a test: pytester drops modules a test imported when it ends, and
# torch cannot be imported a second time in one process
torch = pytest.importorskip("torch")

from tests import helpers  # noqa: E402

PLANTED_MODULE_BUG = """
import torch


class Buggy(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)

    def forward(self, x):
        y = torch.relu(self.lin(x))
        if torch.compiler.is_compiling():
            y = y + 0.01  # PLANTED BUG
        return y


def test_module(assert_compiles_like_eager):
    assert_compiles_like_eager(Buggy(8), torch.randn(4, 8), mark_dynamic=[(0, 0)],
                               replay=[(torch.randn(6, 8),)])
"""

PLANTED_BACKEND_BUG = """
import os
import torch
from hypothesis import given, settings
from pytest_flagos.strategies import graph_cases


def corrupts_softmax(gm, example_inputs):
    # a planted compiler bug, switched off by FIXED=1
    if os.environ.get("FIXED") == "1" or not any(
            "softmax" in str(node.target) for node in gm.graph.nodes):
        return gm.forward
    return lambda *args: [out * 1.01 for out in gm(*args)]


@settings(max_examples=100)
@given(case=graph_cases(kinds=("activation", "linear", "reduction")))
def test_graphs(case, assert_compiles_like_eager):
    assert_compiles_like_eager(case.build(), *case.inputs(), backend=corrupts_softmax,
                               **case.oracle_kwargs())
"""


def _only_script(pytester) -> Path:
    (script,) = (pytester.path / "repros").glob("repro_*.py")
    assert script.with_suffix(".pt").exists()
    return script


@pytest.mark.slow
def test_repro_of_a_module_compiled_by_inductor(run_pytest, run_python, pytester):
    test_file = pytester.makepyfile(PLANTED_MODULE_BUG)
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros")
    result.assert_outcomes(failed=1)
    script = _only_script(pytester)
    assert script.name.startswith("repro_test_repro_of_a_module_compiled_by_induc__test_module_")
    result.stdout.fnmatch_lines([f"*flagos repro: {script}*"])
    assert script.exists() and script.with_suffix(".pt").exists()
    text = script.read_text()
    assert "DEVICE = 'cpu'" in text and "def check_compiles_like_eager(" in text
    assert "'mark_dynamic': ((0, 0),)" in text

    # standalone, it fails the same way as the test -- compiling into a fresh cache of its own,
    # never into (or from) the cache the caller's environment names
    shared_cache = pytester.path / "shared-cache"
    shared_cache.mkdir()
    first = run_python(script, env={"TORCHINDUCTOR_CACHE_DIR": str(shared_cache)})
    assert list(shared_cache.iterdir()) == [], "the repro compiled into the caller's cache"
    assert first.returncode != 0
    assert "CompiledMismatch: output: compiled torch.float32 result differs" in first.stderr

    # fix the bug where it lives (the test's module), and the repro passes
    test_file.write_text(test_file.read_text().replace("y = y + 0.01  # PLANTED BUG", "pass"))
    fixed = run_python(script)
    assert fixed.returncode == 0, fixed.stderr
    assert "repro passed: compiled matches eager" in fixed.stdout


def test_repro_of_a_drawn_graph_with_a_planted_backend_bug(run_pytest, run_python, pytester):
    pytester.makepyfile(PLANTED_BACKEND_BUG)
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros", timeout=600)
    result.assert_outcomes(failed=1)
    script = _only_script(pytester)
    result.stdout.fnmatch_lines([f"*flagos repro: {script}*"])
    text = script.read_text()
    assert "class Graph(nn.Module):" in text  # the drawn graph's source, not an import
    assert "torch.softmax(x" in text or "torch.log_softmax(x" in text

    broken = run_python(script)
    assert broken.returncode != 0
    assert "CompiledMismatch" in broken.stderr
    fixed = run_python(script, env={"FIXED": "1"})
    assert fixed.returncode == 0, fixed.stderr
    assert "repro passed" in fixed.stdout


def test_no_repro_dir_says_how_to_get_one(run_pytest, pytester):
    pytester.makepyfile(PLANTED_MODULE_BUG.replace("replay=[(torch.randn(6, 8),)]", "backend='aot_eager'"))
    result = run_pytest("--flagos-device=cpu")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*flagos repro: not written (pass --flagos-repro-dir=DIR to get a standalone script)*"]
    )


def test_a_lambda_backend_cannot_be_reproduced_and_says_why(run_pytest, pytester):
    pytester.makepyfile("""
        import torch

        def fn(x):
            return x * 2

        def test_lambda_backend(assert_compiles_like_eager):
            assert_compiles_like_eager(fn, torch.randn(4), backend=lambda gm, inputs: lambda *a: [o + 1 for o in gm(*a)])
    """)
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*flagos repro: not written (the backend is a lambda)*"])
    assert not list((pytester.path / "repros").glob("*.py"))


# a wrong-result compiler, planted in the test module and switched off by FIXED=1: the graphs a
# repro holds for callables that cannot be imported by name must reproduce it
PLANTED_WRONG_RESULT = """
import os
import pytest
import torch


def wrong_result(gm, example_inputs):
    if os.environ.get("FIXED") == "1":
        return gm.forward
    return lambda *args: [out + 0.5 for out in gm(*args)]


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def apply(self, x):
        return torch.sin(x) * self.factor


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def twice(self, x):
        return torch.relu(self.lin(x)) * 2


def closure():
    scale = 3.0

    def fn(x):
        return torch.cos(x) * scale

    return fn


def local_module():
    class Local(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            return x * self.weight

    return Local()


def test_lambda(assert_compiles_like_eager):
    assert_compiles_like_eager(lambda x: torch.tanh(x) + 1, torch.randn(4, 8), backend=wrong_result)


def test_closure(assert_compiles_like_eager):
    assert_compiles_like_eager(closure(), torch.randn(4, 8), backend=wrong_result,
                               mark_dynamic=[(0, 0)], replay=[(torch.randn(6, 8),)])


def test_bound_method(assert_compiles_like_eager):
    assert_compiles_like_eager(Scaler(1.5).apply, torch.randn(4, 8), backend=wrong_result)


def test_bound_method_of_a_module(assert_compiles_like_eager):
    torch.manual_seed(0)
    assert_compiles_like_eager(Net().twice, torch.randn(4, 8), backend=wrong_result, grads=True)


def test_module_class_defined_in_a_function(assert_compiles_like_eager):
    assert_compiles_like_eager(local_module(), torch.randn(4, 8), backend=wrong_result)
"""

CALLABLE_KINDS = ["lambda", "closure", "bound_method", "bound_method_of_a_module", "module_class_defined_in_a_function"]


@pytest.mark.slow
def test_callables_not_importable_by_name_get_a_repro_of_their_graphs(run_pytest, run_python, pytester):
    pytester.makepyfile(test_kinds=PLANTED_WRONG_RESULT)
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros", timeout=600)
    result.assert_outcomes(failed=len(CALLABLE_KINDS))
    assert "not written" not in result.stdout.str()
    for kind in CALLABLE_KINDS:
        (script,) = (pytester.path / "repros").glob(f"repro_test_kinds__test_{kind}_????????.py")
        text = script.read_text()
        assert "the arguments\n# it was called with" in text and "# graph 0 " in text, kind
        broken = run_python(script)
        assert broken.returncode != 0, (kind, broken.stdout)
        assert "CompiledMismatch: output[0]: compiled" in broken.stderr, (kind, broken.stderr[-2000:])
        fixed = run_python(script, env={"FIXED": "1"})
        assert fixed.returncode == 0, (kind, fixed.stderr[-2000:])
        assert "repro passed" in fixed.stdout


def test_repro_names_never_collide(run_pytest, pytester):
    pytester.makepyfile(
        test_names="""
        import pytest
        import torch

        def fn(x):
            y = x * 2
            return y + 1 if torch.compiler.is_compiling() else y

        @pytest.mark.parametrize("label", ["x-y", "x_y"])
        def test_x(assert_compiles_like_eager, label):
            assert_compiles_like_eager(fn, torch.randn(4), backend="eager")
    """
    )
    pytester.mkpydir("sub")
    (pytester.path / "sub" / "test_names.py").write_text((pytester.path / "test_names.py").read_text())
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros", "test_names.py", "sub/test_names.py")
    result.assert_outcomes(failed=4)
    scripts = sorted((pytester.path / "repros").glob("*.py"))
    assert len(scripts) == 4, scripts
    texts = {script.read_text().split("TEST_ID = ", 1)[1].splitlines()[0] for script in scripts}
    assert len(texts) == 4  # each script names its own test


def test_repro_leaves_no_temporary_directory(run_pytest, run_python, pytester, tmp_path):
    pytester.makepyfile(PLANTED_MODULE_BUG.replace("replay=[(torch.randn(6, 8),)]", "backend='aot_eager'"))
    run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros").assert_outcomes(failed=1)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    run = run_python(_only_script(pytester), env={"TMPDIR": str(temporary)})
    assert "CompiledMismatch" in run.stderr
    assert list(temporary.iterdir()) == []


# -- a repro runs on the device it came from, as the plugin set the run up ---------------------

SHOW_TORCH_FL = """
import runpy, sys
try:
    runpy.run_path(sys.argv[1], run_name="__main__")
finally:
    print("TORCH_FL", "torch_fl" in sys.modules, flush=True)
"""


def _run_showing_torch_fl(pytester, script: Path, env: dict | None = None):
    wrapper = pytester.path / "show_torch_fl.py"
    wrapper.write_text(SHOW_TORCH_FL)
    return helpers.run_python(wrapper, str(script), env=env, cwd=script.parent)


PLANTED_EAGER_BUG = """
import torch

def fn(x):
    y = torch.sin(x)
    return y + 0.25 if torch.compiler.is_compiling() else y

def test_fn(assert_compiles_like_eager):
    assert_compiles_like_eager(fn, torch.randn(8), backend="eager")
"""


def test_cpu_repro_keeps_torch_fl_out_and_imports_the_device_module(run_pytest, pytester, flagos_env):
    pytester.makepyfile(PLANTED_EAGER_BUG)
    pytester.makepyfile(vendor_probe="print('VENDOR MODULE IMPORTED', flush=True)\n")
    result = run_pytest("--flagos-device=cpu", "--flagos-device-module=vendor_probe", "--flagos-repro-dir=repros")
    result.assert_outcomes(failed=1)
    # the module is found the way the test run found it (rootdir on sys.path)
    ran = _run_showing_torch_fl(
        pytester, _only_script(pytester), env={"PYTHONPATH": f"{pytester.path}:{os.environ['PYTHONPATH']}"}
    )
    assert "CompiledMismatch" in ran.stderr
    assert "VENDOR MODULE IMPORTED" in ran.stdout
    assert "TORCH_FL False" in ran.stdout, ran.stdout


def test_flagos_repro_loads_torch_fl(run_pytest, pytester):
    if not hasattr(torch, "flagos"):
        pytest.skip("torch_fl is not loaded in this environment")
    pytester.makepyfile(PLANTED_EAGER_BUG)
    result = run_pytest("--flagos-device=flagos", "--flagos-repro-dir=repros")
    result.assert_outcomes(failed=1)
    script = _only_script(pytester)
    assert "FLAGOS_AUTOLOAD" not in script.read_text().split("import torch\n", 1)[0].split("import tempfile", 1)[1]
    ran = _run_showing_torch_fl(pytester, script)
    assert "CompiledMismatch" in ran.stderr, ran.stderr[-2000:]
    assert "TORCH_FL True" in ran.stdout
