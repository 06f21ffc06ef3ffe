"""Standalone repro scripts for failing compiled-vs-eager checks.

`repro_<file>__<test>_<hash>.py` (the test file's stem, the test's name cut short, and a
hash of the full node id, so two tests never share a script) holds the device, the device
module import, inductor/dynamo config that differed from the defaults, the config patches,
the seed, the function or module (source for strategy-drawn graphs; an import of the
defining file otherwise; for a lambda, a closure, a bound method or a class defined in a
test, the FX graphs dynamo traced from it, graph_capture.py), the compile arguments and --
verbatim -- the check of pytest_flagos/check.py. Tensors (inputs, weights, captured graphs)
go to the `.pt` file beside it. `python repro_....py` raises the same error as the test
while the bug is there and prints "repro passed" once it is fixed.

Every text from the test run (node id, failure message, paths, names, config values) enters
the script as a Python literal written by repr() or as `#` comment lines with every
non-printable character escaped: a test's text is data, never code.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import math
import re
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import check, session

if TYPE_CHECKING:
    import pytest

# what pytest_flagos/isolation.py sets for a run on any device but flagos (flagos_autoload)
AUTOLOAD_ENV = "FLAGOS_AUTOLOAD"
NAME_PART_LIMIT = 40  # characters of the test file's stem and of the test's name in a file name
FAILURE_LINES = 20  # lines of the test's failure shown as comments at the top of the script
FAILURE_CHARS = 20_000  # of the failure kept in the script (an IR dump can be megabytes)


@dataclasses.dataclass
class ReproCase:
    fn: Any
    input_sets: list[tuple[Any, ...]]
    device: str
    reference_device: str
    check_kwargs: dict[str, Any]
    compile_kwargs: dict[str, Any]
    config_patches: dict[str, Any]
    base_config: list[str]
    failure: str


class NotReproducible(Exception):
    """The function cannot be rebuilt outside the test (a lambda, a closure, ...)."""


def safe_name(text: str, limit: int = 100) -> str:
    name = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")
    return name[:limit].rstrip("_") or "case"


def name_for_nodeid(nodeid: str) -> str:
    """`<file stem>__<test>_<hash>`: short for any id, distinct for distinct ids
    (`test_x[x-y]` and `test_x[x_y]` differ only in the hash)."""
    path, _, test = nodeid.partition("::")
    stem = safe_name(Path(path).stem, NAME_PART_LIMIT)
    digest = hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{stem}__{safe_name(test or path, NAME_PART_LIMIT)}_{digest}"


def default_name(config: pytest.Config | None = None) -> str:
    """The running test's name_for_nodeid (config: its run's pytest.Config; without it, the
    run in progress), or "case" outside a test."""
    current = session.current(config)
    nodeid = current.current_nodeid if current else None
    return name_for_nodeid(nodeid) if nodeid else "case"


def cut_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def comment(text: str, prefix: str = "# ") -> str:
    """`text` as comment lines: split at every line break Python or Unicode knows, each
    non-printable character escaped, so nothing of it can end the comment."""
    lines = str(text).splitlines() or [""]
    return "\n".join(
        (prefix + "".join(c if c.isprintable() else ascii(c)[1:-1] for c in line)).rstrip() for line in lines
    )


def literal(value: Any, what: str) -> str:
    """Python source that evaluates to `value` without running anything but the literal
    (torch dtypes and devices allowed); NotReproducible for anything else."""
    import torch

    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, torch.dtype):
        return str(value)  # torch.float32
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (tuple, list)):
        items = ", ".join(literal(v, what) for v in value)
        if isinstance(value, list):
            return f"[{items}]"
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k, what)}: {literal(v, what)}" for k, v in value.items()) + "}"
    raise NotReproducible(f"{what} holds a {type(value).__name__}, which a script cannot write as a value")


def _installed(module_name: str) -> bool:
    """True for modules a fresh interpreter imports by name (stdlib, site-packages)."""
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if module is None or file is None:
        return True
    roots = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    resolved = str(Path(file).resolve())
    return any(resolved.startswith(str(Path(root).resolve())) for root in roots)


class _Imports:
    """The user modules (by file) the script must load before it rebuilds the function."""

    def __init__(self) -> None:
        self.by_path: dict[str, str] = {}

    def need(self, module_name: str) -> None:
        if module_name in ("__main__",) or _installed(module_name):
            return
        file = getattr(sys.modules[module_name], "__file__", None)
        if file is None:
            raise NotReproducible(f"module {module_name} has no file")
        self.by_path[module_name] = str(Path(file).resolve())

    def source(self) -> str:
        lines = [f"_load({name!r}, {path!r})" for name, path in self.by_path.items()]
        return "\n".join(lines)


def _reference_expr(obj: Any, imports: _Imports, what: str) -> str:
    """An expression that evaluates to `obj` (a function or class) in the script."""
    if inspect.ismethod(obj):
        raise NotReproducible(f"{what} {obj.__qualname__} is a bound method")
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module_name or not qualname:
        raise NotReproducible(f"{what} {type(obj).__name__} has no module/qualname")
    if module_name == "__main__":
        raise NotReproducible(f"{what} {qualname} is defined in __main__")
    if "<lambda>" in qualname:
        raise NotReproducible(f"{what} is a lambda")
    if "<locals>" not in qualname:
        imports.need(module_name)
        return f"_attr(_load({module_name!r}, None), {qualname!r})"
    # a function defined inside the test: rebuild it from its source in its module's globals
    code = getattr(obj, "__code__", None)
    if code is None or code.co_freevars:
        raise NotReproducible(f"{what} {qualname} is a closure over {', '.join(code.co_freevars) if code else '?'}")
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError) as exc:
        raise NotReproducible(f"no source for {what} {qualname}: {exc}") from None
    imports.need(module_name)
    return f"_rebuild({module_name!r}, {source!r}, {obj.__name__!r})"


def _user_classes(module: Any) -> list[type]:
    return [type(m) for m in module.modules()]


def _fn_block(fn: Any, imports: _Imports, data: dict[str, Any]) -> str:
    """Source of `build_cases(data)`: the function by reference (or by its drawn source)."""
    import torch

    cases = (
        "\n\ndef build_cases(data):\n    return [(build_fn(data), data['input_sets'], CHECK_KWARGS['mark_dynamic'])]\n"
    )
    source = getattr(fn, "_flagos_source", None)
    if isinstance(fn, torch.nn.Module) and source:
        data["state_dict"] = {k: v.detach().cpu().clone() for k, v in fn.state_dict().items()}
        return (
            "# the drawn graph, as pytest_flagos.strategies wrote it\n"
            f"{source.rstrip()}\n\n\n"
            "def build_fn(data):\n"
            "    module = Graph()\n"
            "    module.load_state_dict(data['state_dict'], assign=True)\n"
            f"    return module.train({bool(fn.training)})\n" + cases
        )
    if isinstance(fn, torch.nn.Module):
        for cls in _user_classes(fn):
            if "<locals>" in cls.__qualname__:
                raise NotReproducible(f"the module class {cls.__qualname__} is defined inside a function")
            imports.need(cls.__module__)
        import copy

        data["module"] = copy.deepcopy(fn).cpu()
        shown = ""
        try:
            shown = comment(inspect.getsource(type(fn)))
        except (OSError, TypeError):
            pass
        return (
            comment(f"{type(fn).__qualname__} from {type(fn).__module__} (pickled in the .pt file):") + f"\n{shown}\n"
            "def build_fn(data):\n"
            "    return data['module']\n" + cases
        )
    expr = _reference_expr(fn, imports, "the function")
    return f"def build_fn(data):\n    return {expr}\n" + cases


def _graphs_block(graphs: list[Any], data: dict[str, Any]) -> str:
    """Source of `build_cases(data)` for the graphs dynamo traced (graph_capture.py)."""
    data["graphs"] = [{"module": g.module, "calls": g.calls, "mark_dynamic": g.mark_dynamic} for g in graphs]
    shown = []
    for n, graph in enumerate(graphs):
        shown.append(f"# graph {n} ({len(graph.calls)} call(s), dynamic dims {graph.mark_dynamic or 'none'}):")
        shown.append(comment(textwrap.dedent(graph.code).strip(), "#     "))
    return (
        "# The function could not be imported by name, so the script holds what dynamo traced from\n"
        "# it: each graph (a torch.fx.GraphModule, pickled in the .pt file) with the arguments\n"
        "# it was called with, parameters included. It reproduces bugs of the compiler below\n"
        "# dynamo; the code of each graph:\n" + "\n".join(shown) + "\n\n\ndef build_cases(data):\n"
        "    return [(g['module'], g['calls'], g['mark_dynamic']) for g in data['graphs']]\n"
    )


def _tensor_data(input_sets: list[tuple[Any, ...]]) -> list[list[Any]]:
    return [[check.clone_input(x, device="cpu") for x in inputs] for inputs in input_sets]


def _dotted(node: ast.AST) -> str | None:
    """`torch.a.b` for a chain of attributes rooted at the name torch, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "torch":
        return ".".join(["torch", *reversed(parts)])
    return None


