"""Should a kernel run many programs at once? Decided on its TTIR at compile time.

The host executor can evaluate a batch of programs in one pass over the
Python kernel (every value gets a leading batch dimension, ``builder.py``).
That equals running the programs one by one when their control flow agrees.
This analysis rules batching out when the TTIR shows control flow that can
differ between programs: an ``scf.if`` / ``scf.for`` bound that depends on the
program id or on loaded data, ``scf.while`` (spin loops), calls to
non-inlined functions, tensor descriptors.

It is a taint analysis over the printed TTIR: values derived from
``tt.get_program_id`` or from memory are "varying"; a region's results are
varying if anything it yields is. It is a performance decision, not the
safety net: canonicalisation turns some Python ``if``s into selects, so the
executor also checks every Python-level branch at run time
(``builder.uniform_value``) and, if the programs of a batch diverge, undoes
the batch's writes and reruns it one program at a time (``launcher.py``).
"""

from __future__ import annotations

import re

_VALUE = re.compile(r"%[\w.$-]+")
_DEFS = re.compile(r"(%[\w.$-]+)(?::\d+)?\s*=(?!=)")
_SEEDS = (
    "tt.get_program_id",
    "tt.load",
    "tt.atomic_rmw",
    "tt.atomic_cas",
    "tt.call",
    "tt.descriptor_load",
    "tt.descriptor_gather",
    "tt.histogram",
)
_FORBIDDEN = {
    "scf.while": "a while loop (possibly data-dependent)",
    "tt.call": "a call to a non-inlined function",
    "cf.cond_br": "unstructured control flow",
    "tt.make_tensor_descriptor": "a tensor descriptor",
    "tt.descriptor_load": "a tensor descriptor",
    "tt.descriptor_store": "a tensor descriptor",
    "tt.elementwise_inline_asm": "inline assembly",
}


def _strip_strings(line: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)


def _norm(name: str) -> str:
    return name.split("#", 1)[0]


def batchable(ttir: str):
    """(ok, reason) for running several programs of this kernel at once."""
    lines = [_strip_strings(line) for line in ttir.splitlines()]
    body = [line.strip() for line in lines if line.strip() and not line.strip().startswith(("module", "loc("))]
    for line in body:
        for op, why in _FORBIDDEN.items():
            if re.search(rf"(^|[\s=\"]){re.escape(op)}\b", line):
                return False, why

    # parse: (defined names, used names, op text, region-owner index) per line
    parsed = []
    stack = []  # indices of lines that opened a region
    for idx, line in enumerate(body):
        head = line.split(" loc(")[0]
        defs = []
        iv = None
        m = re.match(r"((?:%[\w.$-]+(?::\d+)?(?:,\s*)?)+)\s*=\s*(.*)$", head)
        rest = head
        if m:
            defs = [_norm(d) for d in re.findall(r"%[\w.$-]+", m.group(1))]
            rest = m.group(2)
        if re.match(r"scf\.for\b", rest):
            fm = re.match(r"scf\.for\s+(%[\w.$-]+)\s*=", rest)
            iv = fm.group(1) if fm else None
            defs += [_norm(d) for d in _DEFS.findall(rest) if d != iv]
        uses = [_norm(u) for u in _VALUE.findall(rest) if _norm(u) not in defs and u != iv]
        owner = stack[-1] if stack else None
        parsed.append((defs, uses, rest, owner, iv))
        opens = head.count("{") - head.count("}")
        if head.startswith("}"):
            # "} else {" keeps the region owner; "}" alone closes it
            if stack and opens < 0:
                for _ in range(-opens):
                    if stack:
                        stack.pop()
            continue
        if opens > 0:
            stack.append(idx)
        elif opens < 0:
            for _ in range(-opens):
                if stack:
                    stack.pop()

    varying = set()
    changed = True
    while changed:
        changed = False
        for defs, uses, rest, owner, iv in parsed:
            is_seed = any(rest.startswith(seed) or rest.startswith(f'"{seed}"') for seed in _SEEDS)
            if rest.startswith("scf.for") and iv is not None:
                # the induction variable varies only if its bounds do
                bounds = re.match(
                    r"scf\.for\s+%[\w.$-]+\s*=\s*(%[\w.$-]+)\s+to\s+(%[\w.$-]+)\s+step\s+(%[\w.$-]+)", rest
                )
                if bounds and any(_norm(b) in varying for b in bounds.groups()) and iv not in varying:
                    varying.add(iv)
                    changed = True
                iter_uses = [u for u in uses if not bounds or u not in map(_norm, bounds.groups())]
                taint = any(u in varying for u in iter_uses)
            else:
                taint = is_seed or any(u in varying for u in uses)
            if taint:
                for d in defs:
                    if d not in varying:
                        varying.add(d)
                        changed = True
            if rest.startswith(("scf.yield", "tt.reduce.return", "tt.scan.return")) and owner is not None:
                if any(u in varying for u in uses):
                    for d in parsed[owner][0]:
                        if d not in varying:
                            varying.add(d)
                            changed = True

    for _defs, _uses, rest, _owner, _iv in parsed:
        if rest.startswith("scf.if"):
            cond = _VALUE.search(rest)
            if cond and _norm(cond.group(0)) in varying:
                return False, "a branch on a value that differs between programs"
        if rest.startswith("scf.for"):
            bounds = re.match(r"scf\.for\s+%[\w.$-]+\s*=\s*(%[\w.$-]+)\s+to\s+(%[\w.$-]+)\s+step\s+(%[\w.$-]+)", rest)
            if bounds is None:
                return False, "an scf.for the analysis cannot read"
            if any(_norm(b) in varying for b in bounds.groups()):
                return False, "a loop whose bounds differ between programs"
    return True, ""
