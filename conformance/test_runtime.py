"""Device runtime: creation, copies host <-> device <-> device, device indices, the properties
inductor reads, synchronize. The runtime API is torch's generic one first (torch.accelerator
where the device is the process's accelerator), the device module's second: both must work
where both exist."""

from __future__ import annotations

import pytest
import torch

from pytest_flagos import device_api

from conformance_support import PROPERTY_RULES, bullet, device_index, fail, how_it_ended, run_python, tail

pytestmark = pytest.mark.flagos_area("runtime")


def test_device_is_available_and_counted(flagos_device, device_module, device_count):
    checks = []
    if device_api.accelerator_is(flagos_device):
        checks.append(("torch.accelerator.is_available()", torch.accelerator.is_available))
    if callable(getattr(device_module, "is_available", None)):
        checks.append((f"torch.{flagos_device.type}.is_available()", device_module.is_available))
    if not checks:
        fail(
            f"nothing says whether {flagos_device.type!r} is available: it is not torch.accelerator's device "
            f"and torch.{flagos_device.type} has no is_available()",
            "module",
        )
    for name, is_available in checks:
        if not is_available():
            fail(f"{name} is False while tests run on it", "module")
    if device_count < 1:
        fail(f"the device count is {device_count}", "module")
    if device_index(flagos_device) >= device_count:
        fail(f"device under test {flagos_device} is past device_count() = {device_count}", "module")


def test_factories_create_tensors_on_the_device(flagos_device, flagos_capabilities):
    problems = []
    factories = {
        "empty": lambda dt: torch.empty(3, 5, dtype=dt, device=flagos_device).fill_(2),
        "zeros": lambda dt: torch.zeros(3, 5, dtype=dt, device=flagos_device) + 2,
        "ones": lambda dt: torch.ones(3, 5, dtype=dt, device=flagos_device) * 2,
        "full": lambda dt: torch.full((3, 5), 2, dtype=dt, device=flagos_device),
        "empty_strided": lambda dt: torch.empty_strided((3, 5), (1, 3), dtype=dt, device=flagos_device).fill_(2),
    }
    for dtype in flagos_capabilities.torch_dtypes():
        for name, make in factories.items():
            try:
                t = make(dtype)
                host = t.cpu()
            except Exception as exc:
                problems.append(f"{name}({dtype}): {type(exc).__name__}: {exc}")
                continue
            if t.device != flagos_device and not (flagos_device.type == "cpu" and t.device.type == "cpu"):
                problems.append(f"{name}({dtype}) landed on {t.device}, not {flagos_device}")
            elif t.dtype != dtype or tuple(t.shape) != (3, 5):
                problems.append(f"{name}({dtype}) has {t.dtype} {tuple(t.shape)}")
            elif not torch.equal(host, torch.full((3, 5), 2, dtype=dtype)):
                problems.append(f"{name}({dtype}) holds wrong values: {host.flatten()[:5]}")
    x = torch.arange(10, device=flagos_device)
    if x.cpu().tolist() != list(range(10)):
        problems.append(f"arange(10) is {x.cpu().tolist()}")
    if problems:
        fail(
            "tensor creation on the device is broken (dtypes from the capability manifest):\n" + bullet(problems),
            "eager",
            "allocator",
        )


