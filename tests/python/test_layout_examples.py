"""packd.layout against hand-worked examples (the zigzag and Ulysses layouts
of gpu/README.md, lengths [2,4,6,1] with CP 2, and a verl-style padded batch)
and flash-attn's unpad/pad semantics (valid tokens gathered row by row, zeros
written back everywhere else)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client" / "python"))

from packd import layout as L  # noqa: E402


def verl_batch():
    """gpu.md 6.2: P=4 prompt columns, R=4 response columns, rows
    (prompt, response) = (1,1), (2,2), (3,3), (1,0)."""
    p, r = [1, 2, 3, 1], [1, 2, 3, 0]
    mask = np.zeros((4, 8), dtype=np.int64)
    for i in range(4):
        mask[i, 4 - p[i] : 4 + r[i]] = 1
    return mask


def test_61_cu_and_rank_indices():
    m = L.make_micro([2, 4, 6, 1], align=L.default_align(cp=2))
    assert L.default_align(cp=2) == 4
    assert m.cu_seqlens.tolist() == [0, 2, 6, 12, 13]
    assert m.cu_seqlens_padded.tolist() == [0, 4, 8, 16, 20]
    assert L.local_length(m, cp=2) == 10
    assert L.partition_index(m, 2, 0).tolist() == [0, 3, 4, 7, 8, 9, 14, 15, 16, 19]
    assert L.partition_index(m, 2, 1).tolist() == [1, 2, 5, 6, 10, 11, 12, 13, 17, 18]


def test_61_per_rank_real_cu_and_rope_positions():
    m = L.make_micro([2, 4, 6, 1], align=4)
    cu0, pad0 = L.local_cu_seqlens(m, 2, 0)
    cu1, pad1 = L.local_cu_seqlens(m, 2, 1)
    assert cu0.tolist() == [0, 1, 3, 5, 6]
    assert cu1.tolist() == [0, 1, 3, 7, 7]
    assert pad0.tolist() == pad1.tolist() == [0, 2, 4, 8, 10]
    assert L.position_ids(m, cp=2, cp_rank=0).tolist() == [0, 3, 0, 3, 0, 1, 6, 7, 0, 3]
    assert L.position_ids(m, cp=2, cp_rank=1).tolist() == [1, 2, 1, 2, 2, 3, 4, 5, 1, 2]


def test_61_tp2_alignment():
    assert L.default_align(cp=2, tp=2) == 8
    m = L.make_micro([2, 4, 6, 1], align=8)
    assert m.cu_seqlens_padded.tolist() == [0, 8, 16, 24, 32]
    assert (np.diff(m.cu_seqlens_padded) // 4).tolist() == [2, 2, 2, 2]


def test_62_verl_batch_gather_map():
    mask = verl_batch()
    start, length = L.valid_runs(mask)
    assert start.tolist() == [3, 2, 1, 3]
    assert length.tolist() == [2, 4, 6, 1]
    m = L.make_micro(length, align=4)
    src = L.source_index(mask, m)
    assert src[src >= 0].tolist() == [3, 4, 10, 11, 12, 13, 17, 18, 19, 20, 21, 22, 27]
    flat = np.arange(32).reshape(4, 8)
    r0 = L.pack(flat, mask, m, cp=2, cp_rank=0, fill=-1)
    r1 = L.pack(flat, mask, m, cp=2, cp_rank=1, fill=-1)
    assert r0.tolist() == [3, -1, 10, 13, 17, 18, -1, -1, 27, -1]
    assert r1.tolist() == [4, -1, 11, 12, 19, 20, 21, 22, -1, -1]


def test_62_unpack_check_row2_t4():
    """gpu.md 6.2 'unpack check': row 2, t=4 lives on rank 1 at local 6 and
    came from flat source 21."""
    mask = verl_batch()
    m = L.make_micro([2, 4, 6, 1], align=4)
    g = [np.full(10, -7.0), np.full(10, -7.0)]
    g[1][6] = 42.0
    out = L.unpack(g, mask, m, cp=2)
    assert out[2, 1 + 4] == 42.0
    assert out.reshape(-1)[21] == 42.0
    # All other valid slots got -7 from the slices; invalid slots got 0.
    valid = mask.astype(bool)
    assert np.count_nonzero(out[valid] == -7.0) == 12
    assert np.all(out[~valid] == 0)


def test_62_response_logprob_window():
    """Next-token labels of row 2 (prompt 3, response 3): built per sequence,
    the last token has none."""
    mask = verl_batch()
    ids = np.arange(100, 132).reshape(4, 8)
    m = L.make_micro([2, 4, 6, 1], align=4)
    lab = L.labels(ids, mask, m)
    # Slot of row 2 is [8, 16): tokens at columns 1..6, labels = next column.
    assert lab[8:16].tolist() == [118, 119, 120, 121, 122, -100, -100, -100]
    # Row 3 has one token: no label at all.
    assert lab[16:20].tolist() == [-100] * 4
    # Response-only loss mask (columns >= 4): prompt targets are dropped.
    resp = np.zeros_like(mask)
    resp[:, 4:] = 1
    lab_r = L.labels(ids, mask, m, loss_mask=resp)
    assert lab_r[8:16].tolist() == [-100, -100, 120, 121, 122, -100, -100, -100]


def test_63_ulysses_sp2():
    """gpu.md 6.3: the 13 packed tokens padded to 14, contiguous shards of 7,
    tail pad positions 0.."""
    mask = verl_batch()
    m = L.make_micro([2, 4, 6, 1], align=1)
    assert L.local_length(m, cp=2, cp_algo="ulysses") == 7
    assert L.partition_index(m, 2, 0, "ulysses").tolist() == list(range(0, 7))
    assert L.partition_index(m, 2, 1, "ulysses").tolist() == list(range(7, 14))
    ids = np.arange(1, 33).reshape(4, 8)
    r1 = L.pack(ids, mask, m, cp=2, cp_rank=1, cp_algo="ulysses")
    assert r1[-1] == 0  # the tail pad
    pos = L.position_ids(m, cp=2, cp_rank=1, cp_algo="ulysses", style="hf")
    assert pos[-1] == 0
    both = L.pack(ids, mask, m, cp=2, cp_algo="ulysses")
    assert both[:13].tolist() == ids[mask.astype(bool)].tolist()


def test_flash_attn_unpad_semantics():
    """With CP=1 and A=1 the packed stream is the row-major boolean selection
    of the mask (flash-attn unpad_input), and unpack is pad_input (0 fill)."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        b, s = rng.integers(1, 7), rng.integers(1, 20)
        mask = np.zeros((b, s), dtype=bool)
        for i in range(b):
            n = rng.integers(0, s + 1)
            st = rng.integers(0, s - n + 1)
            mask[i, st : st + n] = True
        x = rng.normal(size=(b, s, 3))
        m = L.make_micro(mask.sum(1), align=1)
        packed = L.pack(x, mask, m)
        assert np.array_equal(packed, x[mask])
        back = L.unpack(packed, mask, m)
        assert np.array_equal(back, np.where(mask[..., None], x, 0.0))


