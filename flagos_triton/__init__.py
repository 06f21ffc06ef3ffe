"""The ``flagos`` Triton back end for the flagos *host* accelerator.

Triton finds it through the ``triton.backends`` entry point
(``flagos = "flagos_triton"``) and imports ``.compiler`` and
``.driver`` from here; each holds exactly one concrete subclass
(``FlagosBackend`` and ``FlagosDriver``).

* compile: target-independent TTIR passes (so codegen errors surface where the
  compile happens, in inductor's workers) and a final stage that emits a
  self-contained binary (``binary.py``): the kernel's Python source, the source
  of every ``@triton.jit`` helper it references by name, and its globals as
  importable references. It survives the worker -> parent pickle hop.
* launch: ``launcher.py`` runs the kernel on the host with Triton's interpreter
  machinery over the raw host pointers of flagos memory (no copies), many
  programs at a time where the TTIR shows that is safe (``analysis.py``,
  ``builder.py``).

Import order: Triton's backend discovery imports ``.compiler`` and ``.driver``
and needs their classes defined. If one of them were imported first (before
``triton``), its own ``import triton`` would run the discovery while the
module is half-initialised and Triton would fail with "Found 0 concrete
subclasses". Importing ``triton`` here, before any submodule, makes every
import order work. (When Triton is the one importing us, this returns the
partially initialised ``triton`` module and does nothing.)
"""

try:
    import triton  # noqa: F401
except ImportError:  # Triton missing: presence.py still works
    pass
