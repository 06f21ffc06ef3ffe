"""Per-device expectations: which tests are expected to fail (xfail) or are skipped (skip).

Format (TOML)::

    [[xfail]]
    id = "conformance/test_conv.py::test_conv2d_channels_last"
    reason = "fake kernel predicts contiguous strides (#12)"

    [[skip]]
    id = "conformance/test_streams.py"
    reason = "the host accelerator has a single stream"

`id` is a pytest node id as pytest prints it (relative to the rootdir) or a prefix of one
that ends at a boundary: a directory (`conformance/`), a file, a test (all its
parametrizations), or a class. The longest matching entry wins. `reason` is mandatory.
An entry that matches no collected test is reported as a warning (only for entries whose
file was collected, or whose file does not exist), and an xfail test that passes is
listed at the end of the run (and fails it under --flagos-strict).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Iterable

import pytest

STATUSES = ("xfail", "skip")
ENTRY_KEYS = {"id", "reason"}


class FlagosExpectationWarning(pytest.PytestWarning):
    """An expectations entry matches no collected test."""


@dataclasses.dataclass(frozen=True)
class Entry:
    status: str  # xfail | skip
    id: str
    reason: str

    def matches(self, nodeid: str) -> bool:
        if nodeid == self.id:
            return True
        if not nodeid.startswith(self.id):
            return False
        if self.id.endswith(("/", "::")):
            return True
        return nodeid[len(self.id)] in "/:["

    @property
    def path(self) -> str:
        return self.id.split("::", 1)[0]


@dataclasses.dataclass(frozen=True)
class Expectations:
    file: Path
    entries: tuple[Entry, ...]

    def lookup(self, nodeid: str) -> Entry | None:
        best = None
        for entry in self.entries:
            if entry.matches(nodeid) and (best is None or len(entry.id) > len(best.id)):
                best = entry
        return best

    def stale(self, nodeids: Iterable[str], rootdir: Path) -> list[Entry]:
        """Entries that match none of `nodeids`, limited to files that were collected (or
        that do not exist), so running a subset of the suite does not flag the rest."""
        ids = list(nodeids)
        collected_paths = {nodeid.split("::", 1)[0] for nodeid in ids}
        out = []
        for entry in self.entries:
            if any(entry.matches(nodeid) for nodeid in ids):
                continue
            in_scope = any(p == entry.path or p.startswith(entry.path.rstrip("/") + "/") for p in collected_paths)
            if in_scope or not _exists(rootdir / entry.path):
                out.append(entry)
        return out


def _exists(path: Path) -> bool:
    """Path.exists() for any text: a name too long for the file system does not exist."""
    try:
        return path.exists()
    except (OSError, ValueError):  # ENAMETOOLONG, an embedded NUL
        return False


def _toml_loads(text: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - python 3.10
        import tomli as tomllib
    return tomllib.loads(text)


def load(path: Path) -> Expectations:
    """Parse the file; any problem is a usage error with one clear line."""
    where = f"flagos: expectations file {path}"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise pytest.UsageError(f"{where} cannot be read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")  # TOML is UTF-8 by definition
    except UnicodeDecodeError as exc:
        raise pytest.UsageError(
            f"{where} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        data = _toml_loads(text)
    except Exception as exc:  # tomllib.TOMLDecodeError
        raise pytest.UsageError(f"{where} does not parse: {exc}") from None
    unknown = sorted(set(data) - set(STATUSES))
    if unknown:
        raise pytest.UsageError(f"{where}: unknown table(s) {', '.join(unknown)} (expected [[xfail]] and [[skip]])")
    entries: list[Entry] = []
    seen: dict[str, str] = {}
    for status in STATUSES:
        items = data.get(status, [])
        if not isinstance(items, list):
            raise pytest.UsageError(f"{where}: '{status}' must be an array of tables [[{status}]]")
        for n, item in enumerate(items, 1):
            label = f"{where}: [[{status}]] entry {n}"
            if not isinstance(item, dict):
                raise pytest.UsageError(f"{label} is not a table")
            extra = sorted(set(item) - ENTRY_KEYS)
            if extra:
                raise pytest.UsageError(f"{label} has unknown key(s) {', '.join(extra)}")
            test_id = item.get("id")
            reason = item.get("reason")
            if not isinstance(test_id, str) or not test_id.strip():
                raise pytest.UsageError(f"{label} has no 'id'")
            if not isinstance(reason, str) or not reason.strip():
                raise pytest.UsageError(f"{label} ({test_id}) has no 'reason'")
            if test_id in seen:
                raise pytest.UsageError(f"{where}: {test_id} is listed twice ([[{seen[test_id]}]] and [[{status}]])")
            seen[test_id] = status
            entries.append(Entry(status, test_id.strip(), reason.strip()))
    return Expectations(path, tuple(entries))


def apply(item: pytest.Item, expectations: Expectations, strict: bool) -> Entry | None:
    """Mark the item xfail/skip per its entry; return the entry."""
    entry = expectations.lookup(item.nodeid)
    if entry is None:
        return None
    reason = f"{entry.reason} [expectations: {entry.id}]"
    if entry.status == "skip":
        item.add_marker(pytest.mark.skip(reason=reason))
    else:
        item.add_marker(pytest.mark.xfail(reason=reason, strict=strict))
    return entry


def stale_warning(expectations: Expectations, entry: Entry) -> FlagosExpectationWarning:
    return FlagosExpectationWarning(
        f"flagos: expectations file {expectations.file}: [[{entry.status}]] {entry.id!r} "
        "matches no collected test (stale entry?)"
    )