def test_hf_positions_zero_exactly_at_starts_and_pad_runs():
    m = L.make_micro([2, 4, 6, 1, 0, 3], align=4)
    pos = L.position_ids(m, style="hf")
    real = np.diff(m.cu_seqlens)
    starts = set(m.cu_seqlens_padded[:-1][real > 0].tolist())
    pad_starts = set((m.cu_seqlens_padded[:-1] + real)[real < np.diff(m.cu_seqlens_padded)].tolist())
    assert set(np.flatnonzero(pos == 0).tolist()) == starts | pad_starts


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(cp=2, cp_rank=2), "cp_rank"),
        (dict(cp=0), "cp: must be >= 1"),
        (dict(cp=2, cp_algo="ring"), "cp_algo"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, message):
    m = L.make_micro([4, 4], align=4)
    with pytest.raises(ValueError, match=message):
        L.position_ids(m, **kwargs)


def test_zigzag_needs_2cp_multiple():
    m = L.make_micro([3, 5], align=2)
    with pytest.raises(ValueError, match=r"sequence 0 \(seqs\[0\]=0\): padded length 4 is not a multiple of 2\*CP=8"):
        L.partition_index(m, 4, 0)


def test_mask_errors_name_the_row():
    mask = np.array([[1, 1, 0], [1, 0, 1]])
    with pytest.raises(ValueError, match="attention_mask row 1"):
        L.valid_runs(mask)
    good = np.array([[1, 1, 0], [0, 1, 1]])
    with pytest.raises(ValueError, match=r"sequence 1 \(row 1\).*2 valid tokens but cu_seqlens says 3"):
        L.source_index(good, L.make_micro([2, 3]))
    with pytest.raises(ValueError, match=r"seqs\[0\]=5 is not a row"):
        L.source_index(good, L.make_micro([2], seqs=[5]))


def test_micro_from_protobuf_json_mapping():
    d = {"seqs": [3, 1], "cuSeqlens": [0, 2, 5], "cuSeqlensPadded": [0, 4, 8], "maxSeqlen": 4}
    m = L.as_micro(d)
    assert m.seqs.tolist() == [3, 1] and m.cu_seqlens_padded.tolist() == [0, 4, 8]
    with pytest.raises(ValueError, match="real length 5 exceeds its padded slot 4"):
        L.as_micro({"seqs": [0], "cu_seqlens": [0, 5], "cu_seqlens_padded": [0, 4]})
