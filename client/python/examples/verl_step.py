#!/usr/bin/env python3
"""A synthetic verl-style controller step with packd, end to end on the CPU.

    generate lengths -> plan -> dispatch -> pack per rank (and CP rank)
    -> fake forward -> unpack -> restore

1. A rollout: a padded batch as verl builds it (left-padded prompt,
   right-padded response) with random lengths.
2. The controller asks packd for one plan of the whole global batch (DP
   balance, micro-batches under a hard token cap, CP layout, loss scales).
3. Dispatch: the batch is reordered with ``plan.order()`` and cut into
   per-rank chunks (``plan.split``).
4. Every DP rank walks its mini-batches and micro-batches; for every CP rank
   it packs ids, positions and next-token labels with packd.layout, runs a
   fake forward (a deterministic per-token "log-prob"), and the CP slices
   are gathered and unpacked back to [rows, S].
5. The per-rank outputs are restored to input order with
   ``plan.restore`` and compared with the same fake forward run directly on
   the padded batch; the loss, summed with the plan's loss scales, must
   equal the global token mean.

Run: ``python3 verl_step.py`` (embedded planner, needs libpackd.so via
PACKD_LIB or PACKD_BUILD_DIR) or ``python3 verl_step.py --server HOST:PORT``.
Exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

try:
    import packd
except ImportError:  # Running from a source checkout without installing.
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import packd

from packd import layout


def rollout(rng, n, max_prompt, max_response, vocab=32000):
    """A verl-style padded batch: prompt columns [0, P) left padded,
    response columns [P, P+R) right padded."""
    p = rng.integers(1, max_prompt + 1, size=n)
    r = rng.integers(0, max_response + 1, size=n)
    r[rng.random(n) < 0.05] = 0  # a few empty responses
    width = max_prompt + max_response
    ids = np.zeros((n, width), dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    resp = np.zeros((n, width), dtype=np.int64)
    for i in range(n):
        a, b = max_prompt - p[i], max_prompt + r[i]
        mask[i, a:b] = 1
        ids[i, a:b] = rng.integers(1, vocab, size=b - a)
        resp[i, max_prompt : max_prompt + r[i]] = 1
    return ids, mask, resp, p + r, r


def fake_logprob(tokens, labels, positions):
    """A stand-in for model + log-softmax: any deterministic per-token
    function of (token, next token, position) will do for the check."""
    v = -((tokens * 31 + labels * 17 + positions) % 101) / 100.0
    return np.where(labels == layout.IGNORE_INDEX, 0.0, v)


def direct(ids, mask, resp):
    """The same fake forward on the padded batch, no packing: the reference."""
    start, length = layout.valid_runs(mask)
    out = np.zeros(ids.shape)
    for i in range(ids.shape[0]):
        a, n = start[i], length[i]
        for t in range(n - 1):
            if resp[i, a + t + 1]:
                out[i, a + t] = fake_logprob(ids[i, a + t], ids[i, a + t + 1], t)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", help="packd server HOST:PORT (default: embedded planner)")
    ap.add_argument("--n", type=int, default=96, help="sequences in the global batch")
    ap.add_argument("--dp", type=int, default=4)
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--cp-algo", default="zigzag", choices=["zigzag", "ulysses"])
    ap.add_argument("--mini-batches", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=1024, help="token cap per micro-batch per CP rank")
    ap.add_argument("--max-prompt", type=int, default=200)
    ap.add_argument("--max-response", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    ids, mask, resp, lengths, resp_lengths = rollout(rng, args.n, args.max_prompt, args.max_response)

    # 2. One plan for the whole step.
    client = packd.Client(args.server) if args.server else packd.Client.local()
    t0 = time.perf_counter()
    plan = client.plan(lengths, loss_tokens=resp_lengths, dp=args.dp, cp=args.cp, tp=args.tp,
                       cp_algo=args.cp_algo, mini_batches=args.mini_batches, max_tokens=args.max_tokens)
    t_plan = time.perf_counter() - t0
    print(f"{client.mode} plan {plan.plan_id}: {plan.num_sequences} sequences, dp {plan.dp}, "
          f"{plan.stats.micro_batches_per_rank} micro-batches per rank "
          f"(lower bound {plan.stats.micro_batches_lower_bound}), lock-step efficiency "
          f"{plan.lockstep_efficiency:.4f}, pad fraction {plan.pad_fraction:.4f}, {t_plan * 1e3:.1f} ms")

    # 3. Dispatch: each rank receives its rows, in plan order.
    rank_ids, rank_mask, rank_resp = plan.split(ids), plan.split(mask), plan.split(resp)

    # 4. Every DP rank: micro-batches, CP ranks, fake forward, gather, unpack.
    outputs, loss = [], 0.0
    for r, rank in enumerate(plan):
        out = np.zeros(rank_ids[r].shape)
        row = 0
        for mb in rank.micro_batches:
            rows = np.arange(row, row + mb.seqs.size)
            row += mb.seqs.size
            kw = dict(rows=rows, cp=args.cp, cp_algo=args.cp_algo, tp=args.tp)
            assert layout.local_length(mb, args.cp, args.cp_algo, args.tp) <= args.max_tokens
            slices = []
            for c in range(args.cp):
                tok = layout.pack(rank_ids[r], rank_mask[r], mb, cp_rank=c, **kw)
                pos = layout.position_ids(mb, style="hf", cp=args.cp, cp_rank=c, cp_algo=args.cp_algo, tp=args.tp)
                lab = layout.labels(rank_ids[r], rank_mask[r], mb, loss_mask=rank_resp[r], cp_rank=c, **kw)
                slices.append(fake_logprob(tok, lab, pos))  # this CP rank's forward
                # Token-mean loss with the plan's scale: sum over micro-batches
                # and ranks gives the global token mean of the mini-batch.
                n_loss = int(resp_lengths[mb.seqs].sum())
                if n_loss:
                    loss += mb.loss_scale * float(-slices[-1].sum()) / n_loss
            out += layout.unpack(slices, rank_mask[r], mb, **kw)  # all-gather + unpack
        outputs.append(out)

    # 5. Back to input order, and compare with the direct computation.
    restored = plan.restore(outputs)
    reference = direct(ids, mask, resp)
    ok = np.allclose(restored, reference)
    # The expected loss: the token mean of every mini-batch (as the planner
    # formed them), summed over mini-batches (one optimizer step each).
    expect_loss = 0.0
    mini_rows = {}
    for rank in plan:
        for m in rank.mini_batches:
            mini_rows.setdefault(m.mini, []).extend(m.seqs.tolist())
    for rows in mini_rows.values():
        denom = resp_lengths[rows].sum()
        if denom:
            expect_loss += float(-reference[rows].sum()) / denom
    loss_ok = abs(loss - expect_loss) <= 1e-9 * max(1.0, abs(expect_loss))
    print(f"outputs restored to input order: {'OK' if ok else 'MISMATCH'}; "
          f"loss {loss:.6f} vs global token mean {expect_loss:.6f}: {'OK' if loss_ok else 'MISMATCH'}")
    client.close()
    return 0 if ok and loss_ok else 1


if __name__ == "__main__":
    sys.exit(main())