def test_copies_between_host_and_device_are_exact(flagos_device, flagos_capabilities):
    problems = []
    generator = torch.Generator().manual_seed(0)
    dtypes = [*flagos_capabilities.torch_dtypes(), torch.int64, torch.int32, torch.uint8, torch.bool]
    try:  # a synchronize that fails is the runtime's problem, not the copies' (test_synchronize_*)
        device_api.synchronize(flagos_device)
    except Exception as exc:
        pytest.skip(
            f"flagos: requires synchronize (to read non_blocking copies back): it raised {type(exc).__name__}: {exc}"
        )
    for dtype in dtypes:
        base = torch.randn(33, 17, generator=generator) * 100
        host = base.to(dtype)
        cases = {
            "contiguous": host,
            "transposed": host.t(),
            "sliced": host[1::2, 3:],
        }
        for name, src in cases.items():
            try:
                on_device = src.to(flagos_device)
                back = on_device.cpu()
                nb = src.to(flagos_device, non_blocking=True)
                device_api.synchronize(flagos_device)
                back_nb = nb.to("cpu", non_blocking=False)
            except Exception as exc:
                problems.append(f"{dtype} {name}: {type(exc).__name__}: {exc}")
                continue
            if not torch.equal(back, src):
                problems.append(f"{dtype} {name}: host -> device -> host changed the values")
            if not torch.equal(back_nb, src):
                problems.append(f"{dtype} {name}: non_blocking host -> device copy changed the values")
        # copy_ into an existing device tensor, from host and device sources
        dst = torch.empty(33, 17, dtype=dtype, device=flagos_device)
        dst.copy_(host)
        if not torch.equal(dst.cpu(), host):
            problems.append(f"{dtype}: device.copy_(host) is wrong")
        dst2 = torch.empty(17, 33, dtype=dtype, device=flagos_device)
        dst2.copy_(dst.t())
        if not torch.equal(dst2.cpu(), host.t()):
            problems.append(f"{dtype}: device.copy_(transposed device tensor) is wrong")
    if problems:
        fail("copies between host and device are wrong:\n" + bullet(problems), "copies")


MATH_BIT_SCRIPT = """
import torch
device = torch.device({device!r})
try:
    torch.zeros(2, dtype=torch.complex64, device=device)
except Exception as exc:
    print("NO_COMPLEX", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    raise SystemExit(0)
a = torch.randn(3, 4, dtype=torch.complex64)
conj = a.to(device).conj()            # the Conjugate bit, resolved lazily
neg_imag = conj.imag                  # a real view with the Negative bit
checks = {{
    "x.conj().clone()": (lambda: conj.clone(), a.conj().resolve_conj()),
    "x.conj().resolve_conj()": (lambda: conj.resolve_conj(), a.conj().resolve_conj()),
    "x.conj() + 0": (lambda: conj + 0, a.conj().resolve_conj()),
    "x.conj().imag.clone()": (lambda: neg_imag.clone(), -a.imag),
    "device_tensor.copy_(x.conj())": (lambda: torch.empty_like(conj).copy_(conj), a.conj().resolve_conj()),
}}
for name, (run, expected) in checks.items():
    print("CHECK", name, flush=True)   # the last CHECK line names a check that kills the process
    got = run().cpu()
    if got.is_conj() or got.is_neg() or not torch.equal(got, expected):
        print("WRONG", name)
print("DONE")
"""


def test_conjugate_and_negative_views_copy(flagos_device):
    """x.conj() and its .imag are lazy views (the Conjugate / Negative bits). Their fallback
    resolves them with clone(), that is with copy_: a device whose copy_ goes to its own
    _copy_from through those keys recurses until the stack overflows. Run in a fresh
    interpreter, so a crash is a verdict and not the end of the run."""
    proc = run_python(MATH_BIT_SCRIPT.format(device=str(flagos_device)), timeout=120)
    out = proc.stdout
    if "NO_COMPLEX" in out:
        pytest.skip(f"{flagos_device.type}: requires complex64 tensors: " + out.split("NO_COMPLEX", 1)[1].strip())
    checks = [line[len("CHECK ") :] for line in out.splitlines() if line.startswith("CHECK ")]
    if proc.returncode != 0:
        died = how_it_ended(proc.returncode)
        fail(
            f"{checks[-1] if checks else 'the math-bit script'} on {flagos_device} ended the process "
            f"({died}). A stack overflow here means the Conjugate/Negative fallback's clone() reached "
            "copy_, which sent the still-conjugate source back through _copy_from (not a fallthrough of "
            "those keys): register a copy_ kernel for the device (copy_ passes them).\n" + tail(proc.stderr, 15),
            "copies",
        )
    wrong = [line[len("WRONG ") :] for line in out.splitlines() if line.startswith("WRONG ")]
    if wrong:
        fail("conjugate/negative views resolved to wrong values:\n" + bullet(wrong), "copies")
    assert "DONE" in out, tail(out + proc.stderr)


