"""packd.verl.patch() on every verl release the peer venv holds (the one
in requirements-verl.txt and the older ones of versions-verl.txt, each in
its own interpreter): it replaces exactly the names that release defines,
names the others in one warning, and verl's own prepare_dynamic_batch then
plans with packd. A verl with none of the names fails (the fake-package
tests in tests/python cover that)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import packd.verl

VERSIONS = Path(sys.prefix) / "versions"
RELEASES = sorted(p for p in VERSIONS.glob("verl-*")) if VERSIONS.is_dir() else []

PROBE = r"""
import json, logging, sys
import numpy as np, torch
records = []
class Keep(logging.Handler):
    def emit(self, r): records.append((r.levelname, r.getMessage()))
logging.getLogger("packd").addHandler(Keep()); logging.getLogger("packd").setLevel(logging.INFO)
import verl.utils.seqlen_balancing as sb
from verl import DataProto
import packd.verl
defined = [n for n in packd.verl._VERL_TARGETS if hasattr(sb, n)]
import importlib.util
has_dcp = importlib.util.find_spec(packd.verl._VERL_DCP_MODULE) is not None
handle = packd.verl.patch()
again = packd.verl.patch()
mask = (torch.arange(100)[None, :] < torch.tensor([90, 80, 70, 60, 50, 40, 30, 20])[:, None]).long()
data = DataProto.from_dict({"attention_mask": mask, "input_ids": mask})
micro, idx = sb.prepare_dynamic_batch(data, max_token_len=150)
print(json.dumps({"version": __import__("verl").__version__, "defined": defined, "replaced": handle.replaced,
                  "skipped": handle.skipped, "has_dcp": has_dcp, "same": again is handle, "records": records,
                  "parts": idx, "micro_type": type(micro[0]).__name__}))
"""


def _probe(path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path) if path else "", str(Path(packd.__file__).parents[1]))
                                        if p)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("path", [None] + RELEASES, ids=lambda p: "installed" if p is None else p.name)
def test_patch_on_each_release(path):
    got = _probe(path)
    if path is not None:
        assert got["version"] == path.name.split("-", 1)[1]
    module = "verl.utils.seqlen_balancing."
    own = [r[len(module):] for r in got["replaced"] if r.startswith(module)]
    assert own == got["defined"], "exactly the names this release defines"
    dcp = [f"{packd.verl._VERL_DCP_MODULE}.{n}" for n in packd.verl._VERL_DCP_TARGETS]
    # Releases before 0.9 have no dynamic CP: its scheduler hook is skipped.
    assert all(d in got["replaced"] for d in dcp) == got["has_dcp"]
    assert got["skipped"] == [module + n for n in packd.verl._VERL_TARGETS if n not in got["defined"]] + (
        [] if got["has_dcp"] else dcp
    )
    warnings = [m for level, m in got["records"] if level == "WARNING"]
    assert len(warnings) == (1 if got["skipped"] else 0)
    assert sum("replaced" in m for _, m in got["records"]) == 1 and got["same"]
    lengths = [90, 80, 70, 60, 50, 40, 30, 20]
    parts = got["parts"]
    assert sorted(i for p in parts for i in p) == list(range(8))
    assert all(sum(lengths[i] for i in p) <= 150 for p in parts) and len(parts) == 3
    assert got["micro_type"] == "DataProto"


def test_the_venv_holds_the_releases_env_sh_installs():
    pins = [line.split("#")[0].strip() for line in (Path(__file__).parent / "versions-verl.txt").read_text().splitlines()]
    want = sorted(p.replace("==", "-") for p in pins if p)
    assert [p.name for p in RELEASES] == want
