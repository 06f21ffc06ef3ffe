"""Standalone repro scripts for failing compiled-vs-eager checks.

`repro_<test>.py` holds the device, the device module import, inductor/dynamo config that
differed from the defaults, the config patches, the seed, the function or module (source
for strategy-drawn graphs; an import of the defining file otherwise), the compile
arguments and -- verbatim -- the check of pytest_flagos/check.py. Tensors (inputs,
weights) go to `repro_<test>.pt` beside it. `python repro_<test>.py` raises the same error
as the test while the bug is there and prints "repro passed" once it is fixed.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

from . import check, session


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


def safe_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")
    return name[:120] or "case"


def default_name() -> str:
    current = session.current()
    nodeid = current.current_nodeid if current else None
    if not nodeid:
        return "case"
    return safe_name(nodeid.split("::", 1)[-1])


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
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module_name or not qualname:
        raise NotReproducible(f"{what} {obj!r} has no module/qualname")
    if module_name == "__main__":
        raise NotReproducible(f"{what} {qualname} is defined in __main__")
    if "<lambda>" in qualname:
        raise NotReproducible(f"{what} is a lambda; define it with def at module level")
    if "<locals>" not in qualname:
        imports.need(module_name)
        return f"_attr(_load({module_name!r}, None), {qualname!r})"
    # a function defined inside the test: rebuild it from its source in its module's globals
    code = getattr(obj, "__code__", None)
    if code is None or code.co_freevars:
        raise NotReproducible(
            f"{what} {qualname} is a closure over {', '.join(code.co_freevars) if code else '?'}; "
            "define it at module level"
        )
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError) as exc:
        raise NotReproducible(f"no source for {what} {qualname}: {exc}") from None
    imports.need(module_name)
    return f"_rebuild({module_name!r}, {source!r}, {obj.__name__!r})"


def _user_classes(module: Any) -> list[type]:
    return [type(m) for m in module.modules()]


def _fn_block(fn: Any, imports: _Imports, data: dict[str, Any]) -> str:
    import torch

    source = getattr(fn, "_flagos_source", None)
    if isinstance(fn, torch.nn.Module) and source:
        data["state_dict"] = {k: v.detach().cpu().clone() for k, v in fn.state_dict().items()}
        return (
            "# the drawn graph, as pytest_flagos.strategies wrote it\n"
            f"{source.rstrip()}\n\n\n"
            "def build_fn(data):\n"
            "    module = Graph()\n"
            "    module.load_state_dict(data['state_dict'], assign=True)\n"
            f"    return module.train({fn.training})\n"
        )
    if isinstance(fn, torch.nn.Module):
        for cls in _user_classes(fn):
            imports.need(cls.__module__)
        import copy

        data["module"] = copy.deepcopy(fn).cpu()
        shown = ""
        try:
            shown = textwrap.indent(inspect.getsource(type(fn)), "# ")
        except (OSError, TypeError):
            pass
        return (
            f"# {type(fn).__qualname__} from {type(fn).__module__} (pickled in the .pt file):\n"
            f"{shown}\n"
            "def build_fn(data):\n"
            "    return data['module']\n"
        )
    expr = _reference_expr(fn, imports, "the function")
    return f"def build_fn(data):\n    return {expr}\n"


def _tensor_data(input_sets: list[tuple[Any, ...]]) -> list[list[Any]]:
    return [[check.clone_input(x, device="cpu") for x in inputs] for inputs in input_sets]


def _config_lines(case: ReproCase) -> str:
    lines = []
    for line in case.base_config:
        try:
            compile(line, "<config>", "exec")
            lines.append(line)
        except SyntaxError:
            lines.append(f"# (not valid Python, left out) {line}")
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


def render(case: ReproCase, name: str, nodeid: str | None, data: dict[str, Any]) -> str:
    import torch

    imports = _Imports()
    fn_block = _fn_block(case.fn, imports, data)
    compile_kwargs = dict(case.compile_kwargs)
    backend_expr = None
    if not isinstance(compile_kwargs.get("backend"), str):
        backend_expr = _reference_expr(compile_kwargs.pop("backend"), imports, "the backend")
    data["input_sets"] = _tensor_data(case.input_sets)
    current = session.current()
    device_module = current.settings.device_module if current else None
    check_source = Path(check.__file__).read_text()
    failure = case.failure.strip().splitlines()[0] if case.failure.strip() else "?"

    parts = [
        "#!/usr/bin/env python3",
        f'"""flagos repro for {nodeid or name}\n\n'
        f"The test failed with: {failure}\n\n"
        f"Run `python {name}.py` (with {name}.pt beside it): it fails the same way while the\n"
        'bug is there and prints "repro passed" once it is fixed.\n"""',
        "import importlib\nimport importlib.util\nimport os\nimport sys\nimport tempfile\n",
        "# A fresh compile cache, set before torch starts any worker: a kernel cached by an\n"
        "# earlier run must not stand in for the one under test.\n"
        'os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="flagos-repro-")\n'
        'os.environ["TRITON_CACHE_DIR"] = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "triton")\n',
        "import torch\nimport torch._dynamo.config\nimport torch._inductor.config\n"
        "import torch.nn as nn\nimport torch.nn.functional as F",
        f"import {device_module}  # the vendor's device module" if device_module else "",
        f"\nHERE = os.path.dirname(os.path.abspath(__file__))\n"
        f"DEVICE = {case.device!r}\nREFERENCE_DEVICE = {case.reference_device!r}\n"
        f"TORCH_VERSION_OF_TEST = {torch.__version__!r}\n",
        "# inductor / dynamo options that differed from their defaults in the test",
        _config_lines(case),
        f"CONFIG_PATCHES = {case.config_patches!r}  # torch._inductor.config.patch(...)",
        f"CHECK_KWARGS = {case.check_kwargs!r}",
        f"COMPILE_KWARGS = {compile_kwargs!r}",
        f"_FILES = {imports.by_path!r}  # modules the test loaded from these files\n\n",
        _PRELUDE,
        "\n# ---- the check, verbatim from pytest_flagos/check.py " + "-" * 30,
        check_source,
        "# ---- the function under test " + "-" * 50,
        fn_block,
        "\ndef main():",
        "    for module_name in _FILES:  # before unpickling: classes of a pickled module",
        "        _load(module_name, None)",
        f"    data = torch.load(os.path.join(HERE, {name + '.pt'!r}), weights_only=False)",
        "    fn = build_fn(data)",
        "    compile_kwargs = dict(COMPILE_KWARGS)",
        f"    compile_kwargs['backend'] = {backend_expr}" if backend_expr else "",
        "    with torch._inductor.config.patch(CONFIG_PATCHES):",
        "        check_compiles_like_eager(fn, data['input_sets'], device=DEVICE,",
        "                                  reference_device=REFERENCE_DEVICE,",
        "                                  compile_kwargs=compile_kwargs, **CHECK_KWARGS)",
        '    print("repro passed: compiled matches eager")',
        "\n\nif __name__ == '__main__':\n    main()\n",
    ]
    return "\n".join(p for p in parts if p != "")


def write(case: ReproCase, directory: Path, name: str) -> Path:
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    script_name = f"repro_{safe_name(name)}"
    current = session.current()
    data: dict[str, Any] = {}
    text = render(case, script_name, current.current_nodeid if current else None, data)
    torch.save(data, directory / f"{script_name}.pt")
    path = directory / f"{script_name}.py"
    path.write_text(text)
    return path


def write_for_failure(
    case: ReproCase, repro_dir: str | Path | None, name: str | None
) -> tuple[Path | None, str | None]:
    """Write the repro if a directory is configured; (path, None) or (None, why not)."""
    current = session.current()
    directory = (
        Path(repro_dir)
        if repro_dir
        else (current.settings.repro_dir if current and current.settings.repro_dir else None)
    )
    if directory is None:
        return None, "pass --flagos-repro-dir=DIR to get a standalone script"
    try:
        return write(case, directory, name or default_name()), None
    except NotReproducible as exc:
        return None, str(exc)
