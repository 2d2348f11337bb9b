"""Megatron-LM's sequence-packing pipeline under dynamic CP, on CPU ranks:
``wrap_data_iterator`` with ``sequence_packing_scheduler="default_dynamic_cp"``
(gather the lengths over the DP group, schedule, reroute every sample to the
GPUs of its group, pack each micro-batch with its ``local_cp_size``), run by
``world`` gloo processes, first with Megatron's own scheduler and then with
``packd.megatron.patch(replace=True)`` in place, on the same global batches.

Megatron's pipeline asks for CUDA in three ways, which ``_cpu_only`` turns
to the CPU in the worker processes only: ``torch.cuda.current_device()``
(its tests do the same), ``Tensor.cuda()`` (the length gather moves its
counts with it) and nothing else; the collectives run on gloo. The process
groups are passed as ``pg_collection`` (TP = PP = 1, the dp-cp group every
rank, the DP groups the ranks of one CP index), and parallel_state is told
the pipeline rank, which Megatron's MTP check reads.

``run(world, cp, per_rank_cap, batches, seed)`` returns, per scheduler and
global batch, what every rank received: per micro-batch its
``local_cp_size`` and the (sample id, length) pairs of its packed stream,
each sample's tokens checked against the sample sent. The tests beside this
file check the schedules; nothing here judges them."""

import json
import os
import random
import tempfile
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# A token of sample g at position p is g * _ID + p + 1: the packed stream
# names the sample each token came from, and its order.
_ID = 1 << 24


def lengths_for(seed: int, batch: int, count: int, per_rank_cap: int, pool: int) -> list:
    """One global batch's padded lengths (multiples of 2 x pool, so that
    any CP group's zigzag split is even, as Megatron's datasets pad them):
    mostly short, some up to a few GPUs' worth, one in eight long."""
    rng = random.Random(seed * 1000 + batch)
    step = 2 * pool
    out = []
    for _ in range(count):
        if rng.random() < 0.125:
            n = rng.randint(per_rank_cap, per_rank_cap * min(pool, 4))
        else:
            n = rng.randint(64, per_rank_cap)
        out.append(max(step, -(-n // step) * step))
    return out


def _cpu_only():
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.Tensor.cuda = lambda self, *args, **kwargs: self


def _sample(gid: int, length: int) -> dict:
    tokens = gid * _ID + torch.arange(1, length + 1, dtype=torch.int64)
    return {
        "tokens": tokens,
        "labels": tokens + 1,
        "loss_mask": torch.ones(length, dtype=torch.float32),
        "position_ids": torch.arange(length, dtype=torch.int64),
        "cu_seqlens": torch.tensor([0, length], dtype=torch.int32),
    }


def _received(packed: dict, lengths: list) -> dict:
    """What one packed micro-batch holds: its local_cp_size and its
    samples in order, each sample's tokens checked exactly."""
    cu = packed["cu_seqlens_padded"].tolist()
    tokens = packed["tokens"]
    seqs = []
    for a, b in zip(cu[:-1], cu[1:]):
        gid = int(tokens[a]) // _ID
        want = gid * _ID + torch.arange(1, b - a + 1, dtype=torch.int64)
        if b - a != lengths[gid] or not torch.equal(tokens[a:b], want):
            raise AssertionError(f"packed tokens [{a}, {b}) are not sample {gid} of length {lengths[gid]}")
        if not torch.equal(packed["position_ids"][a:b], torch.arange(b - a)):
            raise AssertionError(f"sample {gid}: position ids out of order")
        seqs.append([gid, b - a])
    if packed["cu_seqlens"].tolist() != cu:
        raise AssertionError("cu_seqlens differs from cu_seqlens_padded for unpadded samples")
    return {"local_cp_size": int(packed["local_cp_size"]), "seqs": seqs}


def _worker(rank, world, cp, cap, batches, seed, count, port, out_dir, repo, src):
    import sys

    sys.path[:0] = [os.path.join(repo, "client", "python")] + ([src] if src else [])
    _cpu_only()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from megatron.core import parallel_state
    from megatron.core.datasets.data_schedule import wrap_data_iterator
    from megatron.core.rerun_state_machine import RerunDataIterator

    import packd.megatron

    dp = world // cp
    # Every rank makes every group, in the same order.
    dp_cp = dist.new_group(list(range(world)))
    dp_groups = [dist.new_group([c + cp * d for d in range(dp)]) for c in range(cp)]
    singles = [dist.new_group([r]) for r in range(world)]
    groups = SimpleNamespace(dp_cp=dp_cp, dp=dp_groups[rank % cp], tp=singles[rank], pp=singles[rank])
    parallel_state.set_pipeline_model_parallel_rank(0)
    parallel_state.set_pipeline_model_parallel_world_size(1)
    config = SimpleNamespace(
        max_seqlen_per_dp_cp_rank=cap,
        microbatch_group_size_per_vp_stage=None,
        virtual_pipeline_model_parallel_size=None,
        sequence_packing_scheduler="default_dynamic_cp",
        min_dynamic_context_parallel_size=1,
        pipeline_model_parallel_layout=None,
        mtp_num_layers=None,
    )
    result = {}
    for name in ("megatron", "packd"):
        handle = packd.megatron.patch(replace=True) if name == "packd" else None
        runs = []
        for b in range(batches):
            lengths = lengths_for(seed, b, count, cap, world)
            per_dp = count // dp
            mine = range((rank // cp) * per_dp, (rank // cp + 1) * per_dp)
            it = RerunDataIterator(iter([_sample(g, lengths[g]) for g in mine]))
            new_it, n, tokens, _ = wrap_data_iterator(it, config, per_dp, pg_collection=groups)
            if tokens != float(sum(lengths)):
                raise AssertionError(f"token count {tokens} is not the batch's {sum(lengths)}")
            runs.append({"micro_batches": int(n), "received": [_received(next(new_it), lengths) for _ in range(n)]})
        result[name] = runs
        if handle is not None:
            handle.undo()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(world: int, cp: int, cap: int, batches: int, seed: int, count: int) -> dict:
    """Runs the pipeline on ``world`` gloo ranks (``cp`` CP x world/cp DP)
    and returns ``{"megatron": [...], "packd": [...]}``: per global batch,
    per rank (list index), ``{"micro_batches": n, "received": [...]}``."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    with tempfile.TemporaryDirectory() as out:
        args = (world, cp, cap, batches, seed, count, _free_port(), out, repo, os.environ.get("MEGATRON_LM_SRC"))
        mp.spawn(_worker, args=args, nprocs=world, join=True)
        ranks = []
        for r in range(world):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    return {name: [[ranks[r][name][b] for r in range(world)] for b in range(batches)] for name in ("megatron", "packd")}
