"""Writes the synthetic micro-batch timings docs/packctl.md's calibrate
example fits: ``synthetic(2000, 0.01, 2)`` of tests/python/test_calibrate.py
(2 ms + 20 us per sequence + 40 ns per token + 1.5e-12 s per squared token,
1 % noise), one JSON line per micro-batch; with a fifth argument ``cp``,
``synthetic_cp(N, NOISE, SEED)`` instead: the same micro-batches on CP
groups of 1, 2, 4 or 8 GPUs (plus 0.3 ms per extra GPU and 10 ns per token
that leaves a GPU), each record with its ``"cp"``.

    python3 tests/docs/make_timings.py OUT.jsonl [N NOISE SEED [cp]]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from test_calibrate import synthetic, synthetic_cp, write_jsonl  # noqa: E402


def main(argv):
    if not 1 <= len(argv) <= 5 or (len(argv) == 5 and argv[4] != "cp"):
        print(__doc__, file=sys.stderr)
        return 2
    n = int(argv[1]) if len(argv) > 1 else 2000
    noise = float(argv[2]) if len(argv) > 2 else 0.01
    seed = int(argv[3]) if len(argv) > 3 else 2
    make = synthetic_cp if len(argv) == 5 else synthetic
    write_jsonl(Path(argv[0]), make(n, noise, seed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
