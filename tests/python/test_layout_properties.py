"""Property tests of packd.layout on random verl-style batches: random
left-padded prompts and right-padded responses (zero-length rows and
sequences shorter than 2*CP included), random micro-batch subsets in random
order, CP in {1, 2, 4, 8}, TP in {1, 2}, zigzag and Ulysses."""

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client" / "python"))

from packd import layout as L  # noqa: E402

CASES = list(itertools.product([1, 2, 4, 8], [1, 2], ["zigzag", "ulysses"]))


def random_batch(rng, max_rows=9, prompt_cols=None, resp_cols=None):
    """A verl-style padded batch: columns [0, P) prompt (left padded),
    [P, P+R) response (right padded)."""
    b = int(rng.integers(1, max_rows + 1))
    p_cols = int(prompt_cols or rng.integers(1, 12))
    r_cols = int(resp_cols or rng.integers(0, 20))
    mask = np.zeros((b, p_cols + r_cols), dtype=np.int64)
    for i in range(b):
        kind = rng.random()
        if kind < 0.15:
            continue  # a zero-length row
        if kind < 0.35:
            p, r = int(rng.integers(1, min(p_cols, 2) + 1)), int(rng.integers(0, min(r_cols, 2) + 1))
        else:
            p, r = int(rng.integers(1, p_cols + 1)), int(rng.integers(0, r_cols + 1))
        mask[i, p_cols - p : p_cols + r] = 1
    return mask


def random_micro(rng, mask, align):
    """A random subset of rows in random order, laid out by the formulas."""
    b = mask.shape[0]
    k = int(rng.integers(0, b + 1))
    seqs = rng.permutation(b)[:k]
    return L.make_micro(mask.sum(1)[seqs], align=align, seqs=seqs)


@pytest.mark.parametrize("cp,tp,algo", CASES)
def test_unpack_of_pack_is_identity_on_valid_tokens(cp, tp, algo):
    rng = np.random.default_rng(1000 * cp + 10 * tp + len(algo))
    for trial in range(40):
        mask = random_batch(rng)
        align = L.default_align(cp=cp, tp=tp, cp_algo=algo, sequence_parallel=bool(trial % 2))
        m = random_micro(rng, mask, align)
        width = [(), (3,), (2, 2)][trial % 3]
        x = rng.integers(1, 1 << 30, size=mask.shape + width).astype(np.int64)
        slices = [L.pack(x, mask, m, cp=cp, cp_rank=r, cp_algo=algo, tp=tp, fill=-5) for r in range(cp)]
        n_local = L.local_length(m, cp=cp, cp_algo=algo, tp=tp)
        assert all(s.shape == (n_local,) + width for s in slices)
        in_micro = np.zeros(mask.shape[0], dtype=bool)
        in_micro[m.seqs] = True
        expect = np.where((mask.astype(bool) & in_micro[:, None]).reshape(mask.shape + (1,) * len(width)), x, 0)
        # From all slices (list and all-gathered concatenation).
        assert np.array_equal(L.unpack(slices, mask, m, cp=cp, cp_algo=algo, tp=tp), expect)
        gathered = np.concatenate(slices, axis=0) if slices else slices
        assert np.array_equal(L.unpack(gathered, mask, m, cp=cp, cp_algo=algo, tp=tp), expect)
        assert np.array_equal(gathered, L.pack(x, mask, m, cp=cp, cp_algo=algo, tp=tp, fill=-5))
        # From local slices: each valid token is written by exactly one rank.
        locals_ = [L.unpack(s, mask, m, cp=cp, cp_rank=r, cp_algo=algo, tp=tp) for r, s in enumerate(slices)]
        written = sum((u != 0).astype(int) for u in locals_)
        assert written.max(initial=0) <= 1
        assert np.array_equal(sum(locals_), expect)
        # Every valid token was packed once; everything else is fill.
        total_valid = int(mask[m.seqs].sum())
        assert sum(int(np.count_nonzero(s != -5)) for s in slices) == total_valid * max(1, int(np.prod(width)))


@pytest.mark.parametrize("cp,tp,algo", CASES)
def test_rank_indices_partition_the_stream(cp, tp, algo):
    rng = np.random.default_rng(7 + cp + 100 * tp)
    for _ in range(40):
        lens = rng.integers(0, 3 * cp + 5, size=int(rng.integers(0, 12)))
        m = L.make_micro(lens, align=L.default_align(cp=cp, tp=tp, cp_algo=algo))
        parts = [L.partition_index(m, cp, r, algo, tp) for r in range(cp)]
        sizes = {p.size for p in parts}
        assert len(sizes) == 1
        allpos = np.sort(np.concatenate(parts))
        assert np.array_equal(allpos, np.arange(allpos.size))
        total = int(m.cu_seqlens_padded[-1])
        assert allpos.size >= total and allpos.size % (cp * (tp if algo == "ulysses" else 1)) == 0
        if algo == "zigzag":
            assert allpos.size == total
            # Local slots are cu_pad / CP on every rank, and each slot holds
            # only positions of its own sequence.
            cu_loc = m.cu_seqlens_padded // cp
            for p in parts:
                for k in range(lens.size):
                    sl = p[cu_loc[k] : cu_loc[k + 1]]
                    assert np.all((sl >= m.cu_seqlens_padded[k]) & (sl < m.cu_seqlens_padded[k + 1]))


