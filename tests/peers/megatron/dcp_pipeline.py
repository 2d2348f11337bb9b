"""Megatron-LM's sequence-packing pipeline under dynamic CP, on CPU ranks:
``wrap_data_iterator`` with ``sequence_packing_scheduler="default_dynamic_cp"``
(gather the lengths over the DP group, schedule, reroute every sample to the
GPUs of its group, pack each micro-batch with its ``local_cp_size``), then
``get_batch_on_this_rank_for_sequence_packing`` on every packed micro-batch
(the padding mask, the CP group of its ``local_cp_size``, the rank's slice),
run by ``world`` gloo processes, first with Megatron's own scheduler and
then with ``packd.megatron.patch(replace=True)`` in place (with packd's
default cost, then with CP communication priced), on the same global
batches. The slicing is Megatron's contiguous mode: its zigzag mode
calls Transformer Engine's CUDA extension (``thd_get_partitioned_indices``),
which is where the CPU path stops.

Megatron's pipeline asks for CUDA in three ways, which ``_cpu_only`` turns
to the CPU in the worker processes only: ``torch.cuda.current_device()``
(its tests do the same), ``Tensor.cuda()`` (the length gather moves its
counts with it) and nothing else; the collectives run on gloo. The process
groups are passed as ``pg_collection`` (TP = PP = 1, the dp-cp group every
rank, the DP groups the ranks of one CP index), and parallel_state is told
the pipeline rank, which Megatron's MTP check reads, and the dynamic-CP
groups (made by Megatron's own ``create_dynamic_dp_cp_groups``), which
``initialize_model_parallel`` would set but cannot without CUDA.

``run(world, cp, per_rank_cap, batches, seed)`` returns, per scheduler and
global batch, what every rank received: per micro-batch its
``local_cp_size`` and the (sample id, length) pairs of its packed stream,
each sample's tokens checked against the sample sent, and the ranks of
its CP group and its rank there, its slice checked against the group's
stream. The tests beside this file check the schedules; nothing here
judges them."""

import functools
import json
import os
import random
import tempfile
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# The schedulers run, in order: Megatron's own, packd's with its default
# cost, packd's with CP communication priced (CP_PRICED: the ``cp`` cost
# model of bench/dcp/README.md, per token and per ring step).
NAMES = ("megatron", "packd", "packd_cp")
CP_PRICED = {"cp_token": 0.25, "cp_group": 100.0}

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


def _local(get_batch, packed: dict, groups) -> dict:
    """The rank's share of one packed micro-batch through Megatron's
    ``get_batch_on_this_rank_for_sequence_packing`` under dynamic CP, with
    contiguous CP slicing (zigzag slicing needs Transformer Engine's CUDA
    extension): the ranks of its CP group, and its slice checked against
    the group's stream."""
    stream = packed["tokens"].clone()
    config = SimpleNamespace(cp_partition_mode="contiguous")
    tokens, labels, loss_mask, _, position_ids, params, padding = get_batch(
        iter([packed]), dynamic_cp=True, pg_collection=groups, config=config
    )
    c = int(params.local_cp_size)
    r = params.cp_group.rank()
    width = stream.numel() // c
    if params.cp_group.size() != c or tokens.shape != (1, width):
        raise AssertionError(f"a CP group of {params.cp_group.size()} ranks for local_cp_size {c}")
    if not torch.equal(tokens[0], stream[r * width : (r + 1) * width]) or bool(padding.any()):
        raise AssertionError(f"CP rank {r} of {c}: its slice is not its part of the group's stream")
    if not torch.equal(labels[0], tokens[0] + 1) or not bool((loss_mask == 1).all()):
        raise AssertionError(f"CP rank {r} of {c}: labels or loss mask do not follow the tokens")
    return {"cp_ranks": dist.get_process_group_ranks(params.cp_group), "cp_rank": r}


def _worker(rank, world, cp, cap, batches, seed, count, port, out_dir, repo, src):
    import sys

    sys.path[:0] = [os.path.join(repo, "client", "python")] + ([src] if src else [])
    _cpu_only()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    from megatron.core import parallel_state
    from megatron.core.datasets.data_schedule import get_batch_on_this_rank_for_sequence_packing, wrap_data_iterator
    from megatron.core.rerun_state_machine import RerunDataIterator

    import packd.megatron

    dp = world // cp
    # Every rank makes every group, in the same order.
    dp_cp = dist.new_group(list(range(world)))
    dp_groups = [dist.new_group([c + cp * d for d in range(dp)]) for c in range(cp)]
    singles = [dist.new_group([r]) for r in range(world)]
    groups = SimpleNamespace(dp_cp=dp_cp, dp=dp_groups[rank % cp], tp=singles[rank], pp=singles[rank], cp=None)
    parallel_state.set_pipeline_model_parallel_rank(0)
    parallel_state.set_pipeline_model_parallel_world_size(1)
    # The dynamic-CP groups, as initialize_model_parallel makes them (it
    # needs CUDA itself): every power of two below the pool, as aligned
    # blocks, and the dp-cp group for the whole pool.
    parallel_state._DATA_PARALLEL_GROUP_WITH_CP = dp_cp
    parallel_state._DYNAMIC_DP_CP_GROUPS = parallel_state.create_dynamic_dp_cp_groups(rank, list(range(world)), None)
    config = SimpleNamespace(
        max_seqlen_per_dp_cp_rank=cap,
        microbatch_group_size_per_vp_stage=None,
        virtual_pipeline_model_parallel_size=None,
        sequence_packing_scheduler="default_dynamic_cp",
        min_dynamic_context_parallel_size=1,
        pipeline_model_parallel_layout=None,
        mtp_num_layers=None,
    )
    from megatron.core.datasets import data_schedule

    result = {}
    for name in NAMES:
        handle = packd.megatron.patch(replace=True) if name != "megatron" else None
        if name == "packd_cp":
            # packd's scheduler with CP communication priced, as a user
            # registers it: the registry entry builds it with these terms.
            data_schedule.scheduler_map["default_dynamic_cp"] = functools.partial(
                packd.megatron.BalancedCPScheduler, **CP_PRICED
            )
        runs = []
        for b in range(batches):
            lengths = lengths_for(seed, b, count, cap, world)
            per_dp = count // dp
            mine = range((rank // cp) * per_dp, (rank // cp + 1) * per_dp)
            it = RerunDataIterator(iter([_sample(g, lengths[g]) for g in mine]))
            new_it, n, tokens, _ = wrap_data_iterator(it, config, per_dp, pg_collection=groups)
            if tokens != float(sum(lengths)):
                raise AssertionError(f"token count {tokens} is not the batch's {sum(lengths)}")
            received = []
            for _ in range(n):
                packed = next(new_it)
                got = _received(packed, lengths)
                got.update(_local(get_batch_on_this_rank_for_sequence_packing, packed, groups))
                received.append(got)
            runs.append({"micro_batches": int(n), "received": received})
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
    and returns, for each name of NAMES, per global batch, per rank (list
    index), ``{"micro_batches": n, "received": [...]}``."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    with tempfile.TemporaryDirectory() as out:
        args = (world, cp, cap, batches, seed, count, _free_port(), out, repo, os.environ.get("MEGATRON_LM_SRC"))
        mp.spawn(_worker, args=args, nprocs=world, join=True)
        ranks = []
        for r in range(world):
            with open(os.path.join(out, f"rank{r}.json")) as f:
                ranks.append(json.load(f))
    return {name: [[ranks[r][name][b] for r in range(world)] for b in range(batches)] for name in NAMES}