@pytest.mark.requires("two_devices")
def test_copies_between_devices(flagos_device, device_count):
    problems = []
    src = torch.randn(64, 48)
    a = src.to(torch.device(flagos_device.type, 0))
    for j in range(1, device_count):
        target = torch.device(flagos_device.type, j)
        for name, tensor in (("contiguous", a), ("transposed", a.t())):
            try:
                b = tensor.to(target)
                back = b.to(torch.device(flagos_device.type, 0))
            except Exception as exc:
                problems.append(f"0 -> {j} {name}: {type(exc).__name__}: {exc}")
                continue
            if b.device != target:
                problems.append(f"0 -> {j} {name}: result on {b.device}")
            expect = src if name == "contiguous" else src.t()
            if not torch.equal(b.cpu(), expect) or not torch.equal(back.cpu(), expect):
                problems.append(f"0 -> {j} -> 0 {name}: values changed")
        dst = torch.zeros(64, 48, device=target)
        dst.copy_(a)
        if not torch.equal(dst.cpu(), src):
            problems.append(f"device {j}.copy_(device 0 tensor) is wrong")
    if problems:
        fail("copies between devices are wrong:\n" + bullet(problems), "copies")


@pytest.mark.requires("two_devices")
def test_device_indices_and_current_device(flagos_device, device_module, device_count):
    """torch.accelerator's device index API (or the module's where the device is not the
    accelerator), and the module's device()/set_device()/current_device() where it has them."""
    problems = []
    apis = [
        (
            "torch.accelerator" if device_api.accelerator_is(flagos_device) else f"torch.{flagos_device.type}",
            lambda: device_api.current_device_index(flagos_device),
            lambda i: device_api.on_device(flagos_device, i),
            lambda i: device_api.set_device_index(flagos_device, i),
        )
    ]
    extras = [getattr(device_module, name, None) for name in ("current_device", "device", "set_device")]
    if device_api.accelerator_is(flagos_device) and all(callable(fn) for fn in extras):
        apis.append((f"torch.{flagos_device.type}", *extras))
    try:
        for where, current, on_device, set_device in apis:
            start = current()
            for i in range(device_count):
                x = torch.ones(4, device=torch.device(flagos_device.type, i))
                if x.device.index != i:
                    problems.append(f"a tensor created on index {i} reports index {x.device.index}")
                with on_device(i):
                    if current() != i:
                        problems.append(f"{where}: inside device {i} the current device is {current()}")
                    y = torch.zeros(2, device=flagos_device.type)
                    if y.device.index != i:
                        problems.append(
                            f"{where}: inside device {i} a tensor on {flagos_device.type!r} lands on index "
                            f"{y.device.index}"
                        )
                if current() != start:
                    problems.append(f"{where}: leaving device {i} did not restore current device {start}")
            other = (start + 1) % device_count
            set_device(other)
            try:
                if current() != other:
                    problems.append(f"{where}: setting device {other} left the current device at {current()}")
            finally:
                set_device(start)
    except device_api.MissingAPI as exc:
        fail(f"the current device cannot be read or set: {exc}", "module", "guard")
    # an op on tensors of two devices must raise, not silently compute
    a = torch.ones(3, device=torch.device(flagos_device.type, 0))
    b = torch.ones(3, device=torch.device(flagos_device.type, 1))
    try:
        a + b
        problems.append("adding tensors of devices 0 and 1 did not raise")
    except RuntimeError:
        pass
    if problems:
        fail("device indices are not honoured:\n" + bullet(problems), "guard", "module")


def _check_properties(props, where):
    problems = []
    for name, (ok, sane) in PROPERTY_RULES.items():
        if not hasattr(props, name):
            problems.append(f"{where}: no {name!r} ({sane})")
            continue
        value = getattr(props, name)
        if not ok(value):
            problems.append(f"{where}: {name} = {value!r} is not {sane}")
    warp, threads = getattr(props, "warp_size", None), getattr(props, "max_threads_per_block", None)
    if isinstance(warp, int) and isinstance(threads, int) and threads < warp:
        problems.append(f"{where}: max_threads_per_block {threads} < warp_size {warp}")
    return problems


