"""docs/architecture.md stays true to the tree: every file it names exists, and each of its two
walks names at most a handful of files."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
TOP_LEVEL = (
    "csrc",
    "torch_fl",
    "flagos_triton",
    "flagos_autoload",
    "pytest_flagos",
    "conformance",
    "tests",
    "benchmarks",
    "scripts",
    "docs",
    ".github",
)
# a path that starts at a top-level folder of the repository: csrc/aten/fallback.cpp, torch_fl/compile/
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOP_LEVEL) + r")/[\w./-]*[\w/])")


def _named_paths(text: str) -> set[str]:
    return {p.rstrip("/.") for p in PATH.findall(text)}


def test_every_path_the_page_names_exists():
    text = DOC.read_text(encoding="utf-8")
    named = _named_paths(text)
    assert len(named) > 20, "the page names the tree's files; the pattern found almost none"
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_each_walk_names_a_handful_of_files():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Two walks", 1)[1].split("\n## ", 1)[0]
    walks = [w for w in re.split(r"\nWhere does ", section) if w.strip().startswith(("an eager", "a compiled"))]
    assert len(walks) == 2, "the page has the eager-op walk and the compiled-kernel walk"
    for walk in walks:
        files = {p for p in _named_paths(walk) if Path(p).suffix}
        assert 2 <= len(files) <= 6, (walk.splitlines()[0], sorted(files))