def _plain_setting(line: str) -> bool:
    """`torch.<config>.<name> = <literal or torch.attribute>`, and nothing else."""
    try:
        tree = ast.parse(line, mode="exec")
    except SyntaxError:
        return False
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign):
        return False
    assign = tree.body[0]
    if len(assign.targets) != 1 or _dotted(assign.targets[0]) is None:
        return False
    if _dotted(assign.value) is not None:
        return True
    try:
        ast.literal_eval(assign.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _config_lines(case: ReproCase) -> str:
    lines = []
    for line in case.base_config:
        if _plain_setting(line):
            lines.append(line)
        else:
            lines.append(comment(line, "# (not a plain setting, left out) "))
    return "\n".join(lines) or "# (all defaults)"


_PRELUDE = '''\
def _load(name, path):
    """Import a module by name, or from its file as the test run did (test modules are
    importable only with pytest's rootdir on sys.path)."""
    if name in sys.modules:
        return sys.modules[name]
    path = _FILES.get(name, path)
    if path is None:
        return importlib.import_module(name)
    if "." in name:  # a module of a package: by name if this interpreter finds the package
        try:
            return importlib.import_module(name)
        except ImportError:
            pass
    sys.path.insert(0, os.path.dirname(path))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _attr(obj, qualname):
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _rebuild(module_name, source, name):
    namespace = dict(vars(_load(module_name, None)))
    exec(compile(source, "<" + name + ">", "exec"), namespace)
    return namespace[name]
'''


def _device_setup(device: str, device_module: str | None) -> tuple[str, str]:
    """What the script does before and right after `import torch`, as the plugin does for
    the run (isolation.py): torch_fl stays out unless the device is flagos."""
    device_type = device.partition(":")[0]
    if device_type == "flagos":
        # `import torch` only arms flagos (flagos_autoload): load it now, by name
        before = ""
        after = "import torch_fl  # noqa: F401  (the flagos device)\n"
    else:
        before = (
            "# not flagos: keep torch_fl (and its PrivateUse1 registration) out, as the test run did\n"
            f"os.environ[{AUTOLOAD_ENV!r}] = '0'\n"
        )
        after = ""
    if device_module:
        after += f"importlib.import_module({device_module!r})  # the vendor's device module\n"
    return before, after


def render(
    case: ReproCase,
    name: str,
    nodeid: str | None,
    data: dict[str, Any],
    graphs: list[Any] | None = None,
    device_module: str | None = None,
) -> str:
    import torch

    imports = _Imports()
    fn_block = _graphs_block(graphs, data) if graphs is not None else _fn_block(case.fn, imports, data)
    compile_kwargs = dict(case.compile_kwargs)
    backend_expr = None
    if not isinstance(compile_kwargs.get("backend"), str):
        backend_expr = _reference_expr(compile_kwargs.pop("backend"), imports, "the backend")
    if graphs is None:
        data["input_sets"] = _tensor_data(case.input_sets)
    before_torch, after_torch = _device_setup(case.device, device_module)
    check_source = Path(check.__file__).read_text()
    failure = [cut_text(line, 300) for line in case.failure.strip().splitlines()] or ["?"]
    shown_failure = failure[:FAILURE_LINES] + (
        [f"... ({len(failure) - FAILURE_LINES} more lines)"] if len(failure) > FAILURE_LINES else []
    )

    parts = [
        "#!/usr/bin/env python3",
        "# flagos repro, written by pytest_flagos",
        "#",
        comment(f"test: {nodeid or name}"),
        "# it failed with:",
        comment("\n".join(shown_failure), "#   "),
        "#",
        f"# Run `python {name}.py` (with {name}.pt beside it): it fails the same way while the",
        '# bug is there and prints "repro passed" once it is fixed.',
        '"""flagos repro script: see the comments above (TEST_ID, FAILURE_IN_TEST hold the texts)."""',
        "import atexit\nimport importlib\nimport importlib.util\nimport os\nimport shutil\nimport sys\nimport tempfile\n",
        "# A fresh compile cache, set before torch starts any worker, removed at exit: a kernel\n"
        "# cached by an earlier run must not stand in for the one under test.\n"
        '_CACHE = tempfile.mkdtemp(prefix="flagos-repro-")\n'
        "atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)  # after torch's own exit hooks\n"
        'os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE\n'
        'os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHE, "triton")\n',
        before_torch,
        "import torch\nimport torch._dynamo.config\nimport torch._inductor.config\n"
        "import torch.nn as nn\nimport torch.nn.functional as F\n",
        after_torch,
        f"HERE = os.path.dirname(os.path.abspath(__file__))\n"
        f"TEST_ID = {literal(nodeid or name, 'the test id')}\n"
        f"FAILURE_IN_TEST = {literal(cut_text(case.failure, FAILURE_CHARS), 'the failure')}\n"
        f"DEVICE = {literal(case.device, 'the device')}\n"
        f"REFERENCE_DEVICE = {literal(case.reference_device, 'the reference device')}\n"
        f"TORCH_VERSION_OF_TEST = {literal(torch.__version__, 'the torch version')}\n",
        "# inductor / dynamo options that differed from their defaults in the test",
        _config_lines(case),
        f"CONFIG_PATCHES = {literal(case.config_patches, 'config_patches')}  # torch._inductor.config.patch(...)",
        f"CHECK_KWARGS = {literal(case.check_kwargs, 'the check arguments')}",
        f"COMPILE_KWARGS = {literal(compile_kwargs, 'the compile arguments')}",
        f"_FILES = {literal(imports.by_path, 'the module files')}  # modules the test loaded from these files\n\n",
        _PRELUDE,
        "\n# ---- the check, verbatim from pytest_flagos/check.py " + "-" * 30,
        check_source,
        "# ---- the function under test " + "-" * 50,
        fn_block,
        "\ndef main():",
        "    for module_name in _FILES:  # before unpickling: classes of a pickled module",
        "        _load(module_name, None)",
        f"    data = torch.load(os.path.join(HERE, {literal(name + '.pt', 'the data file')}), weights_only=False)",
        "    compile_kwargs = dict(COMPILE_KWARGS)",
        f"    compile_kwargs['backend'] = {backend_expr}" if backend_expr else "",
        "    check_kwargs = dict(CHECK_KWARGS)",
        "    for fn, input_sets, mark_dynamic in build_cases(data):",
        "        check_kwargs['mark_dynamic'] = mark_dynamic",
        "        with torch._inductor.config.patch(CONFIG_PATCHES):",
        "            check_compiles_like_eager(fn, input_sets, device=DEVICE,",
        "                                      reference_device=REFERENCE_DEVICE,",
        "                                      compile_kwargs=compile_kwargs, **check_kwargs)",
        '    print("repro passed: compiled matches eager")',
        "\n\nif __name__ == '__main__':\n    main()\n",
    ]
    return "\n".join(p for p in parts if p != "")


def _pickled(data: dict[str, Any]) -> bytes:
    """The .pt file's bytes; NotReproducible when an object does not pickle (a class
    defined inside a function, an open file, ...)."""
    import io

    import torch

    buffer = io.BytesIO()
    try:
        torch.save(data, buffer)
    except Exception as exc:
        raise NotReproducible(f"its objects do not pickle ({type(exc).__name__}: {exc})") from None
    return buffer.getvalue()


def _render_by_reference(
    case: ReproCase, script_name: str, nodeid: str | None, device_module: str | None
) -> tuple[str, bytes]:
    data: dict[str, Any] = {}
    text = render(case, script_name, nodeid, data, device_module=device_module)
    return text, _pickled(data)


def _render_captured(
    case: ReproCase, script_name: str, nodeid: str | None, device_module: str | None, why: str
) -> tuple[str, bytes]:
    import torch

    from . import graph_capture

    try:
        graphs = graph_capture.capture(
            case.fn, case.input_sets, torch.device(case.device), case.check_kwargs.get("mark_dynamic", ())
        )
    except graph_capture.CaptureFailed as exc:
        raise NotReproducible(f"{why}, and {exc}") from None
    data: dict[str, Any] = {}
    text = render(case, script_name, nodeid, data, graphs=graphs, device_module=device_module)
    return text, _pickled(data)


def write(case: ReproCase, directory: Path, name: str, config: pytest.Config | None = None) -> Path:
    """Write repro_<name>.py and .pt into `directory`. config: the pytest.Config of the run
    (its running test and --flagos-device-module go into the script); without it, the run
    in progress."""
    directory.mkdir(parents=True, exist_ok=True)
    script_name = f"repro_{name}"
    current = session.current(config)
    nodeid = current.current_nodeid if current else None
    device_module = current.settings.device_module if current else None
    backend = case.compile_kwargs.get("backend")
    if not isinstance(backend, str):  # a backend must be importable: no graph stands in for it
        _reference_expr(backend, _Imports(), "the backend")
    try:
        text, data = _render_by_reference(case, script_name, nodeid, device_module)
    except NotReproducible as exc:
        # not importable by name: what dynamo traced from it stands in for it
        text, data = _render_captured(case, script_name, nodeid, device_module, str(exc))
    (directory / f"{script_name}.pt").write_bytes(data)
    path = directory / f"{script_name}.py"
    path.write_text(text, encoding="utf-8")
    return path


def write_for_failure(
    case: ReproCase, repro_dir: str | Path | None, name: str | None, config: pytest.Config | None = None
) -> tuple[Path | None, str | None]:
    """Write the repro if a directory is configured; (path, None) or (None, why not).
    config: the run's pytest.Config, as for write().

    Never raises: whatever goes wrong here is a note on the test's own failure."""
    current = session.current(config)
    directory = (
        Path(repro_dir)
        if repro_dir
        else (current.settings.repro_dir if current and current.settings.repro_dir else None)
    )
    if directory is None:
        return None, "pass --flagos-repro-dir=DIR to get a standalone script"
    try:
        return write(case, directory, safe_name(name) if name else default_name(config), config), None
    except NotReproducible as exc:
        return None, str(exc)
    except Exception as exc:  # a file system error, a bug here: the test's failure stays the error
        return None, f"{type(exc).__name__} writing to {directory}: {exc}"
