"""A 2-node data-parallel training step: the vegetation model, trained on every rank of a gang.

Each rank fits a linear model (vegetation index → risk) on its shard of a synthetic dataset;
every epoch the ranks average their gradients. With torch installed this is
`torch.distributed` over gloo; without it, a small all-reduce over TCP at MASTER_ADDR:MASTER_PORT
(rank 0 serves, the others connect), so the example runs anywhere in seconds.

On the local backend the two "nodes" are two local processes; with a `slurm:` executor config
the step is one 2-node Slurm job and the ranks start with `srun`; with `gang_backend:
kubernetes` it is one Indexed Job with a pod per node on the tenant (docs/slurm-and-gangs.md).
"""

import json
import os
import random
import socket
import time
from dataclasses import dataclass
from typing import Any

from dagster import AssetExecutionContext, MetadataValue, asset

from k8s_ai_orchestrator import Gang, compute


@dataclass(frozen=True)
class TrainingSettings:
    """Hyper-parameters (plain values: they are pickled to every rank)."""

    samples: int = 4000
    epochs: int = 100
    learning_rate: float = 0.5
    seed: int = 7


def synthetic_shard(settings: TrainingSettings, rank: int, world: int) -> list[tuple[float, float]]:
    """This rank's share of (vegetation index, risk) pairs: risk ≈ 1 - 0.8 × index."""
    rng = random.Random(settings.seed)
    xs = [rng.random() for _ in range(settings.samples)]
    data = [(x, 1.0 - 0.8 * x + rng.gauss(0, 0.02)) for x in xs]
    return data[rank::world]


def gradient(data: list[tuple[float, float]], weight: float, bias: float) -> tuple[float, float]:
    """Mean-squared-error gradient of `risk ≈ weight × index + bias` over a shard."""
    grad_w = grad_b = 0.0
    for x, y in data:
        error = weight * x + bias - y
        grad_w += 2 * error * x
        grad_b += 2 * error
    return grad_w / len(data), grad_b / len(data)


class SocketAllReduce:
    """Average a vector over all ranks through rank 0 (MASTER_ADDR:MASTER_PORT)."""

    def __init__(self, rank: int, world: int, address: str, port: int, timeout_s: float = 60):
        self.rank, self.world = rank, world
        self.peers: list[Any] = []
        if rank == 0:
            server = socket.create_server(("", port))
            server.settimeout(timeout_s)
            self.peers = [server.accept()[0].makefile("rw") for _ in range(world - 1)]
            server.close()
        else:
            self.peers = [_connect(address, port, timeout_s).makefile("rw")]

    def average(self, values: list[float]) -> list[float]:
        if self.rank != 0:
            self.peers[0].write(json.dumps(values) + "\n")
            self.peers[0].flush()
            return list(json.loads(self.peers[0].readline()))
        total = list(values)
        for peer in self.peers:
            for index, value in enumerate(json.loads(peer.readline())):
                total[index] += value
        mean = [value / self.world for value in total]
        for peer in self.peers:
            peer.write(json.dumps(mean) + "\n")
            peer.flush()
        return mean


def _connect(address: str, port: int, timeout_s: float) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((address, port), timeout=timeout_s)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def train_rank(settings: TrainingSettings) -> dict[str, Any]:
    """Runs on every rank: fit on this rank's shard, averaging gradients every epoch."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    data = synthetic_shard(settings, rank, world)
    try:
        import torch.distributed as dist
    except ImportError:
        address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        average = SocketAllReduce(rank, world, address, port).average
        backend = "sockets"
    else:
        average = _torch_average(dist, rank, world)
        backend = "torch.distributed/gloo"
    weight = bias = 0.0
    for _ in range(settings.epochs):
        grad_w, grad_b = average(list(gradient(data, weight, bias)))
        weight -= settings.learning_rate * grad_w
        bias -= settings.learning_rate * grad_b
    loss = sum((weight * x + bias - y) ** 2 for x, y in data) / len(data)
    return {"weight": weight, "bias": bias, "loss": loss, "world_size": world, "backend": backend}


def _torch_average(dist: Any, rank: int, world: int) -> Any:
    import torch

    address, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    dist.init_process_group(
        "gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=world
    )

    def average(values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor)
        return [float(v) / world for v in tensor]

    return average


@asset(
    deps=["vegetation_index"],
    group_name="training",
    op_tags=compute(nodes=2, tasks_per_node=1, cpu=1, memory="1Gi"),
)
def vegetation_model(context: AssetExecutionContext, gang: Gang) -> dict[str, Any]:
    """A risk model trained data-parallel on 2 nodes (a gang: both nodes or none)."""
    model = gang.run(train_rank, TrainingSettings())
    context.add_output_metadata(
        {
            "weight": MetadataValue.float(model["weight"]),
            "loss": MetadataValue.float(model["loss"]),
            "ranks": MetadataValue.int(int(model["world_size"])),
            "communication": MetadataValue.text(str(model["backend"])),
        }
    )
    return model
