"""Hypothesis strategies that draw small nn.Module graphs for compiled-vs-eager tests.

Importable by vendors' own tests::

    from hypothesis import given
    from pytest_flagos.strategies import graph_cases

    @given(case=graph_cases())
    def test_graph_compiles(case, flagos_device, assert_compiles_like_eager):
        assert_compiles_like_eager(case.build(), *case.inputs(), **case.oracle_kwargs())

A graph is a sequence of layers on a rank-2 ``[B, F]`` or rank-3 ``[B, S, F]`` input:
activations, elementwise chains, Linears, reductions, normalizations (LayerNorm, RMSNorm,
GroupNorm, BatchNorm in eval), views/permutes, concatenations and residual blocks. Every
choice lists its simplest option first, so hypothesis shrinks a failure to a short graph
of simple layers on a small float32 input. A drawn case prints as a one-line description
and carries Python source that rebuilds it (``case.source``); the module built from a case
is exec'd from that very source, so what you read is what ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterable, Iterator, Sequence

from hypothesis import strategies as st

FEATURES = (4, 8, 16)
MAX_FEATURES = 32
KINDS = ("activation", "elementwise", "linear", "reduction", "norm", "view", "cat", "residual")
ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu", "silu", "leaky_relu")
ELEMENTWISE = {
    "add": "x = x + 0.5",
    "mul": "x = x * 1.5",
    "abs": "x = x.abs() - 0.5",
    "sin": "x = torch.sin(x)",
    "exp": "x = torch.exp(-x.abs())",
    "sqrt": "x = torch.sqrt(x.abs() + 1.0)",
    "clamp": "x = x.clamp(-1.0, 1.0)",
    "where": "x = torch.where(x > 0, x, x * 0.1)",
    "rsqrt": "x = x * torch.rsqrt(x * x + 1.0)",
}
REDUCTIONS = {
    "sum": "x = x / (1.0 + x.sum(dim={dim}, keepdim=True).abs())",
    "mean": "x = x - x.mean(dim={dim}, keepdim=True)",
    "amax": "x = x - x.amax(dim={dim}, keepdim=True)",
    "softmax": "x = torch.softmax(x, dim={dim})",
    "log_softmax": "x = torch.log_softmax(x, dim={dim})",
    "var": "x = x * torch.rsqrt(x.var(dim={dim}, keepdim=True, unbiased=False) + 1.0)",
}
NORMS = ("layernorm", "rmsnorm", "groupnorm", "batchnorm")
DTYPE_ORDER = ("float32", "bfloat16", "float16", "float64")  # simplest first


# ---- layers ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Activation:
    name: str

    def out_features(self, f: int) -> int:
        return f

    def init_lines(self, attr: str, f: int) -> list[str]:
        return []

    def forward_lines(self, attr: str, rank: int) -> list[str]:
        call = {"tanh": "torch.tanh(x)", "sigmoid": "torch.sigmoid(x)", "leaky_relu": "F.leaky_relu(x, 0.1)"}.get(
            self.name, f"F.{self.name}(x)"
        )
        return [f"x = {call}"]

    def describe(self, f: int) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class Elementwise:
    steps: tuple[str, ...]

    def out_features(self, f: int) -> int:
        return f

    def init_lines(self, attr: str, f: int) -> list[str]:
        return []

    def forward_lines(self, attr: str, rank: int) -> list[str]:
        return [ELEMENTWISE[step] for step in self.steps]

    def describe(self, f: int) -> str:
        return "elementwise(" + ", ".join(self.steps) + ")"


@dataclasses.dataclass(frozen=True)
class Linear:
    out: int
    bias: bool = True

    def out_features(self, f: int) -> int:
        return self.out

    def init_lines(self, attr: str, f: int) -> list[str]:
        return [f"self.{attr} = nn.Linear({f}, {self.out}, bias={self.bias})"]

    def forward_lines(self, attr: str, rank: int) -> list[str]:
        return [f"x = self.{attr}(x)"]

    def describe(self, f: int) -> str:
        return f"Linear({f}->{self.out}{'' if self.bias else ', no bias'})"


@dataclasses.dataclass(frozen=True)
class Reduction:
    name: str
    dim: int = -1

    def out_features(self, f: int) -> int:
        return f

    def init_lines(self, attr: str, f: int) -> list[str]:
        return []

    def forward_lines(self, attr: str, rank: int) -> list[str]:
        return [REDUCTIONS[self.name].format(dim=self.dim)]

    def describe(self, f: int) -> str:
        return f"{self.name}(dim={self.dim})"


@dataclasses.dataclass(frozen=True)
class Norm:
    name: str
    groups: int = 1

    def out_features(self, f: int) -> int:
        return f

    def init_lines(self, attr: str, f: int) -> list[str]:
        ctor = {
            "layernorm": f"nn.LayerNorm({f})",
            "rmsnorm": f"nn.RMSNorm({f})",
            "groupnorm": f"nn.GroupNorm({self.groups}, {f})",
            "batchnorm": f"nn.BatchNorm1d({f})",
        }[self.name]
        lines = [f"self.{attr} = {ctor}", "with torch.no_grad():", f"    self.{attr}.weight.uniform_(0.5, 1.5)"]
        if self.name != "rmsnorm":
            lines.append(f"    self.{attr}.bias.uniform_(-0.5, 0.5)")
        if self.name == "batchnorm":
            lines += [
                f"    self.{attr}.running_mean.uniform_(-0.5, 0.5)",
                f"    self.{attr}.running_var.uniform_(0.5, 1.5)",
            ]
        return lines

    def forward_lines(self, attr: str, rank: int) -> list[str]:
        if self.name in ("groupnorm", "batchnorm") and rank == 3:
            return [f"x = self.{attr}(x.transpose(1, 2)).transpose(1, 2)"]  # channels at dim 1
        return [f"x = self.{attr}(x)"]

    def describe(self, f: int) -> str:
        label = {
            "layernorm": "LayerNorm",
            "rmsnorm": "RMSNorm",
            "groupnorm": "GroupNorm",
            "batchnorm": "BatchNorm1d(eval)",
        }[self.name]
        return f"{label}({f}{', groups=' + str(self.groups) if self.name == 'groupnorm' else ''})"


VIEWS = {
    "transpose_contiguous": "x = x.transpose(0, 1).contiguous().transpose(0, 1)",
    "flatten_batch": "x = (x.reshape(-1, {f}) * 2.0).reshape(x.shape)",
    "swap_halves": "x = x.unflatten(-1, (2, {half})).transpose(-1, -2).flatten(-2)",
    "permute": "x = x.permute(1, 0, 2)",  # rank 3 only
}


@dataclasses.dataclass(frozen=True)
class View:
    name: str
    f: int

    def out_features(self, f: int) -> int:
        return f

    def init_lines(self, attr: str, f: int) -> list[str]:
        return []

    def forward_lines(self, attr: str, rank: int) -> list[str]:
        return [VIEWS[self.name].format(f=self.f, half=self.f // 2)]

    def describe(self, f: int) -> str:
        return self.name


CATS = {
    "roll": ["x = torch.cat([x[..., 1:], x[..., :1]], dim=-1)"],
    "chunk_mix": ["a, b = x.chunk(2, dim=-1)", "x = torch.cat([a * b, a - b], dim=-1)"],
    "with_tanh": ["x = torch.cat([x, torch.tanh(x)], dim=-1)"],  # doubles the features
}


@dataclasses.dataclass(frozen=True)
class Cat:
    name: str

    def out_features(self, f: int) -> int:
        return 2 * f if self.name == "with_tanh" else f

    def init_lines(self, attr: str, f: int) -> list[str]:
        return []

    def forward_lines(self, attr: str, rank: int) -> list[str]:
        return list(CATS[self.name])

    def describe(self, f: int) -> str:
        return f"cat:{self.name}"


@dataclasses.dataclass(frozen=True)
class Residual:
    body: tuple[Any, ...]  # layers whose output has the block's input features

    def out_features(self, f: int) -> int:
        return f

    def _walk(self, attr: str, f: int) -> Iterable[tuple[Any, str, int]]:
        for i, layer in enumerate(self.body):
            yield layer, f"{attr}_{i}", f
            f = layer.out_features(f)

    def init_lines(self, attr: str, f: int) -> list[str]:
        return [line for layer, a, g in self._walk(attr, f) for line in layer.init_lines(a, g)]

    def forward_lines(self, attr: str, rank: int) -> list[str]:
        lines = [f"{attr} = x"]
        # features are not needed for forward lines of body layers
        for i, layer in enumerate(self.body):
            lines += layer.forward_lines(f"{attr}_{i}", rank)
        return [*lines, f"x = x + {attr}"]

    def describe(self, f: int) -> str:
        inner = " -> ".join(layer.describe(g) for layer, _, g in self._walk("r", f))
        return f"residual[{inner}]"


# ---- graphs and cases -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GraphSpec:
    rank: int  # 2: [B, F]; 3: [B, S, F]
    in_features: int
    layers: tuple[Any, ...]

    def _walk(self) -> Iterable[tuple[Any, str, int]]:
        f = self.in_features
        for i, layer in enumerate(self.layers):
            yield layer, f"m{i}", f
            f = layer.out_features(f)

    @property
    def out_features(self) -> int:
        f = self.in_features
        for layer in self.layers:
            f = layer.out_features(f)
        return f

    @property
    def description(self) -> str:
        return " -> ".join(layer.describe(f) for layer, _, f in self._walk())

    @property
    def source(self) -> str:
        init = [line for layer, attr, f in self._walk() for line in layer.init_lines(attr, f)]
        forward = [line for layer, attr, _ in self._walk() for line in layer.forward_lines(attr, self.rank)]
        body = "\n".join(
            [
                "import torch",
                "import torch.nn as nn",
                "import torch.nn.functional as F",
                "",
                "",
                "class Graph(nn.Module):",
                f'    """{self.description}"""',
                "",
                "    def __init__(self):",
                "        super().__init__()",
            ]
            + [f"        {line}" for line in init]
            + ["", "    def forward(self, x):"]
            + [f"        {line}" for line in forward]
            + ["        return x", ""]
        )
        return body

    def build(self, seed: int = 0, dtype: Any = None) -> Any:
        """The module, exec'd from `source`, weights drawn from torch's RNG under `seed`."""
        import torch

        namespace: dict[str, Any] = {"__name__": "pytest_flagos_graph"}
        exec(compile(self.source, "<pytest_flagos graph>", "exec"), namespace)
        with _rng_seeded(seed):
            module = namespace["Graph"]()
        module = module.to(dtype or torch.float32).eval()
        module._flagos_source = self.source
        module._flagos_description = self.description
        return module


@contextlib.contextmanager
def _rng_seeded(seed: int) -> Iterator[None]:
    """The CPU generator (which module initialisation draws from) seeded, then restored."""
    import torch

    state = torch.get_rng_state()
    torch.random.default_generator.manual_seed(seed)
    try:
        yield
    finally:
        torch.set_rng_state(state)


@dataclasses.dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dynamic_dims: tuple[int, ...] = ()  # torch._dynamo.mark_dynamic'd before compiling
    replay_shapes: tuple[tuple[int, ...], ...] = ()  # more shapes through the same compile

    def describe(self) -> str:
        dims = [f"{n}*" if i in self.dynamic_dims else str(n) for i, n in enumerate(self.shape)]
        text = "[" + ", ".join(dims) + "]"
        if self.replay_shapes:
            text += " replayed as " + ", ".join(str(list(s)) for s in self.replay_shapes)
        return text


@dataclasses.dataclass(frozen=True)
class GraphCase:
    graph: GraphSpec
    input: InputSpec
    dtype: str = "float32"
    seed: int = 0

    @property
    def description(self) -> str:
        return f"{self.dtype}{self.input.describe()}: {self.graph.description}"

    def __repr__(self) -> str:
        return f"GraphCase<{self.description}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # what hypothesis shows for a falsifying example

    @property
    def torch_dtype(self) -> Any:
        import torch

        return getattr(torch, self.dtype)

    @property
    def source(self) -> str:
        """A script that rebuilds the module and its inputs."""
        return "\n".join(
            [
                self.graph.source,
                f"DTYPE = torch.{self.dtype}",
                f"INPUT_SHAPE = {self.input.shape!r}",
                f"DYNAMIC_DIMS = {self.input.dynamic_dims!r}  # torch._dynamo.mark_dynamic",
                f"REPLAY_SHAPES = {self.input.replay_shapes!r}",
                "",
                "",
                "def build_module(seed=" + str(self.seed) + "):",
                "    torch.manual_seed(seed)",
                "    return Graph().to(DTYPE).eval()",
                "",
                "",
                "def make_input(shape, seed=" + str(self.seed) + "):",
                "    generator = torch.Generator().manual_seed(seed)",
                "    return torch.randn(shape, generator=generator).to(DTYPE)",
                "",
            ]
        )

    def build(self) -> Any:
        return self.graph.build(self.seed, self.torch_dtype)

    def _make(self, shape: Sequence[int], seed: int, device: Any) -> Any:
        import torch

        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(tuple(shape), generator=generator).to(self.torch_dtype)
        return x.to(device) if device is not None else x

    def inputs(self, device: Any = None) -> tuple[Any, ...]:
        return (self._make(self.input.shape, self.seed, device),)

    def replays(self, device: Any = None) -> list[tuple[Any, ...]]:
        return [(self._make(shape, self.seed + 1 + i, device),) for i, shape in enumerate(self.input.replay_shapes)]

    def oracle_kwargs(self, device: Any = None) -> dict[str, Any]:
        """mark_dynamic and replay arguments for assert_compiles_like_eager."""
        return {"mark_dynamic": [(0, d) for d in self.input.dynamic_dims], "replay": self.replays(device)}


# ---- strategies -------------------------------------------------------------------------------


def activations() -> st.SearchStrategy[Activation]:
    return st.sampled_from(ACTIVATIONS).map(Activation)


def elementwise_chains(max_steps: int = 3) -> st.SearchStrategy[Elementwise]:
    return st.lists(st.sampled_from(tuple(ELEMENTWISE)), min_size=1, max_size=max_steps).map(
        lambda steps: Elementwise(tuple(steps))
    )


def linears(f: int, features: Sequence[int] = FEATURES) -> st.SearchStrategy[Linear]:
    outs = tuple(dict.fromkeys([f, *features]))  # keep the width first: the simplest choice
    return st.builds(Linear, st.sampled_from(outs), st.sampled_from((True, False)))


def reductions() -> st.SearchStrategy[Reduction]:
    return st.builds(Reduction, st.sampled_from(tuple(REDUCTIONS)), st.sampled_from((-1, 0)))


def normalizations(f: int) -> st.SearchStrategy[Norm]:
    groups = tuple(g for g in (1, 2, 4) if f % g == 0 and f // g >= 2)  # >1 value a group
    return st.one_of(
        st.just(Norm("layernorm")),
        st.just(Norm("rmsnorm")),
        st.sampled_from(groups).map(lambda g: Norm("groupnorm", g)),
        st.just(Norm("batchnorm")),
    )


def view_ops(f: int, rank: int, keep_shape: bool = False) -> st.SearchStrategy[View]:
    """keep_shape: only views that keep the batch dims in place (inside residual blocks)."""
    names = ["transpose_contiguous", "flatten_batch"]
    if f % 2 == 0:
        names.append("swap_halves")
    if rank == 3 and not keep_shape:
        names.append("permute")
    return st.sampled_from(names).map(lambda name: View(name, f))


def concats(f: int) -> st.SearchStrategy[Cat]:
    names = ["roll"]
    if f % 2 == 0:
        names.append("chunk_mix")
    if 2 * f <= MAX_FEATURES:
        names.append("with_tanh")
    return st.sampled_from(names).map(Cat)


@st.composite
def residual_blocks(draw: Any, f: int, rank: int, max_layers: int = 2, kinds: Sequence[str] = KINDS) -> Residual:
    # no nested residuals; a residual-only graph still needs something inside its blocks
    inner = tuple(k for k in kinds if k != "residual") or tuple(k for k in KINDS if k != "residual")
    body: list[Any] = []
    g = f
    for _ in range(draw(st.integers(1, max_layers))):
        layer = draw(layers(g, rank, inner, keep_shape=True))
        body.append(layer)
        g = layer.out_features(g)
    if g != f:
        body.append(Linear(f))  # back to the block's width so the residual add fits
    return Residual(tuple(body))


def layers(f: int, rank: int, kinds: Sequence[str] = KINDS, keep_shape: bool = False) -> st.SearchStrategy[Any]:
    """One layer of the given kinds for an input of `f` features, simplest kind first.
    keep_shape: no layer that moves batch dims (for residual blocks)."""
    makers = {
        "activation": lambda: activations(),
        "elementwise": lambda: elementwise_chains(),
        "linear": lambda: linears(f),
        "reduction": lambda: reductions(),
        "norm": lambda: normalizations(f),
        "view": lambda: view_ops(f, rank, keep_shape),
        "cat": lambda: concats(f),
        "residual": lambda: residual_blocks(f, rank, kinds=kinds),
    }
    unknown = set(kinds) - set(makers)
    if unknown:
        raise ValueError(f"unknown layer kinds {sorted(unknown)}; known: {KINDS}")
    return st.one_of([makers[k]() for k in KINDS if k in kinds])


@st.composite
def graphs(
    draw: Any,
    max_layers: int = 4,
    ranks: Sequence[int] = (2, 3),
    in_features: Sequence[int] = FEATURES,
    kinds: Sequence[str] = KINDS,
) -> GraphSpec:
    rank = draw(st.sampled_from(tuple(ranks)))
    f0 = draw(st.sampled_from(tuple(in_features)))
    drawn: list[Any] = []
    f = f0
    for _ in range(draw(st.integers(1, max_layers))):
        layer = draw(layers(f, rank, kinds))
        drawn.append(layer)
        f = layer.out_features(f)
    return GraphSpec(rank, f0, tuple(drawn))


@st.composite
def input_specs(
    draw: Any, rank: int, in_features: int, dynamic: bool = True, max_size: int = 6, max_replays: int = 2
) -> InputSpec:
    """Batch dims of size 1..max_size; dims marked dynamic are >= 2 (dynamo specializes 0
    and 1) and are replayed with other sizes >= 2 through the same compiled graph."""
    batch_dims = rank - 1
    dynamic_dims: tuple[int, ...] = ()
    if dynamic:
        dynamic_dims = tuple(d for d in range(batch_dims) if draw(st.booleans()))
    sizes = [draw(st.integers(2 if d in dynamic_dims else 1, max_size)) for d in range(batch_dims)]
    shape = (*sizes, in_features)
    replays: list[tuple[int, ...]] = []
    if dynamic_dims:
        for _ in range(draw(st.integers(0, max_replays))):
            replay = list(shape)
            for d in dynamic_dims:
                replay[d] = draw(st.integers(2, max_size))
            replays.append(tuple(replay))
    return InputSpec(shape, dynamic_dims, tuple(replays))


def float_dtypes(capabilities: Any = None) -> st.SearchStrategy[str]:
    """Floating dtypes the device supports (its capability manifest), float32 first.

    capabilities: the manifest (the flagos_capabilities fixture); None takes the run in
    progress's (session.current()'s fallback), or every dtype outside a flagos run."""
    if capabilities is None:
        from . import session

        current = session.current()
        capabilities = current.capabilities() if current is not None else None
    supported = DTYPE_ORDER if capabilities is None else tuple(d for d in DTYPE_ORDER if d in capabilities.dtypes)
    if not supported:
        raise ValueError("the device supports none of " + ", ".join(DTYPE_ORDER))
    return st.sampled_from(supported)


@st.composite
def graph_cases(
    draw: Any,
    capabilities: Any = None,
    dtypes: Sequence[str] | None = None,
    max_layers: int = 4,
    ranks: Sequence[int] = (2, 3),
    kinds: Sequence[str] = KINDS,
    dynamic: bool = True,
) -> GraphCase:
    """A graph, its input shape (with dynamic dims and replays), a dtype the device supports."""
    graph = draw(graphs(max_layers=max_layers, ranks=ranks, kinds=kinds))
    spec = draw(input_specs(graph.rank, graph.in_features, dynamic=dynamic))
    dtype = draw(st.sampled_from(tuple(dtypes)) if dtypes else float_dtypes(capabilities))
    return GraphCase(graph, spec, dtype)
