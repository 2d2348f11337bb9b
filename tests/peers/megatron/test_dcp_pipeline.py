"""Megatron-LM's whole dynamic-CP packing pipeline with packd's schedule:
``wrap_data_iterator`` with ``sequence_packing_scheduler="default_dynamic_cp"``
on gloo ranks (dcp_pipeline.py), Megatron's scheduler and then packd's
(``patch(replace=True)``; with its default cost, and with CP communication
priced, which makes its groups differ in size) on the same global batches. For both, what every
rank receives must be a schedule Megatron can train: the same micro-batch
count everywhere, every sample in exactly one group, a group's ranks one
aligned block of its ``local_cp_size`` (a power of two, or the whole pool:
the groups Megatron makes), no rank without work, and each sample's tokens
intact (checked in the workers), and Megatron's get_batch on each rank
finds the same group and the rank's place in it, and slices its share of
the group's stream (checked in the workers). packd's must also keep the
per-GPU cap.
The micro-batch counts and the step under packd's default cost are printed
side by side (``-rP`` shows them); packd's planner minimises the step, not
the count, so neither is asserted.

Runs where MEGATRON_LM_SRC names a Megatron-LM tree whose registry has
``default_dynamic_cp`` (its dev branch); elsewhere the module defines no
tests."""

import pytest

import megatron.core.datasets.data_schedule as ds

import dcp_pipeline

HAS_DYNAMIC_CP = hasattr(ds, "DefaultDynamicCPScheduler")


def groups_of(row: list) -> list:
    """The groups of one micro-batch: (first rank, size, sample ids,
    local_cp_size of each member), from what the ranks received."""
    out = []
    j = 0
    while j < len(row):
        ids = [g for g, _ in row[j]["seqs"]]
        k = j
        while k < len(row) and [g for g, _ in row[k]["seqs"]] == ids:
            k += 1
        out.append((j, k - j, ids, {row[r]["local_cp_size"] for r in range(j, k)}))
        j = k
    return out


def check(runs: list, world: int, lengths_of, cap: int, keep_cap: bool) -> list:
    """Checks every global batch's schedule; returns per batch (micro-batch
    count, step under packd's default cost, the largest per-GPU tokens, the
    group sizes used, the micro-batches whose groups differ in size)."""
    stats = []
    for b, ranks in enumerate(runs):
        lengths = lengths_of(b)
        counts = {r["micro_batches"] for r in ranks}
        assert len(counts) == 1, f"batch {b}: ranks disagree on the micro-batch count {counts}"
        n = counts.pop()
        seen = []
        step = 0.0
        most = 0.0
        sizes = set()
        mixed = 0
        for i in range(n):
            row = [ranks[r]["received"][i] for r in range(world)]
            worst = 0.0
            mixed += len({size for _, size, _, _ in groups_of(row)}) > 1
            for first, size, ids, local in groups_of(row):
                assert ids, f"batch {b}, micro-batch {i}: rank {first} has no sample"
                assert local == {size}, f"batch {b}, micro-batch {i}: group at {first} of {size} ranks says {local}"
                assert size == world or (size & (size - 1) == 0 and first % size == 0), (
                    f"batch {b}, micro-batch {i}: a group of {size} ranks at rank {first} is not one Megatron makes"
                )
                for r in range(first, first + size):
                    # Megatron's get_batch found the same group and this rank's place in it.
                    assert row[r]["cp_ranks"] == list(range(first, first + size)) and row[r]["cp_rank"] == r - first, (
                        f"batch {b}, micro-batch {i}: rank {r} of the group at {first} of {size} ranks got CP group "
                        f"{row[r]['cp_ranks']} as rank {row[r]['cp_rank']}"
                    )
                sizes.add(size)
                seen.extend(ids)
                tokens = sum(lengths[g] for g in ids)
                most = max(most, tokens / size)
                if keep_cap:
                    assert tokens <= size * cap, f"batch {b}, micro-batch {i}: {tokens} tokens on {size} ranks"
                worst = max(worst, sum(lengths[g] + lengths[g] ** 2 / 24576 for g in ids) / size)
            step += worst
        assert sorted(seen) == list(range(len(lengths))), f"batch {b}: samples lost or repeated"
        stats.append((n, step, most, sorted(sizes), mixed))
    return stats


if HAS_DYNAMIC_CP:

    @pytest.mark.parametrize(("world", "cp", "cap", "count"), [(8, 2, 2048, 64), (4, 4, 1024, 48)])
    def test_wrap_data_iterator_dynamic_cp(world, cp, cap, count):
        batches, seed = 3, 7
        result = dcp_pipeline.run(world, cp, cap, batches, seed, count)

        def lengths_of(b):
            return dcp_pipeline.lengths_for(seed, b, count, cap, world)

        theirs = check(result["megatron"], world, lengths_of, cap, keep_cap=False)
        ours = check(result["packd"], world, lengths_of, cap, keep_cap=True)
        priced = check(result["packd_cp"], world, lengths_of, cap, keep_cap=True)
        # With CP communication priced packd's groups differ in size within
        # micro-batches, so Megatron's pipeline ran such micro-batches of packd's.
        assert sum(mixed for *_, mixed in priced) > 0, "no micro-batch mixed group sizes"
        print(f"\n{world} ranks, cp {cp}, dp {world // cp}, max_seqlen_per_dp_cp_rank {cap}, {count} samples a batch")
        print(
            "batch | micro-batches Megatron | packd | step Megatron | packd | packd/Megatron "
            "| widest GPU Megatron | packd | group sizes Megatron | packd | packd, CP priced: micro-batches, sizes, mixed"
        )
        for b, (t, o, p) in enumerate(zip(theirs, ours, priced)):
            print(
                f"{b} | {t[0]} | {o[0]} | {t[1]:.0f} | {o[1]:.0f} | {o[1] / t[1]:.3f} | {t[2]:.0f} | {o[2]:.0f} "
                f"| {t[3]} | {o[3]} | {p[0]}, {p[3]}, {p[4]}"
            )
