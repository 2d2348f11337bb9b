"""verl's distributed dynamic-batching test, replayed 10,000 times.

verl's tests/utils/test_seqlen_balancing.py::test_seqlen_balancing_distributed_params
runs two ranks (20 and 25 sequences, lengths drawn by
verl.utils.model.create_random_mask from numpy's unseeded global generator:
50 to 90 valid tokens of 100) through rearrange_micro_batches with a cap of
300, twice: with min_num_micro_batch=4, each rank must get
min(B, ceil(tokens / 300)) micro-batches; with same_micro_num_in_dp, both
ranks must get the larger of the two. It needs two GPUs, so here its
draws are replayed on the host: each draw seeds numpy, makes the lengths
with verl's own generator calls, and asks packd for the counts.

packd keeps the cap, so it meets verl's count exactly where a packing at
that count exists. Where packd's count differs, an exact decision must
prove that no packing at verl's count exists (the draw's count is then
impossible under the cap, and the draw is reported): first by the number
of items (no micro-batch holds more than the most smallest lengths that fit
300), else by a complete search."""

from functools import lru_cache

import numpy as np
import pytest
import torch

import packd.verl

DRAWS = 10_000
CAP = 300


def ceildiv(a, b):
    return -(a // -b)


def draw_lengths(rows):
    """The valid-token counts create_random_mask draws for a 100-token row
    with verl's test's ratios (left padding up to 0.1, valid 0.5 to 0.9),
    with the same calls to numpy's global generator, in the same order."""
    out = np.empty(rows, dtype=np.int64)
    for i in range(rows):
        np.random.randint(low=0, high=11, dtype=np.int64)
        out[i] = np.random.randint(low=50, high=91, dtype=np.int64)
    return out


def test_draws_are_verls():
    from verl.utils.model import create_random_mask

    for seed in range(20):
        np.random.seed(seed)
        mask = create_random_mask(torch.zeros(25, 100, dtype=torch.long), max_ratio_of_valid_token=0.9,
                                  max_ratio_of_left_padding=0.1, min_ratio_of_valid_token=0.5)
        np.random.seed(seed)
        assert mask.sum(-1).tolist() == draw_lengths(25).tolist()


def packs_into(lengths, bins, cap):
    """Whether the lengths fit into ``bins`` bins of ``cap`` (exact)."""
    items = sorted((int(x) for x in lengths), reverse=True)
    if not items:
        return True
    slack = bins * cap - sum(items)
    if items[0] > cap or slack < 0:
        return False
    fit, total = 0, 0
    for x in reversed(items):
        if total + x > cap:
            break
        total, fit = total + x, fit + 1
    if ceildiv(len(items), fit) > bins:
        return False
    smallest = items[-1]

    @lru_cache(maxsize=None)
    def place(i, loads):
        if i == len(items):
            return True
        tried = set()
        for j, load in enumerate(loads):
            if load in tried or load + items[i] > cap:
                continue
            tried.add(load)
            nxt = list(loads)
            nxt[j] += items[i]
            # Room below the smallest length left is lost for good.
            if sum(cap - v for v in nxt if cap - v < smallest) > slack:
                continue
            if place(i + 1, tuple(sorted(nxt))):
                return True
        return False

    return place(0, (0,) * bins)


def test_packs_into_decides():
    assert packs_into([100, 100, 100], 1, 300) and not packs_into([100, 100, 101], 1, 300)
    assert not packs_into([160, 160, 160], 2, 300)  # 480 tokens of 600, but no two share a bin
    assert packs_into([200, 100, 150, 150], 2, 300)
    assert not packs_into([61] * 5, 1, 300)  # 305 > 300; and 4 + 1 into 2 is fine
    assert packs_into([61] * 5, 2, 300)


def count(client, lengths, least=None):
    _, idx = packd.verl.rearrange_micro_batches(lengths, CAP, min_num_micro_batch=least, client=client)
    assert sorted(i for p in idx for i in p) == list(range(lengths.size))
    assert max(int(lengths[p].sum()) for p in idx) <= CAP
    return len(idx)


def test_replay(client):
    impossible = []
    for d in range(DRAWS):
        np.random.seed(d)
        runs = [[draw_lengths(20), draw_lengths(25)], [draw_lengths(20), draw_lengths(25)]]
        # min_num_micro_batch=4, no sync: each rank its own count.
        for rank, lengths in enumerate(runs[0]):
            local = min(lengths.size, ceildiv(int(lengths.sum()), CAP))
            got = count(client, lengths, 4)
            if got != max(local, 4):
                assert not packs_into(lengths, local, CAP), f"draw {d} rank {rank}: {got} where {local} fit"
                assert got == local + 1
                impossible.append((d, "min_num_micro_batch", rank, local))
        # same_micro_num_in_dp: every rank at the larger local count.
        local = [min(x.size, ceildiv(int(x.sum()), CAP)) for x in runs[1]]
        own = [count(client, x) for x in runs[1]]
        target = max(own)
        for rank, lengths in enumerate(runs[1]):
            assert count(client, lengths, target) == target
        if target != max(local):
            short = [r for r in range(2) if not packs_into(runs[1][r], max(local), CAP)]
            assert short, f"draw {d}: {own} where {max(local)} fit on both ranks"
            impossible.append((d, "same_micro_num_in_dp", short, max(local)))
    print(f"\n{DRAWS} draws; verl's count impossible under the cap in {len(impossible)}: {impossible}")
    assert len(impossible) < DRAWS // 100