@pytest.mark.requires("triton_codegen", "device_interface")
def test_properties_inductor_needs(flagos_device, flagos_capabilities, device_interface, device_module, device_count):
    """The properties inductor's Triton codegen and benchmarker read."""
    problems = []
    for i in range(device_count):
        for where, get in (
            (
                f"torch.{flagos_device.type}.get_device_properties({i})",
                lambda i=i: device_module.get_device_properties(i),
            ),
            (f"DeviceInterface.get_device_properties({i})", lambda i=i: device_interface.get_device_properties(i)),
            (
                f"DeviceInterface.Worker.get_device_properties({i})",
                lambda i=i: device_interface.Worker.get_device_properties(i),
            ),
        ):
            try:
                props = get()
            except Exception as exc:
                problems.append(f"{where} raised {type(exc).__name__}: {exc}")
                continue
            problems += _check_properties(props, where)
    try:
        capability = device_interface.get_compute_capability(device_index(flagos_device))
    except Exception as exc:
        problems.append(f"DeviceInterface.get_compute_capability raised {type(exc).__name__}: {exc}")
    else:
        if capability in (None, ""):
            problems.append("DeviceInterface.get_compute_capability returned nothing")
    try:
        if not device_interface.is_triton_capable(flagos_device):
            problems.append("DeviceInterface.is_triton_capable() is False for a Triton device")
    except Exception as exc:
        problems.append(f"DeviceInterface.is_triton_capable raised {type(exc).__name__}: {exc}")
    if problems:
        fail("device properties inductor needs are missing or not sane:\n" + bullet(problems), "properties")


def test_synchronize_waits_for_queued_work(flagos_device, device_module, device_count):
    """torch.accelerator.synchronize (the DeviceGuardImpl's synchronizeDevice) where the
    device is the accelerator, and the device module's synchronize where it has one."""
    a = torch.randn(256, 256, device=flagos_device)
    out = a
    for _ in range(8):
        out = torch.tanh(out @ a)
    expected = out.cpu()
    index = device_index(flagos_device)
    calls = []
    if device_api.accelerator_is(flagos_device):
        calls += [
            ("torch.accelerator.synchronize()", lambda: torch.accelerator.synchronize()),
            (f"torch.accelerator.synchronize({index})", lambda: torch.accelerator.synchronize(index)),
        ]
        calls += [
            (f"torch.accelerator.synchronize(device {i})", lambda i=i: torch.accelerator.synchronize(i))
            for i in range(device_count)
        ]
    own = getattr(device_module, "synchronize", None)
    if callable(own):
        calls += [
            (f"torch.{flagos_device.type}.synchronize()", lambda: own()),
            (f"torch.{flagos_device.type}.synchronize({index})", lambda: own(index)),
        ]
        calls += [
            (
                f"torch.{flagos_device.type}.synchronize(device {i})",
                lambda i=i: own(torch.device(flagos_device.type, i)),
            )
            for i in range(device_count)
        ]
    if not calls:
        fail(
            f"nothing synchronizes {flagos_device.type!r}: it is not torch.accelerator's device and "
            f"torch.{flagos_device.type} has no synchronize()",
            "module",
            "guard",
        )
    problems = []
    for name, call in calls:
        try:
            call()
        except Exception as exc:
            problems.append(f"{name} raised {type(exc).__name__}: {exc}")
    if not torch.equal(out.cpu(), expected):
        problems.append("a result read after synchronize() differs from the one read before")
    if problems:
        fail("synchronize is broken:\n" + bullet(problems), "guard")


def test_rng_state_is_saved_and_restored_through_torch_random(flagos_device):
    """torch.random.fork_rng saves and restores the device's generator through the device
    module's get_rng_state/set_rng_state; activation checkpointing and torch's own
    freeze_rng_state do the same, and freeze_rng_state asks every registered device's module
    from CPU code too."""
    devices = [] if flagos_device.type == "cpu" else [device_index(flagos_device)]  # cpu's is always forked
    torch.manual_seed(123)
    try:
        with torch.random.fork_rng(devices=devices, device_type=flagos_device.type):
            inside = torch.rand(8, device=flagos_device).cpu()
    except Exception as exc:
        fail(
            f"torch.random.fork_rng(device_type={flagos_device.type!r}) raised {type(exc).__name__}: {exc} "
            f"(torch.{flagos_device.type} needs get_rng_state(device) and set_rng_state(state, device))",
            "module",
        )
    after = torch.rand(8, device=flagos_device).cpu()
    if not torch.equal(inside, after):
        fail(
            "after torch.random.fork_rng the device's generator draws other numbers than inside it: "
            f"set_rng_state did not restore the state get_rng_state saved ({inside[:3].tolist()} vs {after[:3].tolist()})",
            "module",
        )
