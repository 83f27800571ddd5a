"""What the FSDP2 reference scripts share: the process group from mpirun's environment
(gloo on CPU, NCCL on GPU), host-memory probes that match areal-train's (VmRSS, VmHWM
reset through /proc/self/clear_refs), and FSDP2 sharding as AReaL applies it (each
decoder layer, then the root)."""
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def setup():
    """Rank and world size from mpirun (or torchrun); returns (rank, world, device)."""
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", 0)))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("LOCAL_RANK", 0)))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("AREAL_BENCH_PORT", "29517"))
    cuda = torch.cuda.is_available() and os.environ.get("AREAL_BENCH_DEVICE", "auto") != "cpu"
    device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    return rank, world, device


def mesh(device):
    return init_device_mesh(device.type, (dist.get_world_size(),))


def shard_like_areal(model, device_mesh, reshard_after_forward=True):
    for layer in model.model.layers:
        fully_shard(layer, mesh=device_mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=device_mesh, reshard_after_forward=reshard_after_forward)
    return model


def byte_rows(data_path):
    """DATA.jsonl rows {"text": ...} as areal-train's byte tokenizer reads them: BOS 256,
    the UTF-8 bytes, EOS 257; in file order."""
    return [[256] + list(json.loads(line)["text"].encode()) + [257] for line in open(data_path) if line.strip()]


def padded_batch(rows, device):
    """Rows right-padded to the longest (id 0) and their attention mask, as transformers
    pads a batch: (ids, mask), both [rows, longest] int64 on `device`."""
    longest = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (longest - len(r)) for r in rows], dtype=torch.long, device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (longest - len(r)) for r in rows], dtype=torch.long, device=device)
    return ids, mask


def _status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def rss_bytes():
    return _status_bytes("VmRSS")


def peak_rss_bytes():
    return _status_bytes("VmHWM")


def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class Measure:
    """Wall time and host peak-memory growth of a block, as areal-train's stage table."""

    def __enter__(self):
        self.baseline = rss_bytes()
        reset_peak_rss()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
        self.peak_growth = peak_rss_bytes() - self.baseline
        self.gpu_peak = torch.cuda.max_memory_allocated() if torch.cuda.is_initialized() else 0
        return False


def gather_to_rank0(record):
    """Every rank's dict, as a list on rank 0 (None elsewhere)."""
    records = [None] * dist.get_world_size()
    dist.all_gather_object(records, record)
    return records if dist.get_rank() == 0 else None


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
