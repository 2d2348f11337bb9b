"""packd.gpu on torch tensors: CPU tensors (host backend, every dtype
including bfloat16) against the numpy path, and, where a CUDA device exists,
the CUDA backend against the host backend byte for byte, on the current
stream, inside a captured CUDA graph (no host synchronisation).

torch is optional for packd's users; scripts/bootstrap.sh installs Debian's
python3-torch (a CPU build) so that CI runs the CPU tests here. Elsewhere
they skip with that reason when `import torch` fails; the numpy coverage in
test_gpu_binding.py is complete on its own."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "client" / "python"))

torch = pytest.importorskip(
    "torch", reason="torch is not installed (scripts/bootstrap.sh installs python3-torch)"
)

from packd import gpu  # noqa: E402

CUDA = torch.cuda.is_available() and gpu.available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device, or libpackd_gpu built without CUDA")

DTYPES = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.bfloat16, torch.float16,
          torch.int32, torch.float32, torch.int64, torch.float64]


def case(seed, cp=2, algo="zigzag"):
    g = np.random.default_rng(seed)
    b, s = int(g.integers(1, 9)), int(g.integers(1, 40))
    length = g.integers(0, s + 1, size=b).astype(np.int32)
    start = np.array([g.integers(0, s - n + 1) for n in length], dtype=np.int32)
    mask = np.zeros((b, s), dtype=bool)
    for i in range(b):
        mask[i, start[i] : start[i] + length[i]] = True
    seqs = g.permutation(b)[: int(g.integers(0, b + 1))]
    a = 2 * cp if (cp > 1 and algo == "zigzag") else cp
    plen = -(-length[seqs] // a) * a
    cu = np.concatenate(([0], np.cumsum(plen))).astype(np.int64)
    return mask, seqs, cu


def rand_tensor(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(1, 100, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_tensors_match_numpy(dtype):
    for seed in range(6):
        mask, seqs, cu = case(seed)
        b, s = mask.shape
        x = rand_tensor((b, s, 3), dtype, seed)
        st, ln = gpu.spans(torch.from_numpy(mask))
        assert st.dtype == torch.int32 and isinstance(st, torch.Tensor)
        for r in range(2):
            got = gpu.pack(x, st, ln, seqs, cu, cp=2, cp_rank=r, fill=1)
            assert got.dtype == dtype and got.shape[1:] == (3,)
            # Same bytes as the numpy path on the raw bits.
            bits = x.view(torch.uint8).numpy() if x.element_size() == 1 else x.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]).numpy()
            fill = np.frombuffer(torch.tensor([1], dtype=dtype).view(torch.uint8).numpy().tobytes(), dtype=bits.dtype)[0]
            ref = gpu.pack(bits, st.numpy(), ln.numpy(), seqs, cu, cp=2, cp_rank=r, fill=fill)
            assert got.view(torch.uint8).numpy().tobytes() == ref.tobytes()


def test_cuda_tensor_plan_data_must_be_host():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    with pytest.raises(TypeError, match="seqs: must be host data"):
        gpu.Layout(torch.zeros(1, dtype=torch.int32, device="cuda"), [0, 2], 1, 4)


@needs_cuda
@pytest.mark.parametrize("algo", ["zigzag", "ulysses"])
@pytest.mark.parametrize("cp", [1, 2, 4, 8])
def test_cuda_equals_host(cp, algo):
    for seed in range(8):
        mask, seqs, cu = case(100 * cp + seed, cp, algo)
        b, s = mask.shape
        dtype = DTYPES[seed % len(DTYPES)]
        x = rand_tensor((b, s, 1 + seed * 37 % 300), dtype, seed)
        st, ln = gpu.spans(torch.from_numpy(mask))
        dst, dln = gpu.spans(torch.from_numpy(mask).cuda())
        assert torch.equal(dst.cpu()[ln > 0], st[ln > 0]) and torch.equal(dln.cpu(), ln)
        parts = []
        for r in range(cp):
            h = gpu.pack(x, st, ln, seqs, cu, cp=cp, cp_rank=r, cp_algo=algo, fill=0)
            d = gpu.pack(x.cuda(), dst, dln, seqs, cu, cp=cp, cp_rank=r, cp_algo=algo, fill=0)
            assert d.is_cuda and torch.equal(d.cpu().view(torch.uint8), h.view(torch.uint8))
            for style in ("offset", "restart"):
                hp = gpu.position_ids(ln, seqs, cu, cp=cp, cp_rank=r, cp_algo=algo, style=style)
                dp = gpu.position_ids(dln, seqs, cu, cp=cp, cp_rank=r, cp_algo=algo, style=style)
                assert torch.equal(dp.cpu(), hp)
            ids = torch.randint(0, 1000, (b, s), dtype=torch.int64)
            assert torch.equal(
                gpu.labels(ids.cuda(), dst, dln, seqs, cu, cp=cp, cp_rank=r, cp_algo=algo).cpu(),
                gpu.labels(ids, st, ln, seqs, cu, cp=cp, cp_rank=r, cp_algo=algo),
            )
            parts.append(d)
        poison = torch.full(x.shape, 1, dtype=dtype)
        hout = gpu.unpack(torch.cat([p.cpu() for p in parts]), st, ln, seqs, cu, poison.clone(), cp=cp, cp_algo=algo)
        dout = gpu.unpack(torch.cat(parts), dst, dln, seqs, cu, poison.cuda(), cp=cp, cp_algo=algo)
        assert torch.equal(dout.cpu().view(torch.uint8), hout.view(torch.uint8))
    gpu.check(torch.device("cuda"))


@needs_cuda
def test_cuda_bad_span_reported_by_check():
    x = torch.arange(12, dtype=torch.int64, device="cuda").reshape(2, 6)
    ln = torch.tensor([3, 5], dtype=torch.int32, device="cuda")
    gpu.pack(x, None, ln, [0, 1], [0, 4, 8])  # Asynchronous: returns.
    with pytest.raises(gpu.GpuInvalidArgument, match=r"length\[1\] = 5"):
        gpu.check(torch.device("cuda"))


@needs_cuda
def test_cuda_graph_capture_has_no_host_sync():
    mask, seqs, cu = case(3, 2)
    b, s = mask.shape
    x = torch.randn(b, s, 64, device="cuda", dtype=torch.bfloat16)
    st, ln = gpu.spans(torch.from_numpy(mask).cuda())
    lay = gpu.Layout(seqs, cu, b, s, cp=2, device=x.device)
    out = torch.empty((lay.local_tokens, 64), dtype=x.dtype, device="cuda")
    back = torch.zeros_like(x)
    gathered = torch.empty((lay.tokens, 64), dtype=x.dtype, device="cuda")
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        lay.pack(x, st, ln, cp_rank=0, out=out)
        lay.unpack(gathered, st, ln, back)
    graph.replay()
    torch.cuda.synchronize()
    ref = gpu.pack(x, st, ln, seqs, cu, cp=2, cp_rank=0)
    assert torch.equal(out, ref)
    lay.close()
