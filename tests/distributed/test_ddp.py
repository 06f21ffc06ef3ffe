"""torch.distributed on flagos: the "flagos" c10d backend (Gloo on the host accelerator) runs
collectives on flagos tensors, and DistributedDataParallel trains on two flagos devices in two
processes with the CPU's loss curve, eager and compiled."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.requirements import cuda_accelerator, host_only, two_devices

WORKER = Path(__file__).with_name("ddp_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(argv_of_rank, world: int = 2, env: dict | None = None, timeout: float = 600) -> list[str]:
    """Starts one process per rank, waits for all, returns their stdout; fails with their stderr."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    processes = [
        subprocess.Popen(argv_of_rank(rank), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
        for rank in range(world)
    ]
    outputs = [p.communicate(timeout=timeout) for p in processes]
    for rank, (p, (_out, err)) in enumerate(zip(processes, outputs, strict=False)):
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{err[-3000:]}"
    return [out for out, _ in outputs]


def _train(device_type: str, backend: str, compiled: bool = False, steps: int = 5, env: dict | None = None):
    port = _free_port()
    args = [device_type, backend, "1" if compiled else "0", str(steps)]
    outputs = _run_ranks(lambda rank: [sys.executable, str(WORKER), str(rank), "2", str(port), *args], env=env)
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


def test_backend_is_registered_for_flagos():
    import torch.distributed as dist

    assert "flagos" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["flagos"] == "flagos"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"  # left as it was


COLLECTIVES = """
    import os, sys, torch, torch.distributed as dist
    rank, port, backend = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group(None if backend == "default" else backend,
                            init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    device = torch.device("flagos", rank)
    t = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(t)
    assert t.device == device and t.cpu().tolist() == [3.0] * 4, t
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert [v.device for v in work.get_future().value()] == [device]
    assert t.cpu().tolist() == [6.0] * 4
    gathered = [torch.empty(2, device=device) for _ in range(2)]
    dist.all_gather(gathered, torch.full((2,), float(rank), device=device))
    assert [g.cpu().tolist() for g in gathered] == [[0.0, 0.0], [1.0, 1.0]]
    flat = torch.empty(4, device=device)
    dist.all_gather_into_tensor(flat, torch.full((2,), float(rank), device=device))
    assert flat.cpu().tolist() == [0.0, 0.0, 1.0, 1.0]
    out = torch.empty(2, device=device)
    dist.reduce_scatter_tensor(out, torch.arange(4.0, device=device))
    assert out.cpu().tolist() == ([0.0, 2.0] if rank == 0 else [4.0, 6.0])
    b = torch.full((3,), float(rank), device=device)
    dist.broadcast(b, src=1)
    assert b.cpu().tolist() == [1.0] * 3
    if rank == 0:
        dist.send(torch.arange(3.0, device=device), dst=1)
    else:
        r = torch.empty(3, device=device)
        dist.recv(r, src=0)
        assert r.cpu().tolist() == [0.0, 1.0, 2.0]
    dist.barrier()
    objects = [None, None]
    dist.all_gather_object(objects, {"rank": rank})
    assert objects == [{"rank": 0}, {"rank": 1}]
    if backend != "default":
        c = torch.ones(2)
        dist.all_reduce(c)  # CPU tensors go to Gloo
        assert c.tolist() == [2.0, 2.0]
    dist.destroy_process_group()
    print("ok", rank)
"""


@two_devices
@pytest.mark.parametrize("backend", ["flagos", "cpu:gloo,flagos:flagos", "default"])
def test_collectives_on_flagos_tensors(backend):
    port = _free_port()
    code = textwrap.dedent(COLLECTIVES)
    outputs = _run_ranks(lambda rank: [sys.executable, "-c", code, str(rank), str(port), backend])
    assert [o.split() for o in outputs] == [["ok", "0"], ["ok", "1"]]


# Rank 0 frees its DistributedDataParallel module, whose Reducer holds the last reference to the
# process group, while an allreduce is still in flight: rank 1 joins it seconds later, and the
# engine's worker thread then frees the finished work, whose thread-local state holds Python
# objects (the saved-tensors hooks active when it was issued). Python frees the Reducer with the GIL
# held: the backend must not wait for that thread while holding it.
FREE_DURING_COLLECTIVE = """
    import os, sys, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    rank, port = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("flagos", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    device = torch.device("flagos", rank)
    model = DistributedDataParallel(torch.nn.Linear(4, 4).to(device), device_ids=[rank])
    if rank == 1:
        time.sleep(3)  # rank 0 is freeing its module by now
        dist.all_reduce(torch.ones(4, device=device))
    else:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            dist.all_reduce(torch.ones(4, device=device), async_op=True)
        dist.destroy_process_group()
        del model
        print("freed", flush=True)
    os._exit(0)
"""


@pytest.mark.slow
@host_only
@two_devices
def test_freeing_ddp_during_a_collective_does_not_deadlock():
    port = _free_port()
    code = textwrap.dedent(FREE_DURING_COLLECTIVE)
    outputs = _run_ranks(lambda rank: [sys.executable, "-c", code, str(rank), str(port)], timeout=60)
    assert outputs[0].split() == ["freed"]


@pytest.mark.slow
@host_only
@two_devices
def test_ddp_on_two_flagos_devices_follows_the_cpu_loss_curve():
    flagos = _train("flagos", "flagos")
    cpu = _train("cpu", "gloo")
    for rank in range(2):
        torch.testing.assert_close(flagos[rank]["losses"], cpu[rank]["losses"])
        torch.testing.assert_close(flagos[rank]["params"], cpu[rank]["params"])
    assert flagos[0]["losses"][-1] < flagos[0]["losses"][0], "training did not reduce the loss"
    # DDP keeps the replicas identical.
    assert flagos[0]["params"] == flagos[1]["params"]


@pytest.mark.slow
@host_only
@two_devices
def test_compiled_ddp_on_two_flagos_devices(tmp_path):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    compiled = _train("flagos", "flagos", compiled=True, steps=3, env=env)
    eager = _train("flagos", "flagos", steps=3)
    for rank in range(2):
        torch.testing.assert_close(compiled[rank]["losses"], eager[rank]["losses"], rtol=1e-4, atol=1e-5)
    assert compiled[0]["params"] == compiled[1]["params"]
    assert all(rank["graphs"] >= 1 for rank in compiled), "dynamo compiled no graph: the model ran eagerly"


@cuda_accelerator
def test_ddp_with_nccl_on_one_gpu():
    # Needs the cuda accelerator: the single-GPU path, NCCL underneath (world size 1).
    port = _free_port()
    outputs = _run_ranks(
        lambda rank: [sys.executable, str(WORKER), "0", "1", str(port), "flagos", "flagos", "0", "5"], world=1
    )
    result = json.loads(outputs[0].strip().splitlines()[-1])
    assert result["losses"][-1] < result["losses"][0]
