"""Capability area of a test: ``@pytest.mark.flagos_area("name")``, else its module name
(``conformance/test_streams.py`` -> ``streams``). The report groups results by area."""

from __future__ import annotations

import pytest

MARKER = "flagos_area"
MARKER_HELP = f"{MARKER}(name): capability area of the test in the flagos conformance report"


def area_from_nodeid(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    if stem.startswith("test_"):
        stem = stem[len("test_") :]
    elif stem.endswith("_test"):
        stem = stem[: -len("_test")]
    return stem or "other"


def area_of(item: pytest.Item) -> str:
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        name = marker.args[0] if marker.args else marker.kwargs.get("name")
        if not isinstance(name, str) or not name:
            raise pytest.UsageError(
                f'flagos: {item.nodeid}: @pytest.mark.{MARKER} needs a name, e.g. @pytest.mark.{MARKER}("streams")'
            )
        return name
    return area_from_nodeid(item.nodeid)
