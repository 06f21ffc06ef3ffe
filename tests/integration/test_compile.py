"""torch.compile on flagos: Triton codegen, compiled code really runs, both backends, workers."""

import re

import pytest
import torch
from torch._dynamo.utils import counters

import torch_fl.compile
from tests.helpers import kernel_over_flagos
from tests.requirements import accelerator

# The wrapper's entry point: `def call(args)` (2.11) or a method `def call(self, args)` (2.13).
CALL = re.compile(r"def call\((self, )?args\)")


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))


def test_inductor_generates_triton_for_flagos(compiled_on_workers, kernel_sources, flagos_device):
    def f(x):
        return torch.sin(x) * 2 + torch.cos(x).sum(-1, keepdim=True)

    x = torch.randn(16, 64, device=flagos_device)
    out = torch.compile(f)(x)
    torch.testing.assert_close(out.cpu(), f(x.cpu()), rtol=1e-5, atol=1e-5)
    sources = kernel_sources()
    assert any("@triton.jit" in s for s in sources), "inductor generated no Triton kernel for flagos"
    wrappers = [s for s in sources if CALL.search(s)]
    assert wrappers and "get_raw_stream" in wrappers[0]
    assert counters["inductor"]["async_compile_cache_miss"] >= 1


def test_compiled_graph_really_ran(compiled_on_workers, flagos_device):
    def f(x):
        return torch.relu(x) + 1

    x = torch.randn(128, device=flagos_device)
    torch.compile(f)(x)
    assert counters["stats"]["unique_graphs"] == 1
    assert counters["inductor"]["fxgraph_cache_miss"] == 1


@pytest.mark.parametrize("backend", ["inductor", "flagos"])
def test_both_backends_compile_an_mlp(compiled_on_workers, assert_compiles_like_eager, backend):
    torch.manual_seed(0)
    result = assert_compiles_like_eager(_mlp(), torch.randn(8, 32), backend=backend, grads=True)
    assert result.graphs >= 1


def _benchmarks():
    return sum(
        v for k, v in counters["inductor"].items() if k.startswith("benchmarking.") and k.endswith(".benchmark_gpu")
    )


@pytest.mark.parametrize("backend", ["inductor", "flagos"])
def test_mode_reaches_inductor_for_both_backends(compiled_on_workers, flagos_device, backend):
    def pointwise(x):
        return torch.tanh(x) * x + 1

    x = torch.randn(4096, device=flagos_device)
    before = _benchmarks()
    torch.compile(pointwise, backend=backend)(x)
    default = _benchmarks() - before
    torch._dynamo.reset()
    out = torch.compile(pointwise, backend=backend, mode="max-autotune-no-cudagraphs")(x)
    torch.testing.assert_close(out.cpu(), pointwise(x.cpu()))
    tuned = _benchmarks() - before - default
    assert tuned > default, f"max-autotune timed {tuned} configs, the default mode {default}: mode was lost"


def test_flagos_backend_is_listed_once():
    assert torch._dynamo.list_backends().count("flagos") == 1


def test_registration_is_visible_to_inductor(flagos_device):
    from torch._dynamo.device_interface import get_interface_for_device
    from torch._inductor.codegen.common import get_scheduling_for_device, get_wrapper_codegen_for_device
    from torch._inductor.utils import GPU_TYPES, is_gpu
    from torch.utils._triton import has_triton

    torch_fl.compile.register()
    assert is_gpu("flagos") and "flagos" in GPU_TYPES
    assert has_triton()
    interface = get_interface_for_device("flagos")
    assert interface.get_raw_stream(0) == torch.flagos.current_stream().flagos_stream
    assert interface.Worker.get_device_properties().multi_processor_count >= 1
    assert get_scheduling_for_device("flagos").__name__ == "FlagosScheduling"
    assert get_wrapper_codegen_for_device("flagos") is not None


