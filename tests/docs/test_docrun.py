"""The doc runner itself (tests/docs/docrun.py) on scratch documents: a
stale transcript or output fails with a diff and is rewritten by write
mode, a matching one passes with its run-to-run values (plan time) kept,
skip markers skip with their reason, a failing block fails, and a command
that fails unexpectedly is never written into a document."""

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

BUILD = Path(os.environ["PACKD_BUILD_DIR"])

DOC = """# scratch

<!-- doc: skip reason=needs a GPU -->
```sh
nvidia-smi
```

```sh
printf '100\\n900\\n50\\n' > lengths.txt
```

```
$ packctl plan --local --dp 1 --max-tokens 2000 lengths.txt | grep -E 'micro-batches per rank|plan time'
micro-batches per rank  7 (lower bound 7)
plan time               12345 us
$ echo done
done
```

```python
print(sum([1, 2, 3]))
```

<!-- doc: output -->
```
7
```
"""


def run(path):
    return docrun.Runner(str(path), BUILD, log=lambda line: None).run()


def test_stale_outputs_fail_and_write_mode_fixes_them(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    results = run(doc)
    status = [(r.block.kind, r.status) for r in results]
    assert status == [("sh", "skipped"), ("sh", "ok"), ("transcript", "failed"), ("python", "ok"), ("output", "failed")]
    assert results[0].message == "needs a GPU"
    assert "-micro-batches per rank  7 (lower bound 7)" in results[2].message
    assert "+micro-batches per rank  1 (lower bound 1)" in results[2].message
    assert "scripts/make-docs.sh" in results[2].message
    docrun.write_back(str(doc), results)
    text = doc.read_text()
    assert "micro-batches per rank  1 (lower bound 1)" in text and "\n6\n" in text
    again = run(doc)
    assert [r.status for r in again] == ["skipped", "ok", "ok", "ok", "ok"]
    # Write mode rewrote a stale block with the time of its run; a matching
    # block keeps what it shows, so refreshing twice changes nothing.
    docrun.write_back(str(doc), again)
    assert doc.read_text() == text


def test_a_failing_block_fails_and_an_unexpected_exit_is_not_written(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("```sh\nfalse\n```\n\n```\n$ packctl plan --local --dp 0 nope.txt\nold\n```\n")
    results = run(doc)
    assert [r.status for r in results] == ["failed", "failed"]
    assert "exit status 1" in results[0].message
    assert "exited 2" in results[1].message and "nope.txt" in results[1].message
    before = doc.read_text()
    docrun.write_back(str(doc), results)
    assert doc.read_text() == before


def test_markers_and_transcripts_parse():
    assert docrun.parse_marker("skip reason=needs a GPU, and NCCL") == {"skip": True, "reason": "needs a GPU, and NCCL"}
    assert docrun.parse_marker("server timeout=30") == {"server": True, "timeout": "30"}
    assert docrun.parse_marker("before python3 x.py a b") == {"before": "python3 x.py a b"}
    steps = docrun.transcript_steps("$ a \\\n   b\nout 1\nout 2\n$ c\n")
    assert steps == [("a \\\n   b", ["out 1", "out 2"]), ("c", [])]
    with pytest.raises(ValueError):
        docrun.transcript_steps("no prompt\n")


def test_normalise_hides_only_what_changes_between_runs():
    a = "plan time               249 us\n  \"planTimeUs\": \"16\",\n2026-01-01T00:00:00.000Z info\nstep 94777.9"
    b = "plan time               3 us\n  \"planTimeUs\": \"7\",\n2027-05-05T10:11:12.345Z info\nstep 94777.9"
    assert docrun.normalise(a) == docrun.normalise(b)
    assert docrun.normalise("step 94777.9") != docrun.normalise("step 94840.3")
