"""The conformance suite's "where to look" hints cite files and sections that exist.

Each hint names the generic hook, then this repository's files after "flagos:" (a bare file
name continues the directory of the path before it), torch's after "torch:", and sections
of the docs as docs/<page>.md, 'Heading'.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.helpers import REPO, import_conformance

conformance_support = import_conformance("conformance_support")

PATH = re.compile(r"[\w.-]+(?:/[\w.-]*)+|\b[\w-]+\.(?:py|cpp|h|md|toml)\b")
DOC_SECTION = re.compile(r"(docs/[\w-]+\.md), '([^']+)'")
TORCH = Path(importlib.util.find_spec("torch").origin).parent.parent


def _cited(text, marker):
    """Paths cited after `marker` up to the closing parenthesis or the next `name:`; a bare
    file name right after a file path is in that file's directory."""
    paths = []
    for segment in re.findall(rf"{marker}: ([^)]*)", text):
        segment = re.split(r";\s*\w+:", segment)[0]
        directory = None
        for token in PATH.findall(segment):
            if "/" not in token and directory is not None:
                token = f"{directory}/{token}"
            directory = token.rsplit("/", 1)[0] if "/" in token and not token.endswith("/") else None
            paths.append(token)
    return paths


@pytest.mark.parametrize("topic", sorted(conformance_support.WHERE))
def test_hint_cites_what_exists(topic):
    text = conformance_support.WHERE[topic]
    assert "design.md" not in text
    missing = [p for p in _cited(text, "flagos") if not (REPO / p).exists()]
    missing += [p for p in _cited(text, "torch") if p.startswith("torch/") and not (TORCH / p).exists()]
    for page, heading in DOC_SECTION.findall(text):
        lines = (REPO / page).read_text().splitlines()
        if not any(line.startswith("#") and heading in line for line in lines):
            missing.append(f"{page}, section '{heading}'")
    assert not missing, f"{topic}: {missing}"


def test_hints_cite_files_at_all():
    assert sum(len(_cited(text, "flagos")) for text in conformance_support.WHERE.values()) >= 20
