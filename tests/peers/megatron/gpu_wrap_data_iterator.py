"""Megatron-Core's whole sequence-packing pipeline with packd's schedule, on
one CUDA GPU: ``wrap_data_iterator`` (gather lengths, schedule through the
registry, reroute, pack, broadcast) for the config names ``dp_balanced``
(Megatron's scheduler) and ``packd_dp_balanced`` (packd's, registered by
``packd.megatron.patch()``), on the same global batch, one NCCL rank.

Needs CUDA and Megatron-LM with the scheduler registry on the path
(MEGATRON_LM_SRC); the peer tests that need no GPU are test_*.py beside it.
Run: ``MEGATRON_LM_SRC=... python tests/peers/megatron/gpu_wrap_data_iterator.py``.
Exits 1 when a check fails: the tokens after packing differ from the
tokens before, a packed micro-batch passes the cap, or packd's pipeline
gives more micro-batches than Megatron's where Megatron keeps the cap.
"""

import os
import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))
if os.environ.get("MEGATRON_LM_SRC"):
    sys.path.insert(0, os.environ["MEGATRON_LM_SRC"])

import torch  # noqa: E402

import packd.megatron  # noqa: E402
from megatron.core import parallel_state  # noqa: E402
from megatron.core.datasets.data_schedule import wrap_data_iterator  # noqa: E402
from megatron.core.rerun_state_machine import RerunDataIterator  # noqa: E402

CAP = 8192  # max_seqlen_per_dp_cp_rank, CP 1


def sample(length, gen):
    """One packed-dataset sample holding one sequence of ``length`` tokens
    (a multiple of 16), on the GPU."""
    dev = torch.device("cuda", torch.cuda.current_device())
    tokens = torch.randint(1, 32000, (length,), generator=gen, dtype=torch.int64).to(dev)
    return {
        "tokens": tokens,
        "labels": torch.roll(tokens, -1),
        "loss_mask": torch.ones(length, dtype=torch.float32, device=dev),
        "position_ids": torch.arange(length, dtype=torch.int64, device=dev),
        "cu_seqlens": torch.tensor([0, length], dtype=torch.int32, device=dev),
    }


def run(name, samples):
    config = SimpleNamespace(
        max_seqlen_per_dp_cp_rank=CAP,
        microbatch_group_size_per_vp_stage=1,
        virtual_pipeline_model_parallel_size=None,
        sequence_packing_scheduler=name,
        # Megatron-LM's dev branch asks its MTP check, which reads these
        # (None: no MTP, the default).
        pipeline_model_parallel_layout=None,
        mtp_num_layers=None,
    )
    it, count, tokens, squares = wrap_data_iterator(RerunDataIterator(iter(samples)), config, len(samples))
    packed = [next(it) for _ in range(count)]
    sums = [int(b["tokens"].sum()) for b in packed]
    widths = [int(b["cu_seqlens_padded"][-1]) for b in packed]
    return count, sum(sums), max(widths), tokens


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    torch.cuda.set_device(0)
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    handle = packd.megatron.patch()
    failed = False
    try:
        gen = torch.Generator().manual_seed(0)
        for batch in range(5):
            lengths = [int(x) * 16 for x in torch.randint(128, 513, (64,), generator=gen)]
            samples = [sample(L, gen) for L in lengths]
            before = sum(int(s["tokens"].sum()) for s in samples)
            m_count, m_sum, m_width, m_tokens = run("dp_balanced", [dict(s) for s in samples])
            p_count, p_sum, p_width, p_tokens = run("packd_dp_balanced", [dict(s) for s in samples])
            ok = m_sum == before and p_sum == before and p_width <= CAP and m_tokens == p_tokens
            ok = ok and (m_width > CAP or p_count <= m_count)
            failed |= not ok
            print(
                f"batch {batch}: 64 samples, {sum(lengths)} tokens; micro-batches Megatron {m_count} "
                f"packd {p_count}; widest Megatron {m_width} packd {p_width} (cap {CAP}); "
                f"token sums equal: {m_sum == before and p_sum == before}; {'ok' if ok else 'FAILED'}"
            )
    finally:
        handle.undo()
        parallel_state.destroy_model_parallel()
        torch.distributed.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
