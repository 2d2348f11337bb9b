"""bench/e2e/ring.py, the emulated shard work that bench/e2e/dcp.py times:
the shards of a group, computed one GPU at a time ring style, gathered,
are the unsharded causal attention of the group's stream (outputs and
gradients, fp64), and the zigzag shard is the one packd's GPU agent cuts."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "bench" / "e2e"), str(REPO / "tests" / "e2e")]

from ring import ShardTimer, ring_attention, step_plan, zigzag_index, zigzag_positions  # noqa: E402
from tiny_model import Config, varlen_attention  # noqa: E402


def sharded_equals_full(lengths, c, heads=2, dim=4, seed=0, tile=16):
    g = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    q, k, v = (torch.randn(t, heads, dim, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    w = torch.randn(t, heads, dim, generator=g, dtype=torch.float64)
    cu = np.concatenate([[0], np.cumsum(lengths)])
    full = varlen_attention(q, k, v, cu)
    ref_grads = torch.autograd.grad((full * w).sum(), (q, k, v))

    idx = [zigzag_index(lengths, c, r) for r in range(c)]
    assert torch.equal(torch.sort(torch.cat(idx)).values, torch.arange(t)), "the shards cover the stream once"
    kv = [(k[i], v[i]) for i in idx]
    out = torch.empty(t, heads, dim, dtype=torch.float64)
    loss = 0
    for r in range(c):  # one GPU after another, as the bench times them
        o = ring_attention(q[idx[r]], kv, lengths, c, r, tile=tile)
        out[idx[r]] = o.detach()
        loss = loss + (o * w[idx[r]]).sum()
    grads = torch.autograd.grad(loss, (q, k, v))
    assert torch.allclose(out, full.detach(), rtol=0, atol=1e-12), (out - full).abs().max()
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, rtol=0, atol=1e-11), (a - b).abs().max()


@pytest.mark.parametrize("tile", [4, 16])  # the bench's tile at 1/32 (128 real tokens) and the old one
@pytest.mark.parametrize("c", [1, 2, 4, 8])
def test_ring_shards_gathered_equal_full_attention(c, tile):
    sharded_equals_full([2 * c * m for m in (1, 3, 7, 2)], c, tile=tile)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 3]), st.lists(st.integers(1, 12), min_size=1, max_size=5), st.integers(0, 99),
       st.sampled_from([1, 3, 4, 16]))
def test_ring_attention_property(c, chunks, seed, tile):
    sharded_equals_full([2 * c * m for m in chunks], c, seed=seed, tile=tile)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40), st.booleans()), min_size=1, max_size=4),
       st.integers(1, 9))
def test_step_plan_tiles_like_a_flash_kernel(blocks, tile):
    """Every (query, key) entry that counts is in exactly one tile pair, a
    tile never spans two blocks, every query tile and every key tile of a
    block pairs up except those wholly above a causal diagonal (a block of
    t tiles a side has t (t + 1) / 2 causal pairs), and every pair costs a
    full tile x tile product however few of its entries count."""
    spec, q0, k0 = [], 0, 0
    for nq, nk, causal in blocks:
        nk = nq if causal else nk
        spec.append((q0, k0, nq, nk, causal))
        q0, k0 = q0 + nq, k0 + nk
    sp = step_plan(spec, q0, tile)
    want = set()
    for bq, bk, nq, nk, causal in spec:
        want |= {(bq + i, bk + j) for i in range(nq) for j in range(nk) if not causal or j <= i}
    qrows = sp.qtok.view(-1, tile)
    krows = sp.ktok.view(-1, tile)
    got = [(int(qrows[p, i]), int(krows[p, j])) for p, i, j in sp.allowed.nonzero().tolist()]
    assert len(got) == len(set(got)) and set(got) == want
    tiles = lambda n: -(-n // tile)  # noqa: E731
    pairs = sum(tiles(nq) * (tiles(nq) + 1) // 2 if causal else tiles(nq) * tiles(nk) for _, _, nq, nk, causal in spec)
    assert sp.allowed.shape == (pairs, tile, tile) and sp.qtok.numel() == pairs * tile
    # Every local row is in one query tile; the pairs of a query tile are all the pairs naming it.
    assert sorted(sp.rows.tolist()) == sorted(set(sp.rows.tolist()))
    for t in range(sp.slots.shape[0]):
        mine = sorted(p for p in sp.slots[t].tolist() if p < pairs)
        assert mine == (sp.tile == t).nonzero().flatten().tolist()


def test_tile_below_one_is_refused():
    with pytest.raises(ValueError, match="tile: 0"):
        step_plan([(0, 0, 4, 4, True)], 4, 0)


def test_zigzag_index_is_packd_gpu_shard():
    gpu = pytest.importorskip("packd.gpu")
    lengths = [8, 24, 16, 40]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    for c in (1, 2, 4):
        for r in range(c):
            ours = zigzag_index(lengths, c, r).numpy()
            assert (np.asarray(gpu.cp_index_map(cu, cp=c, cp_rank=r, cp_algo="zigzag")) == ours).all()
    # Positions restart at 0 in every sequence.
    assert zigzag_positions([8, 4], 2, 1).tolist() == [2, 3, 4, 5, 1, 2]


def test_bad_lengths_name_the_entry():
    with pytest.raises(ValueError, match=r"lengths\[1\]: 6 is not a positive multiple of 2c = 4"):
        zigzag_index([8, 6], 2, 0)
    with pytest.raises(ValueError, match="c: 0"):
        zigzag_index([8], 0, 0)


def test_shard_timer_runs_every_rank():
    timer = ShardTimer(Config(vocab=32, hidden=16, heads=2, layers=1, mlp=32, dtype="float32"), 0)
    for key in [(1, 0, (12, 5)), (4, 0, (16, 8)), (4, 3, (16, 8)), timer.reference]:
        inp = timer.inputs(key)
        assert inp[1].shape[0] == sum(key[2]) // key[0]
        assert timer.run(inp) > 0
        # The peers' keys and values took gradients (the ring's backward).
        peers = [kv for layer in inp[4] for kv in layer if kv is not None]
        assert len(peers) == key[0] - 1 and all(kv[0].grad is not None for kv in peers)