def test_gemm_template_heuristics_know_flagos(flagos_device, caplog):
    from torch._inductor.template_heuristics import registry

    torch_fl.compile.register()
    cuda_keys = [key for key in registry._TEMPLATE_HEURISTIC_REGISTRY if key[1] == "cuda"]
    assert cuda_keys
    for key in cuda_keys:
        flagos_key = (key[0], "flagos", *key[2:])
        assert registry._TEMPLATE_HEURISTIC_REGISTRY.get(flagos_key) is registry._TEMPLATE_HEURISTIC_REGISTRY[key]
    # The lookups inductor's mm lowering makes find them without the error-level fallback.
    with caplog.at_level("ERROR", logger=registry.__name__):
        for template, _, *op in cuda_keys:
            registry.get_template_heuristic(template, "flagos", op[0] if op else "mm")
    assert not [r for r in caplog.records if "No template heuristic found" in r.getMessage()]


def test_compiled_code_reads_the_current_stream(compiled_on_workers, flagos_device, kernel_sources):
    def f(x):
        return x * 3 + 1

    x = torch.randn(64, device=flagos_device)
    torch.compile(f)(x)
    wrapper = next(src for src in kernel_sources() if CALL.search(src))
    assert "from torch_fl._C import _current_raw_stream as get_raw_stream" in wrapper
    assert "get_raw_stream(0)" in CALL.split(wrapper)[-1], "the stream must be read at each call"
    from torch_fl.compile.device_interface import get_raw_stream

    s = torch.flagos.Stream()
    with torch.flagos.stream(s):
        assert get_raw_stream(0) == s.flagos_stream
        out = torch.compile(f)(x)
    assert get_raw_stream(0) == torch.flagos.default_stream().flagos_stream != s.flagos_stream
    # The kernel ran on s: reading its output on the default stream needs a wait, as on cuda.
    torch.flagos.current_stream().wait_stream(s)
    torch.testing.assert_close(out.cpu(), f(x.cpu()))


def test_compiled_code_allocates_without_generic_empty_strided(compiled_on_workers, flagos_device, kernel_sources):
    # inductor's generic allocation (Python argument parsing and a dispatch per
    # buffer) is rewritten to torch_fl's direct one, as cuda gets its own.
    model = _mlp().to(flagos_device)
    x = torch.randn(8, 32, device=flagos_device)
    with torch.no_grad():
        out = torch.compile(model)(x)
        torch.testing.assert_close(out, model(x))
    wrapper = next(src for src in kernel_sources() if CALL.search(src))
    body = CALL.split(wrapper)[-1].split("def get_args")[0]
    assert "empty_strided_flagos((8, 64), (64, 1), torch.float32)" in body
    assert "empty_strided(" not in body


def test_compiled_matmuls_call_flagos_directly_and_show_in_the_profiler(
    compiled_on_workers, flagos_device, kernel_sources
):
    # inductor writes extern_kernels.mm/addmm/bmm(..., out=buf): torch.mm's argument parsing and
    # the dispatcher's layers above the device's kernel. On flagos the wrapper calls torch_fl's
    # entry points, which still take the full dispatch when a profiler is on.
    def f(bias, x, w, q, k):
        return torch.addmm(bias, x, w), torch.relu(x @ w), torch.bmm(q, k)

    args = [torch.randn(64), torch.randn(8, 32), torch.randn(32, 64), torch.randn(2, 8, 16), torch.randn(2, 16, 4)]
    compiled = torch.compile(f)
    got = compiled(*[a.to(flagos_device) for a in args])
    for g, expected in zip(got, f(*args), strict=True):
        torch.testing.assert_close(g.cpu(), expected)
    # f's wrapper (the only one with a bmm: a first compile of the worker pool's proof may be here too)
    wrapper = next(src for src in kernel_sources() if CALL.search(src) and "bmm" in src)
    body = CALL.split(wrapper)[-1].split("def get_args")[0]
    assert "extern_kernels." not in body
    for op in ("addmm", "mm", "bmm"):
        assert f"from torch_fl._C import _compiled_{op} as {op}_flagos" in wrapper
        assert re.search(rf"\b{op}_flagos\(", body), op
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        compiled(*[a.to(flagos_device) for a in args])
    assert {"aten::addmm", "aten::mm", "aten::bmm"} <= {event.name for event in profile.events()}


