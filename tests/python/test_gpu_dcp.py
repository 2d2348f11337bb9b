"""packd.gpu for dynamic context parallelism, on torch tensors: a group's
stream (cp = the group size c, zigzag or contiguous, slots aligned to
2*c*tp or c*tp), its shards, restore to the samples' rows, verl's padding
mask (from lengths, and written by the pack kernel on the layout's device),
the group of a GPU in a Megatron-format slot, and the routing items. CPU
tensors run everywhere; the CUDA cases compare the CUDA backend with the
host byte for byte, inside a captured CUDA graph, and skip without a device.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "client" / "python"))

torch = pytest.importorskip(
    "torch", reason="torch is not installed (scripts/bootstrap.sh installs python3-torch)"
)

from packd import gpu  # noqa: E402

CUDA = torch.cuda.is_available() and gpu.available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device, or libpackd_gpu built without CUDA")


def oracle_mask(lengths, c, rank, tp, layout):
    """The padding mask of GPU rank of a group, from chunk geometry alone
    (True = padding): zigzag GPU r holds chunks r and 2c-1-r of each slot,
    contiguous GPU r holds the r-th of c equal parts of the stream."""
    a = tp * c * (2 if layout == "zigzag" and c > 1 else 1)
    plens = [-(-n // a) * a for n in lengths]
    if layout == "contiguous":
        real = np.zeros(sum(plens), dtype=bool)
        at = 0
        for n, p in zip(lengths, plens):
            real[at : at + n] = True
            at += p
        part = real.reshape(c, -1)[rank] if real.size else real
        return ~part
    out = []
    for n, p in zip(lengths, plens):
        if c == 1:
            out += [k >= n for k in range(p)]
            continue
        h = p // (2 * c)
        for first in (rank * h, (2 * c - 1 - rank) * h):
            out += [first + k >= n for k in range(h)]
    return np.array(out, dtype=bool)


groups = st.tuples(
    st.lists(st.integers(0, 50), min_size=0, max_size=7),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2]),
    st.sampled_from(["zigzag", "contiguous"]),
)


@settings(max_examples=150, deadline=None)
@given(groups)
def test_padding_mask_matches_oracle_and_counts_real_tokens(case):
    lengths, c, tp, layout = case
    cu, cu_pad = gpu.dcp_cu(lengths, c, tp=tp, cp_layout=layout)
    align = gpu.dcp_align(c, tp=tp, cp_layout=layout)
    assert np.all(np.diff(cu_pad) % align == 0)
    assert list(np.diff(cu)) == list(lengths)
    real = 0
    for r in range(c):
        m = gpu.dcp_padding_mask(lengths, c, r, tp=tp, cp_layout=layout)
        assert m.dtype == torch.bool and m.shape == (int(cu_pad[-1]) // c,)
        assert np.array_equal(m.numpy(), oracle_mask(lengths, c, r, tp, layout))
        with gpu.Layout(np.arange(len(lengths)), cu_pad, len(lengths), 64, cp=c, cp_algo=layout) as lay:
            k = lay.padding_mask(torch.tensor(lengths, dtype=torch.int32), cp_rank=r)
        assert torch.equal(k, m)
        real += int((~m).sum())
    assert real == sum(lengths)


@settings(max_examples=120, deadline=None)
@given(groups, st.integers(0, 2**31 - 1))
def test_shards_concatenate_to_the_group_stream_and_restore(case, seed):
    lengths, c, tp, layout = case
    g = np.random.default_rng(seed)
    n = len(lengths)
    b, s = n + 2, max(lengths, default=0) + 3
    rows = g.permutation(np.arange(1, n + 1)) if n else np.zeros(0, dtype=np.int64)
    ln = torch.zeros(b, dtype=torch.int32)
    start = torch.zeros(b, dtype=torch.int32)
    x = torch.zeros(b, s, 3, dtype=torch.float64)
    for i, row in enumerate(rows):
        ln[row] = lengths[i]
        start[row] = int(g.integers(0, s - lengths[i] + 1))
        x[row, start[row] : start[row] + lengths[i]] = torch.from_numpy(g.standard_normal((lengths[i], 3)))
    _, cu_pad = gpu.dcp_cu(lengths, c, tp=tp, cp_layout=layout)
    whole = gpu.pack(x, start, ln, rows, cu_pad, cp=1, fill=-1.0)
    shards = [gpu.pack(x, start, ln, rows, cu_pad, cp=c, cp_rank=r, cp_algo=layout, fill=-1.0) for r in range(c)]
    # Put back at the zigzag (or contiguous) positions: the padded group stream.
    back = torch.full_like(whole, float("nan"))
    for r in range(c):
        idx = torch.from_numpy(gpu.cp_index_map(cu_pad, cp=c, cp_rank=r, cp_algo=layout))
        back[idx] = shards[r]
    assert torch.equal(back, whole)
    if layout == "zigzag" and c > 1:
        # Explicitly: chunk q of every slot comes from GPU min(q, 2c-1-q).
        for i in range(n):
            h = (int(cu_pad[i + 1]) - int(cu_pad[i])) // (2 * c)
            for q in range(2 * c):
                r = min(q, 2 * c - 1 - q)
                off = int(cu_pad[i]) // c + (0 if q < c else h)
                assert torch.equal(shards[r][off : off + h], whole[int(cu_pad[i]) + q * h : int(cu_pad[i]) + (q + 1) * h])
    # restore . shard = identity on the samples' rows, 0 elsewhere in them.
    out = torch.full_like(x, 7.0)
    gpu.unpack(torch.cat(shards), start, ln, rows, cu_pad, out, cp=c, cp_algo=layout)
    for row in rows:
        assert torch.equal(out[row], x[row])
    assert torch.all(out[0] == 7.0), "rows outside the group are untouched"


def test_min_local_rows_grows_the_last_slot():
    cu, cu_pad = gpu.dcp_cu([3, 2], 2, cp_layout="zigzag", min_local_rows=10)
    assert list(cu_pad) == [0, 4, 20] and list(cu) == [0, 3, 5]
    m = gpu.dcp_padding_mask([3, 2], 2, 1, min_local_rows=10)
    assert m.shape == (10,) and int((~m).sum()) == oracle_real([3, 2], cu_pad, 2, 1)
    _, cu_pad = gpu.dcp_cu([3, 2], 2, min_local_rows=1)
    assert list(cu_pad) == [0, 4, 8], "a stream already long enough does not grow"


def oracle_real(lengths, cu_pad, c, rank):
    idx = gpu.cp_index_map(cu_pad, cp=c, cp_rank=rank)
    real = 0
    for gi in idx:
        i = int(np.searchsorted(cu_pad, gi, side="right")) - 1
        real += int(gi - cu_pad[i] < lengths[i])
    return real


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="group_size"):
        gpu.dcp_cu([3], 0)
    with pytest.raises(ValueError, match="cp_layout"):
        gpu.dcp_cu([3], 2, cp_layout="ring")
    with pytest.raises(ValueError, match="rank: expected 0..1, got 2"):
        gpu.dcp_padding_mask([3], 2, 2)
    with pytest.raises(gpu.GpuInvalidArgument, match=r"lengths\[0\] = 9"):
        gpu.dcp_padding_mask([9], 2, 0, cu_seqlens_padded=[0, 4])
    with pytest.raises(gpu.GpuInvalidArgument, match="2\\*cp = 4"):
        gpu.dcp_padding_mask([3, 1], 2, 0, cu_seqlens_padded=[0, 4, 6])


def test_dcp_group_in_a_megatron_slot():
    slot = [[0, 5], [0, 5], [1], [2, 3]]
    assert gpu.dcp_group(slot, 0) == ([0, 1], 0)
    assert gpu.dcp_group(slot, 1) == ([0, 1], 1)
    assert gpu.dcp_group(slot, 3) == ([3], 0)
    with pytest.raises(ValueError, match="not 2 consecutive ranks aligned to 2"):
        gpu.dcp_group([[1], [0], [0], [2]], 1)
    with pytest.raises(ValueError, match="not 2 consecutive ranks aligned to 2"):
        gpu.dcp_group([[0], [1], [0], [2]], 0)
    with pytest.raises(ValueError, match="empty sample list"):
        gpu.dcp_group([[0], []], 1)


def test_route_items_send_each_sample_to_every_gpu_of_its_group():
    # Samples 0..3 start on ranks 0,1 (rows 2,1,3,1); sample 2 goes to the
    # group {0, 1}, the others to one rank each.
    items = gpu.route_items([2, 1, 3, 1], [[0, 1], [2, 3]], [[2, 0], [2, 1, 3]])
    got = [(int(i["src_rank"]), int(i["dst_rank"]), int(i["src_row"]), int(i["dst_row"]), int(i["rows"])) for i in items]
    assert got == [(1, 0, 0, 0, 3), (0, 0, 0, 3, 2), (1, 1, 0, 0, 3), (0, 1, 2, 3, 1), (1, 1, 3, 4, 1)]
    with pytest.raises(gpu.GpuInvalidArgument, match="sequence 3: no destination"):
        gpu.route_items([1, 1, 1, 1], [[0, 1], [2, 3]], [[0, 1], [2]])
    with pytest.raises(ValueError, match="rows: expected 4 entries"):
        gpu.route_items([1, 1], [[0, 1], [2, 3]], [[0, 1], [2, 3]])


@needs_cuda
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("c", [1, 2, 4, 8])
def test_cuda_group_shards_and_mask_equal_host_in_a_graph(c, layout):
    lengths = [1, 0, 37, 5, 64, 3]
    n = len(lengths)
    b, s = n, 70
    _, cu_pad = gpu.dcp_cu(lengths, c, tp=2, cp_layout=layout)
    ln = torch.tensor(lengths, dtype=torch.int32)
    x = torch.randn(b, s, 96, dtype=torch.bfloat16)
    rows = [4, 2, 0, 5, 1, 3]
    lens_rows = torch.zeros(b, dtype=torch.int32)
    lens_rows[rows] = ln
    dln = lens_rows.cuda()
    xd = x.cuda()
    lay = gpu.Layout(rows, cu_pad, b, s, cp=c, cp_algo=layout, device=xd.device)
    outs = [torch.empty((lay.local_tokens, 96), dtype=x.dtype, device="cuda") for _ in range(c)]
    masks = [torch.empty((lay.local_tokens,), dtype=torch.bool, device="cuda") for _ in range(c)]
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for r in range(c):
            lay.pack(xd, None, dln, cp_rank=r, out=outs[r])
            lay.padding_mask(dln, cp_rank=r, out=masks[r])
    graph.replay()
    torch.cuda.synchronize()
    for r in range(c):
        host = gpu.pack(x, None, lens_rows, rows, cu_pad, cp=c, cp_rank=r, cp_algo=layout)
        assert torch.equal(outs[r].cpu().view(torch.uint8), host.view(torch.uint8))
        want = gpu.dcp_padding_mask(lengths, c, r, tp=2, cp_layout=layout)
        assert torch.equal(masks[r].cpu(), want)
    lay.close()
    gpu.check(torch.device("cuda"))


def test_exchange_over_torch_distributed_one_process(tmp_path):
    """route + exchange through TorchTransport on a 1-process gloo group:
    every move is a self copy; the result is the target assignment."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    try:
        tr = gpu.TorchTransport()
        rows = [2, 0, 3, 1]
        src = torch.arange(6 * 5, dtype=torch.float64).reshape(6, 5)
        items = gpu.route_items(rows, [[0, 1, 2, 3]], [[3, 2, 0, 1]])
        with pytest.raises(gpu.GpuInvalidArgument, match="sequence 1: no destination"):
            gpu.route_items(rows, [[0, 1, 2, 3]], [[3, 2, 0]])  # even with 0 rows, never dropped
        dst = torch.full((6, 5), -1.0, dtype=torch.float64)
        stats = gpu.exchange(items, src, dst, tr)
        assert torch.equal(dst, torch.cat([src[5:6], src[2:5], src[0:2]]))
        assert stats["sends"] == 0 and stats["copies"] >= 1
        with pytest.raises(ValueError, match="dst: 2 rows, the items write more"):
            gpu.exchange(items, src, torch.zeros(2, 5, dtype=torch.float64), tr)
        with pytest.raises(ValueError, match="rows of 32 bytes, src rows of 40"):
            gpu.exchange(items, src, torch.zeros(6, 4, dtype=torch.float64), tr)
    finally:
        dist.destroy_process_group()


def test_nccl_unavailable_is_named():
    if gpu.build_flags()["nccl"]:
        pytest.skip("this libpackd_gpu has NCCL")
    with pytest.raises(gpu.GpuUnavailable, match="NCCL"):
        gpu.nccl_unique_id()


needs_nccl = pytest.mark.skipif(not (CUDA and gpu.build_flags()["nccl"]), reason="no CUDA device or no NCCL")


@needs_nccl
def test_cuda_route_over_one_rank_nccl():
    tr = gpu.NcclTransport(1, gpu.nccl_unique_id(), 0, device=0)
    src = torch.randn(6, 33, device="cuda", dtype=torch.bfloat16)
    items = gpu.route_items([2, 1, 3], [[0, 1, 2]], [[2, 0, 1]])
    dst = torch.zeros(6, 33, device="cuda", dtype=torch.bfloat16)
    gpu.exchange(items, src, dst, tr)
    torch.cuda.synchronize()
    assert torch.equal(dst, torch.cat([src[3:6], src[0:2], src[2:3]]))
    tr.close()
