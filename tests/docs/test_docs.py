"""Executed documentation: every shell, Python and transcript block of the
documents in docrun.DOCUMENTS runs, in document order, in a fresh
temporary folder against the build in PACKD_BUILD_DIR (default build/), and
every output a document shows must be what the commands print now (times,
timestamps and paths normalised). The conventions are in
tests/docs/README.md. A document that drifted fails with a diff and the
command that refreshes it (scripts/make-docs.sh)."""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "client" / "python"))
os.environ.setdefault("PACKD_BUILD_DIR", str(REPO / "build"))

import docrun  # noqa: E402

SKIPPED = []  # (where, reason), reported at the end of the run (conftest.py).


@pytest.mark.parametrize("document", docrun.DOCUMENTS)
def test_document_runs_and_shows_what_it_prints(document):
    lines = []
    results = docrun.Runner(document, Path(os.environ["PACKD_BUILD_DIR"]), log=lines.append).run()
    docrun.discard(results)
    for r in results:
        if r.status == "skipped":
            SKIPPED.append((r.block.where(), r.message))
    failed = [r for r in results if r.status == "failed"]
    ran = [r for r in results if r.status == "ok"]
    print("\n".join(lines))
    if failed:
        pytest.fail("\n\n".join(r.message for r in failed), pytrace=False)
    assert ran or document.endswith("README.md"), f"{document}: no block ran"


def test_every_document_has_a_block_that_runs():
    """A document whose blocks are all skipped tests nothing: each listed
    document has at least one block that runs."""
    for document in docrun.DOCUMENTS:
        blocks = docrun.parse(REPO / document, document)
        runnable = [b for b in blocks if b.kind != "listing" and not b.markers.get("skip")]
        assert runnable, f"{document}: every block is skipped or not runnable"


def test_markers_are_known():
    """A misspelt marker would silently change nothing: every marker word is
    one the runner knows."""
    known = {"skip", "reason", "server", "output", "timeout", "picture", "before"}
    for document in docrun.DOCUMENTS:
        for b in docrun.parse(REPO / document, document):
            unknown = set(b.markers) - known
            assert not unknown, f"{b.where()}: unknown doc marker(s) {sorted(unknown)}"
            if b.markers.get("skip"):
                assert b.markers.get("reason"), f"{b.where()}: a skip marker needs reason=..."
