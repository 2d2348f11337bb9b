"""packd.gpu (ctypes binding of libpackd_gpu) on numpy arrays: the hand-worked
layouts of gpu/README.md (lengths [2,4,6,1], CP 2), a cross-check against packd.layout
(the independent numpy reference) on random layouts for every dtype, and the
argument errors. Needs the library: PACKD_GPU_LIB, or PACKD_BUILD_DIR with
gpu/libpackd_gpu.so (scripts/test.sh sets PACKD_BUILD_DIR)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "client" / "python"))

from packd import gpu  # noqa: E402
from packd import layout as L  # noqa: E402

VERL_MASK = np.array(
    [
        [0, 0, 0, 1, 1, 0, 0, 0],
        [0, 0, 1, 1, 1, 1, 0, 0],
        [0, 1, 1, 1, 1, 1, 1, 0],
        [0, 0, 0, 1, 0, 0, 0, 0],
    ],
    dtype=bool,
)
SEQS = [0, 1, 2, 3]
CU_PAD = [0, 4, 8, 16, 20]


@pytest.fixture(scope="module", autouse=True)
def library():
    try:
        return gpu.library_path()
    except OSError as exc:
        pytest.fail(f"libpackd_gpu.so is required for these tests: {exc}")


def test_build_flags_and_availability():
    flags = gpu.build_flags()
    assert set(flags) == {"cuda", "nccl", "version"}
    assert isinstance(gpu.available(), bool)
    if not flags["cuda"]:
        assert gpu.available() is False


def test_golden_61_verl_batch():
    start, length = gpu.spans(VERL_MASK)
    assert start.dtype == np.int32 and length.dtype == np.int32
    assert start.tolist() == [3, 2, 1, 3]
    assert length.tolist() == [2, 4, 6, 1]
    flat = np.arange(32, dtype=np.int64).reshape(4, 8)
    want = [[3, -1, 10, 13, 17, 18, -1, -1, 27, -1], [4, -1, 11, 12, 19, 20, 21, 22, -1, -1]]
    parts = []
    for r in range(2):
        got = gpu.pack(flat, start, length, SEQS, CU_PAD, cp=2, cp_rank=r, fill=-1)
        assert got.tolist() == want[r]
        parts.append(got)
    # RoPE positions (offset in the padded sequence), gpu.md 6.1.
    pos = [gpu.position_ids(length, SEQS, CU_PAD, cp=2, cp_rank=r) for r in range(2)]
    assert pos[0].tolist() == [0, 3, 0, 3, 0, 1, 6, 7, 0, 3]
    assert pos[1].tolist() == [1, 2, 1, 2, 2, 3, 4, 5, 1, 2]
    # Unpack of the gathered stream: flat index back on valid slots, 0 elsewhere.
    out = np.full((4, 8), 77, dtype=np.int64)
    gpu.unpack(np.concatenate(parts), start, length, SEQS, CU_PAD, out, cp=2)
    assert (out == np.where(VERL_MASK, flat, 0)).all()
    lab = gpu.labels(flat, start, length, SEQS, CU_PAD, cp=2, cp_rank=1)
    assert lab.tolist() == [-100, -100, 12, 13, 20, 21, 22, -100, -100, -100]


def test_golden_ulysses_and_index_maps():
    ids = np.array([[10, 11, 0, 0, 0, 0], [20, 21, 22, 23, 0, 0], [30, 31, 32, 33, 34, 35], [40, 0, 0, 0, 0, 0]])
    length = np.array([2, 4, 6, 1], dtype=np.int32)
    cu = [0, 2, 6, 12, 14]
    toks = [gpu.pack(ids, None, length, SEQS, cu, cp=2, cp_rank=r, cp_algo="ulysses") for r in range(2)]
    assert np.concatenate(toks).tolist() == [10, 11, 20, 21, 22, 23, 30, 31, 32, 33, 34, 35, 40, 0]
    pos = [gpu.position_ids(length, SEQS, cu, cp=2, cp_rank=r, cp_algo="ulysses", style="restart") for r in range(2)]
    assert np.concatenate(pos).tolist() == [0, 1, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0, 0]
    assert gpu.cp_index_map(CU_PAD, cp=2, cp_rank=0).tolist() == [0, 3, 4, 7, 8, 9, 14, 15, 16, 19]
    assert gpu.cp_index_map([0, 8, 16], cp=2, cp_rank=1).tolist() == [2, 3, 4, 5, 10, 11, 12, 13]
    cu_real, cu_pad = gpu.cu_from_lengths([2, 4, 6, 1], align=4)
    assert cu_real.tolist() == [0, 2, 6, 12, 13] and cu_pad.tolist() == CU_PAD


DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.float16, np.int32, np.float32, np.int64, np.float64]


def random_case(rng, cp, tp, algo):
    b = int(rng.integers(1, 9))
    s = int(rng.integers(1, 20))
    length = np.zeros(b, dtype=np.int32)
    start = np.zeros(b, dtype=np.int32)
    mask = np.zeros((b, s), dtype=np.int64)
    for i in range(b):
        kind = rng.integers(0, 4)
        n = 0 if kind == 0 else int(rng.integers(0, min(2 * cp, s) + 1)) if kind == 1 else int(rng.integers(0, s + 1))
        length[i] = n
        start[i] = int(rng.integers(0, s - n + 1))
        mask[i, start[i] : start[i] + n] = 1
    seqs = rng.permutation(b)[: int(rng.integers(0, b + 1))]
    align = L.default_align(cp=cp, tp=tp, cp_algo=algo)
    lens = length[seqs]
    plen = -(-lens // align) * align + align * (rng.integers(0, 4, size=lens.size) == 0)
    cu_pad = np.concatenate(([0], np.cumsum(plen))).astype(np.int64)
    micro = L.Micro(seqs.astype(np.int64), np.concatenate(([0], np.cumsum(lens))).astype(np.int64), cu_pad, int(plen.max()) if plen.size else 0)
    return mask, start, length, seqs, cu_pad, micro


@pytest.mark.parametrize("algo", ["zigzag", "ulysses"])
@pytest.mark.parametrize("cp", [1, 2, 4, 8])
@pytest.mark.parametrize("tp", [1, 2])
def test_matches_numpy_reference(algo, cp, tp):
    rng = np.random.default_rng(1000 * cp + 10 * tp + (algo == "ulysses"))
    for t in range(12):
        mask, start, length, seqs, cu_pad, micro = random_case(rng, cp, tp, algo)
        b, s = mask.shape
        dtype = DTYPES[t % len(DTYPES)]
        tail = [(), (3,), (2, 5)][t % 3]
        x = (rng.integers(1, 120, size=(b, s) + tail)).astype(dtype)
        st, ln = gpu.spans(mask)
        assert (st[ln > 0] == start[ln > 0]).all() and (ln == length).all()
        fill = 1 if dtype is np.bool_ else 7
        parts = []
        for r in range(cp):
            got = gpu.pack(x, st, ln, seqs, cu_pad, cp=cp, cp_rank=r, cp_algo=algo, fill=fill)
            want = L.pack(x, mask, micro, cp=cp, cp_rank=r, cp_algo=algo, fill=fill)
            assert got.dtype == x.dtype and got.shape == want.shape
            assert (got == want).all(), (t, r)
            parts.append(got)
            for style, ref in (("offset", "te"), ("restart", "hf")):
                p = gpu.position_ids(ln, seqs, cu_pad, cp=cp, cp_rank=r, cp_algo=algo, style=style)
                assert (p == L.position_ids(micro, style=ref, cp=cp, cp_rank=r, cp_algo=algo)).all()
            ids = x.reshape(b, s, -1)[:, :, 0].astype(np.int64)
            lab = gpu.labels(ids, st, ln, seqs, cu_pad, cp=cp, cp_rank=r, cp_algo=algo)
            assert (lab == L.labels(ids, mask, micro, cp=cp, cp_rank=r, cp_algo=algo)).all()
            # Rank-local unpack: only this rank's tokens come back.
            out = np.full(x.shape, 1, dtype=x.dtype)
            gpu.unpack(got, st, ln, seqs, cu_pad, out, cp=cp, cp_rank=r, cp_algo=algo)
            ref = L.unpack(got, mask, micro, cp=cp, cp_rank=r, cp_algo=algo)
            assert (out[seqs] == ref[seqs]).all()
        gathered = np.concatenate(parts)
        out = np.full(x.shape, 1, dtype=x.dtype)
        gpu.unpack(gathered, st, ln, seqs, cu_pad, out, cp=cp, cp_algo=algo)
        listed = np.zeros(b, dtype=bool)
        listed[seqs] = True
        valid = mask.astype(bool).reshape((b, s) + (1,) * len(tail))
        assert (out[listed] == np.where(valid, x, 0)[listed]).all()
        assert (out[~listed] == 1).all()  # Rows outside the micro-batch untouched.


def test_pack_many_equals_single_calls():
    rng = np.random.default_rng(7)
    mask, start, length, seqs, cu_pad, micro = random_case(rng, 2, 1, "zigzag")
    b, s = mask.shape
    st, ln = gpu.spans(mask)
    ids = rng.integers(0, 1000, size=(b, s)).astype(np.int64)
    hid = rng.standard_normal((b, s, 5)).astype(np.float32)
    with gpu.Layout(seqs, cu_pad, b, s, cp=2) as lay:
        outs = lay.pack_many(
            [("copy", ids, 0), ("labels", ids, -100), ("positions", "offset", ln, np.int64), ("valid", ln, np.uint8), ("copy", hid, 0.5)],
            st,
            ln,
            cp_rank=1,
        )
        assert (outs[0] == lay.pack(ids, st, ln, cp_rank=1)).all()
        assert (outs[1] == lay.labels(ids, st, ln, cp_rank=1)).all()
        assert (outs[2] == lay.position_ids(ln, cp_rank=1)).all()
        assert (outs[4] == lay.pack(hid, st, ln, cp_rank=1, fill=0.5)).all()
        cu_r, _ = L.local_cu_seqlens(micro, cp=2, cp_rank=1)
        assert int(outs[3].sum()) == int(cu_r[-1])


def test_out_argument_is_used():
    flat = np.arange(32, dtype=np.int64).reshape(4, 8)
    start, length = gpu.spans(VERL_MASK)
    out = np.empty(10, dtype=np.int64)
    res = gpu.pack(flat, start, length, SEQS, CU_PAD, cp=2, cp_rank=0, out=out)
    assert res is out and out[0] == 3
    with pytest.raises(ValueError, match=r"out: expected shape \[10\]"):
        gpu.pack(flat, start, length, SEQS, CU_PAD, cp=2, out=np.empty(9, dtype=np.int64))
    with pytest.raises(TypeError, match="out: expected dtype int64"):
        gpu.pack(flat, start, length, SEQS, CU_PAD, cp=2, out=np.empty(10, dtype=np.int32))


def test_argument_errors_name_the_field():
    flat = np.arange(32, dtype=np.int64).reshape(4, 8)
    start, length = gpu.spans(VERL_MASK)
    with pytest.raises(gpu.GpuInvalidArgument, match=r"slot of 6 tokens is not a multiple of 2\*cp = 4"):
        gpu.pack(flat, start, length, SEQS, [0, 4, 10, 16, 20], cp=2)
    with pytest.raises(ValueError, match="cp_rank: expected 0..1, got 2"):
        gpu.pack(flat, start, length, SEQS, CU_PAD, cp=2, cp_rank=2)
    with pytest.raises(ValueError, match="C-contiguous"):
        gpu.pack(np.asfortranarray(flat), start, length, SEQS, CU_PAD, cp=2)
    with pytest.raises(gpu.GpuInvalidArgument, match="seqs\\[1\\] = 0: row listed twice"):
        gpu.pack(flat, start, length, [0, 0, 2, 3], CU_PAD, cp=2)
    with pytest.raises(ValueError, match="cu_seqlens_padded: expected len\\(seqs\\)\\+1 = 5"):
        gpu.pack(flat, start, length, SEQS, [0, 4, 8], cp=2)
    with pytest.raises(ValueError, match="cp_algo"):
        gpu.pack(flat, start, length, SEQS, CU_PAD, cp=2, cp_algo="ring")
    with pytest.raises(ValueError, match=r"length: expected shape \(4,\)"):
        gpu.pack(flat, start, length[:3], SEQS, CU_PAD, cp=2)
    with pytest.raises(TypeError, match="x: expected a numpy array or torch tensor"):
        gpu.pack(flat.tolist(), start, length, SEQS, CU_PAD, cp=2)
    with pytest.raises(TypeError, match="mask: expected a bool or integer dtype"):
        gpu.spans(VERL_MASK.astype(np.float32))
    with pytest.raises(ValueError, match="style"):
        gpu.position_ids(length, SEQS, CU_PAD, style="rope")
    with pytest.raises(TypeError, match="element size 16"):
        gpu.pack(np.zeros((4, 8), dtype=np.complex128), start, length, SEQS, CU_PAD, cp=2)


def test_bad_data_raises_and_row_is_empty():
    flat = np.arange(1, 33, dtype=np.int64).reshape(4, 8)
    length = np.array([2, 5, 6, 1], dtype=np.int32)  # Row 1 does not fit its slot of 4.
    with pytest.raises(gpu.GpuInvalidArgument, match=r"length\[1\] = 5"):
        gpu.pack(flat, None, length, SEQS, CU_PAD, cp=2)
    hole = VERL_MASK.copy()
    hole[2, 3] = False
    with pytest.raises(gpu.GpuInvalidArgument, match="mask row 2: valid columns are not one contiguous run"):
        gpu.spans(hole)
    gpu.check()  # Host backend: nothing left to report.


def test_library_lookup_error_is_clear(tmp_path):
    env = dict(os.environ, PACKD_GPU_LIB=str(tmp_path / "missing.so"))
    code = "import sys; sys.path.insert(0, %r); from packd import gpu; gpu.build_flags()" % str(ROOT / "client" / "python")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode != 0
    assert "libpackd_gpu.so not found" in res.stderr and "missing.so" in res.stderr
