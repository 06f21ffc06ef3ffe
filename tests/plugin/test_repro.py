"""Repro scripts: written on failure, fail standalone while the bug is there, pass once fixed."""

from __future__ import annotations

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


def test_repro_of_a_module_compiled_by_inductor(run_pytest, run_python, pytester):
    test_file = pytester.makepyfile(PLANTED_MODULE_BUG)
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros")
    result.assert_outcomes(failed=1)
    script = pytester.path / "repros" / "repro_test_module.py"
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
    script = pytester.path / "repros" / "repro_test_graphs.py"
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


def test_a_closure_cannot_be_reproduced_and_says_why(run_pytest, pytester):
    pytester.makepyfile("""
        import torch

        def test_closure(assert_compiles_like_eager):
            scale = 2.0

            def fn(x):
                y = x * scale
                return y + 0.01 if torch.compiler.is_compiling() else y

            assert_compiles_like_eager(fn, torch.randn(4), backend="eager")
    """)
    result = run_pytest("--flagos-device=cpu", "--flagos-repro-dir=repros")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*flagos repro: not written (the function test_closure.<locals>.fn "
            "is a closure over scale; define it at module level)*"
        ]
    )
