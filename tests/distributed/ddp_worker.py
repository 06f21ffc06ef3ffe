"""One rank of a small DistributedDataParallel training run; prints its losses and final parameters
as JSON on the last line. Run by tests/distributed/test_ddp.py, one process per rank:

    python ddp_worker.py RANK WORLD PORT DEVICE_TYPE BACKEND COMPILED STEPS
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class Net(torch.nn.Module):
    """A user-defined module: dynamo compiles its forward as a frame of its own under DDP (a
    torch.nn.Sequential's forward, code inside torch, would run uncompiled there)."""

    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(8, 16)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x)))


def main(rank: int, world: int, port: int, device_type: str, backend: str, compiled: bool, steps: int) -> None:
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    device = torch.device(device_type, rank) if device_type != "cpu" else torch.device("cpu")
    torch.manual_seed(0)  # the same initial model on every rank and device
    model = Net().to(device)
    ddp = DistributedDataParallel(model, device_ids=[rank] if device_type != "cpu" else None)
    step_fn = torch.compile(ddp) if compiled else ddp
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 8, generator=data), torch.randn(64, 1, generator=data)
    x, y = x[rank::world], y[rank::world]  # this rank's shard, on the host
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(step_fn(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    params = [p.detach().cpu().flatten().tolist() for p in model.parameters()]
    graphs = 0
    if compiled:
        from torch._dynamo.utils import counters

        graphs = counters["stats"]["unique_graphs"]
    dist.destroy_process_group()
    print(json.dumps({"losses": losses, "params": params, "graphs": graphs}), flush=True)
    # Leave from here, with the model still alive, and without interpreter finalisation:
    # - returning would free the DistributedDataParallel module, whose Reducer holds the last
    #   reference to the process group; Gloo's destructor waits for its worker threads, and that
    #   wait hung a CPU rank after its report once (about 1 run in 100 on a loaded machine);
    # - an autograd device thread may still be releasing the last backward's graph task (a Python
    #   object in its thread-local state), which aborts a finalising interpreter (upstream race,
    #   pytorch/pytorch#38228). conformance/test_distributed.py's worker leaves the same way.
    os._exit(0)


if __name__ == "__main__":
    rank, world, port, device_type, backend, compiled, steps = sys.argv[1:]
    main(int(rank), int(world), int(port), device_type, backend, compiled == "1", int(steps))
