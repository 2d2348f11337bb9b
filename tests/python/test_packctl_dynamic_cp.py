"""packctl plan with dynamic context parallelism: the flags reach
parallel.dynamic_cp and the CP cost terms, the summary names the group sizes
of every slot, the JSON is the PlanResponse with dynamic_cp, the SVG draws a
span per group, and bad values exit 2 (flag and value named) while a
sequence that fits no group exits 1 naming it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from codec_helpers import pb2, run_packctl

LENGTHS = [30000, 12000, 9000, 7000, 5000, 4000, 3000, 2500, 2000, 1500, 1200, 800]
COMMON = ["--dp", "4", "--cp", "2", "--max-tokens", "8192", "--cp-token", "0.25",
          "--cp-group", "100"]


@pytest.fixture
def lengths_file(tmp_path):
    path = tmp_path / "lengths.txt"
    path.write_text("".join(f"{n}\n" for n in LENGTHS))
    return path


def ok(res) -> str:
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout.decode()


def test_flags_reach_the_request(tmp_path, lengths_file):
    out = tmp_path / "req.bin"
    ok(run_packctl("plan", "--dry-run", "--save-request", out, *COMMON, "--dcp-sizes", "any",
                   "--dcp-min-size", "2", "--dcp-algo", "megatron", lengths_file))
    req = pb2().PlanRequest.FromString(out.read_bytes())
    d = req.parallel.dynamic_cp
    assert (d.sizes, d.min_size, d.algo) == (1, 2, 1)
    ok(run_packctl("plan", "--dry-run", "--save-request", out, "--dp", "4", "--dcp-algo",
                   "megatron_packing", lengths_file))
    assert pb2().PlanRequest.FromString(out.read_bytes()).parallel.dynamic_cp.algo == 2
    assert (req.cost.cp_token, req.cost.cp_group) == (0.25, 100)
    ok(run_packctl("plan", "--dry-run", "--save-request", out, "--dp", "4", "--dynamic-cp",
                   lengths_file))
    req = pb2().PlanRequest.FromString(out.read_bytes())
    assert req.parallel.HasField("dynamic_cp") and not req.parallel.dynamic_cp.ListFields()
    ok(run_packctl("plan", "--dry-run", "--save-request", out, "--dp", "4", lengths_file))
    assert not pb2().PlanRequest.FromString(out.read_bytes()).parallel.HasField("dynamic_cp")


def test_summary_json_and_svg(tmp_path, lengths_file):
    text = ok(run_packctl("plan", "--local", "--dynamic-cp", *COMMON, lengths_file))
    assert "(dynamic CP)" in text and "a pool of 8 GPUs, 2 slots" in text
    assert "  4 2 2\n" in text and "  4 1 1 2\n" in text
    assert "step cost               26003.1 (lower bound 22580.3)" in text
    resp_path = tmp_path / "resp.bin"
    ok(run_packctl("plan", "--local", "--dynamic-cp", *COMMON, "--format", "json",
                   "--save-response", resp_path, lengths_file))
    resp = pb2().PlanResponse.FromString(resp_path.read_bytes())
    assert [[g.size for g in s.groups] for s in resp.dynamic_cp.slots] == [[4, 2, 2], [4, 1, 1, 2]]
    svg = ok(run_packctl("plan", "--local", "--dynamic-cp", *COMMON, "--format", "svg",
                         lengths_file))
    root = ET.fromstring(svg)
    rects = [e for e in root.iter() if e.tag.endswith("rect")]
    assert len(rects) == 7  # one span per group: 1 in slot 0, 6 in slot 1


def test_errors(lengths_file):
    res = run_packctl("plan", "--local", *COMMON, "--dcp-sizes", "odd", lengths_file)
    assert res.returncode == 2 and b"--dcp-sizes: unknown value 'odd'" in res.stderr
    res = run_packctl("plan", "--local", "--dp", "2", "--max-tokens", "8192", "--dynamic-cp",
                      lengths_file)
    assert res.returncode == 1 and b"lengths[0]: 30000" in res.stderr