@pytest.mark.parametrize("cp,tp,algo", CASES)
def test_local_real_cu_matches_brute_force_and_prefix(cp, tp, algo):
    rng = np.random.default_rng(99 + cp * tp)
    for _ in range(30):
        lens = rng.integers(0, 4 * cp + 3, size=int(rng.integers(0, 10)))
        m = L.make_micro(lens, align=L.default_align(cp=cp, tp=tp, cp_algo=algo))
        total = int(m.cu_seqlens_padded[-1])
        real = np.diff(m.cu_seqlens)
        plen = np.diff(m.cu_seqlens_padded)
        seq_of = np.repeat(np.arange(lens.size), plen)
        off = np.arange(total) - np.repeat(m.cu_seqlens_padded[:-1], plen)
        valid = off < real[seq_of] if total else np.zeros(0, bool)
        for r in range(cp):
            pos = L.partition_index(m, cp, r, algo, tp)
            cu_r, cu_p = L.local_cu_seqlens(m, cp, r, algo, tp)
            v = np.zeros(pos.size, dtype=bool)
            v[pos < total] = valid[pos[pos < total]]
            counts = [int(v[cu_p[k] : cu_p[k + 1]].sum()) for k in range(lens.size)]
            assert np.diff(cu_r).tolist() == counts
            if algo == "zigzag":
                # Back padding holds on every rank: valid tokens are a prefix.
                for k in range(lens.size):
                    sl = v[cu_p[k] : cu_p[k + 1]]
                    assert np.all(sl[: counts[k]]) and not np.any(sl[counts[k] :])


@pytest.mark.parametrize("cp,tp,algo", CASES)
def test_labels_never_cross_a_sequence_boundary(cp, tp, algo):
    rng = np.random.default_rng(5 * cp + tp)
    for _ in range(30):
        mask = random_batch(rng)
        m = random_micro(rng, mask, L.default_align(cp=cp, tp=tp, cp_algo=algo))
        b, s = mask.shape
        ids = np.arange(b * s).reshape(b, s) + 1000  # unique: the id names its cell
        src = L.source_index(mask, m)
        got_total = 0
        for r in range(cp):
            lab = L.labels(ids, mask, m, cp=cp, cp_rank=r, cp_algo=algo, tp=tp)
            own = L.pack(ids, mask, m, cp=cp, cp_rank=r, cp_algo=algo, tp=tp, fill=-1)
            has = lab != -100
            got_total += int(has.sum())
            # A label is the token right after its own token, in the same row
            # and inside that row's valid run.
            tgt = lab[has] - 1000
            assert np.all(own[has] >= 0)
            assert np.array_equal(tgt, own[has] - 1000 + 1)
            assert np.all(tgt // s == (own[has] - 1000) // s)
            assert np.all(mask.reshape(-1)[tgt] == 1)
            # Padding positions never carry a label.
            assert np.all(lab[own < 0] == -100)
        expect = int(np.maximum(mask[m.seqs].sum(1) - 1, 0).sum())
        assert got_total == expect
        assert src.size == int(m.cu_seqlens_padded[-1])


@pytest.mark.parametrize("cp,tp,algo", CASES)
def test_position_ids_styles(cp, tp, algo):
    rng = np.random.default_rng(3 * cp + 11 * tp)
    for _ in range(20):
        lens = rng.integers(0, 3 * cp + 4, size=int(rng.integers(1, 9)))
        m = L.make_micro(lens, align=L.default_align(cp=cp, tp=tp, cp_algo=algo))
        te = np.concatenate([L.position_ids(m, cp=cp, cp_rank=r, cp_algo=algo, tp=tp) for r in range(cp)])
        hf = np.concatenate([L.position_ids(m, style="hf", cp=cp, cp_rank=r, cp_algo=algo, tp=tp) for r in range(cp)])
        pos = np.concatenate([L.partition_index(m, cp, r, algo, tp) for r in range(cp)])
        full_te = np.empty_like(te)
        full_te[pos] = te
        full_hf = np.empty_like(hf)
        full_hf[pos] = hf
        total = int(m.cu_seqlens_padded[-1])
        plen = np.diff(m.cu_seqlens_padded)
        real = np.diff(m.cu_seqlens)
        expect_te = np.concatenate([np.arange(p) for p in plen] + [np.arange(full_te.size - total)])
        assert np.array_equal(full_te, expect_te)
        expect_hf = np.concatenate(
            [np.concatenate([np.arange(n), np.arange(p - n)]) for n, p in zip(real, plen)]
            + [np.arange(full_hf.size - total)]
        )
        assert np.array_equal(full_hf, expect_hf)


def test_pack_preserves_dtype_and_fill():
    rng = np.random.default_rng(3)
    mask = random_batch(rng, max_rows=6)
    m = random_micro(rng, mask, 4)
    for dt in (np.int8, np.float16, np.float32, np.int64, np.bool_):
        x = (rng.random(mask.shape) * 5).astype(dt)
        out = L.pack(x, mask, m, cp=2, cp_rank=1, fill=0)
        assert out.dtype == np.dtype(dt)


def test_rows_for_a_local_batch():
    """A worker's padded batch holds only its dispatched rows: rows= maps the
    micro-batch's global indices to local rows."""
    rng = np.random.default_rng(11)
    mask = random_batch(rng, max_rows=9)
    x = rng.normal(size=mask.shape)
    order = rng.permutation(mask.shape[0])
    local_mask, local_x = mask[order], x[order]
    m = L.make_micro(mask.sum(1)[order], align=4, seqs=order)
    a = L.pack(x, mask, m, cp=2, cp_rank=0)
    b = L.pack(local_x, local_mask, m, rows=np.arange(order.size), cp=2, cp_rank=0)
    assert np.array_equal(a, b)