def test_compiled_code_runs_a_kernel_registered_over_flagos_matmul(fresh_inductor_cache, flagos_device, kernel_sources):
    # compiled code calls flagos's matmul kernel directly only while it is the dispatcher's; a
    # wrapper generated (or taken from the cache) after another kernel was registered calls torch.mm.
    def f(x, w):
        return torch.relu(x @ w)

    x, w = torch.randn(8, 32, device=flagos_device), torch.randn(32, 64, device=flagos_device)
    with kernel_over_flagos("mm.out", lambda self, mat2, out: out.fill_(7.0)):
        torch._dynamo.reset()
        assert torch.equal(torch.compile(f)(x, w).cpu(), torch.full((8, 64), 7.0))
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f)(x, w).cpu(), f(x.cpu(), w.cpu()))
    bodies = [CALL.split(src)[-1].split("def get_args")[0] for src in kernel_sources() if CALL.search(src)]
    through_torch = [body for body in bodies if "extern_kernels.mm(" in body]
    direct = [body for body in bodies if re.search(r"\bmm_flagos\(", body)]
    assert len(through_torch) == len(direct) == 1, "one wrapper of each kind"


def _launchers_of_loaded_kernels():
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    kernels = [k for m in PyCodeCache.modules for k in vars(m).values() if isinstance(k, CachingAutotuner)]
    return [launcher for kernel in kernels for launcher in kernel.launchers]


def test_kernels_launch_like_the_accelerators_own(compiled_on_workers, flagos_device):
    # On the cuda accelerator flagos kernels are cubins: inductor's static
    # launcher (C, no per-launch Python argument handling) must take them as it
    # takes cuda's. Host kernels are shared objects: Triton's launcher runs them.
    def f(x):
        return torch.sin(x) * 2 + 1

    x = torch.randn(4096, device=flagos_device)
    s = torch.flagos.Stream()
    with torch.flagos.stream(s):
        out = torch.compile(f)(x)
    s.synchronize()
    torch.testing.assert_close(out.cpu(), f(x.cpu()))
    launchers = _launchers_of_loaded_kernels()
    assert launchers, "no compiled Triton kernel was loaded"
    static = [getattr(launcher, "_is_static", False) for launcher in launchers]
    assert static == [accelerator == "cuda"] * len(launchers)


def test_direct_allocation_is_an_ordinary_flagos_tensor(flagos_device):
    t = torch_fl._C._empty_strided((4, 3), (1, 4), torch.bfloat16)
    assert (t.device, t.dtype, t.shape, t.stride()) == (torch.device(flagos_device), torch.bfloat16, (4, 3), (1, 4))
    t.fill_(2)
    assert t.cpu().eq(2).all()
    with pytest.raises(RuntimeError, match="2 sizes and 1 strides"):
        torch_fl._C._empty_strided((4, 3), (1,), torch.float32)
    with pytest.raises(RuntimeError, match=r"expects a torch.dtype"):
        torch_fl._C._empty_strided((4,), (1,), "float32")
    with pytest.raises(RuntimeError, match=r"expects a tuple of ints for size and for stride"):
        torch_fl._C._empty_strided((4, "3"), (3, 1), torch.float32)
    with pytest.raises(RuntimeError, match=r"expects \(size, stride, dtype\), got 2 arguments"):
        torch_fl._C._empty_strided((4,), (1,))


def test_cached_graphs_are_reused_only_under_the_same_compile_identity(
    fresh_inductor_cache, flagos_device, monkeypatch
):
    from torch._inductor.codegen import common

    from torch_fl.compile import _inductor_adapter
    from torch_fl.compile.cache_identity import compile_identity

    registered = common.custom_backend_passes["flagos"]
    assert registered.uuid() == compile_identity()

    def compile_and_run():
        torch._dynamo.reset()
        torch.compile(lambda x: torch.sin(x) + 1)(torch.randn(8, device=flagos_device))
        return counters["inductor"]["fxgraph_cache_hit"]

    assert compile_and_run() == 0
    assert compile_and_run() == 1  # the same identity: from the cache
    monkeypatch.setitem(common.custom_backend_passes, "flagos", _inductor_adapter.identity_pass("another torch_fl"))
    assert compile_and_run() == 1  # compiled again, not taken from the cache


def test_the_compile_identity_names_the_accelerator(monkeypatch):
    from torch_fl.compile.cache_identity import compile_identity

    here = compile_identity()
    assert compile_identity() == here
    other = "host" if torch.flagos.accelerator_name() != "host" else "cuda"
    monkeypatch.setattr(torch.flagos, "accelerator_name", lambda: other)
    assert compile_identity() != here
