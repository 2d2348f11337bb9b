"""packed == padded on a real torch model (fp64, CPU).

Every test trains the same tiny decoder (tests/e2e/tiny_model.py) two ways:
the padded baseline as verl runs it (left-padded prompt, right-padded
response, position ids from the attention mask, token-mean loss over the
response tokens) and the packd path (plan with ``packd.Client.local()``,
pack ids / labels / positions with ``packd.gpu`` on CPU tensors, forward on
the packed stream, ``token-sum / loss tokens * loss_scale`` per micro-batch,
backward, unpack), and asserts that the loss, every parameter gradient (or
parameter after an optimizer step) and the unpacked logits and token
log-probs equal the baseline's within 1e-9 of each tensor's scale.

Multi-rank tests run real gloo process groups (torch.multiprocessing spawn,
file:// rendezvous); the in-process tests with dp > 1 run each rank's
micro-batches one after the other into one model, which accumulates exactly
the sum the gradient all-reduce forms (the all-reduce itself is covered by
the DP 2 / DP 4 tests).
"""

import numpy as np
import pytest
import torch

import packd
from e2e_helpers import (
    assert_close,
    assert_grads_close,
    baseline_step,
    check_loss_scales,
    grads,
    make_batch,
    mini_rows,
    packd_rank_step,
    params,
    random_batch,
    restore,
    spawn,
)
from tiny_model import Config, TinyDecoder

CFG = Config(vocab=61, hidden=32, heads=4, layers=2, mlp=48, dtype="float64", seed=7)
REL = 1e-9


def baseline(batch):
    model = TinyDecoder(CFG)
    loss, logits, logp = baseline_step(model, batch)
    return loss, logits, logp, grads(model)


def check_plan(plan, batch, max_tokens=None, cp=1):
    """Rules the tests rely on: every sequence exactly once, the same count
    on every rank, the cap, the loss scales."""
    seen = np.sort(plan.order())
    assert np.array_equal(seen, np.arange(len(batch))), "every sequence exactly once"
    counts = {len(r.micro_batches) for r in plan}
    assert len(counts) == 1, f"equal micro-batch counts per rank, got {counts}"
    if max_tokens:
        for mb in plan.micro_batches:
            assert mb.padded_tokens <= max_tokens * cp, mb
    check_loss_scales(plan, batch.loss_tokens)


def run_in_process(plan, batch, **kw):
    """Every rank's packd step in this process, into one model."""
    model = TinyDecoder(CFG)
    chunks = [batch.rows(r.seqs) for r in plan]
    results = [packd_rank_step(model, plan, r, chunks[r], batch.loss_tokens, **kw) for r in range(plan.dp)]
    loss = sum(x["loss"] for x in results)
    return loss, restore(plan, [x["logits"] for x in results]), restore(plan, [x["logp"] for x in results]), \
        grads(model), results


def compare(batch, loss, logits, logp, g):
    ref_loss, ref_logits, ref_logp, ref_grads = baseline(batch)
    assert_close(torch.tensor(loss), torch.tensor(ref_loss), REL, "loss")
    assert_close(logits, ref_logits, REL, "unpacked logits")
    assert_close(logp, ref_logp, REL, "unpacked token log-probs")
    assert_grads_close(g, ref_grads, REL)


def spawned(plan, batch, world, tmp_path, **job):
    job = dict(cfg=CFG.as_dict(), plan=plan.to_bytes(), lengths=batch.lengths,
               loss_tokens=batch.loss_tokens, chunks=[batch.rows(r.seqs) for r in plan], **job)
    out = spawn(world, job, tmp_path)
    cp = job.get("cp", 1)
    for o in out[1:]:  # all-reduced: the same everywhere
        assert o["loss"] == out[0]["loss"]
        for k in o["grads"]:
            assert torch.equal(o["grads"][k], out[0]["grads"][k])
    by_dp = [o for o in out if o["cp_rank"] == 0]
    logits = restore(plan, [o["logits"] for o in by_dp])
    logp = restore(plan, [o["logp"] for o in by_dp])
    for o in out:  # every CP rank unpacked the same gathered stream
        assert torch.equal(o["logits"], by_dp[o["dp_rank"]]["logits"])
    return out[0]["loss"], logits, logp, out[0]["grads"], cp


def test_dp1(client):
    batch = random_batch(12, max_prompt=10, max_response=24, vocab=CFG.vocab, seed=1)
    plan = client.plan(batch.lengths, loss_tokens=batch.loss_tokens, dp=1, max_tokens=64)
    check_plan(plan, batch, 64)
    assert plan.stats.micro_batches_per_rank >= 3
    loss, logits, logp, g, _ = run_in_process(plan, batch)
    compare(batch, loss, logits, logp, g)


@pytest.mark.parametrize("dp", [2, 4])
def test_dp_gloo(client, tmp_path, dp):
    batch = random_batch(4 * dp, max_prompt=10, max_response=24, vocab=CFG.vocab, seed=10 + dp)
    plan = client.plan(batch.lengths, loss_tokens=batch.loss_tokens, dp=dp, max_tokens=48)
    check_plan(plan, batch, 48)
    assert plan.stats.micro_batches_per_rank >= 2
    loss, logits, logp, g, _ = spawned(plan, batch, dp, tmp_path)
    compare(batch, loss, logits, logp, g)


def test_cp2_zigzag_gloo(client, tmp_path):
    # Lengths below 2*CP and a zero-length sequence exercise chunks of 0 or
    # 1 token and zero-width slots.
    batch = make_batch([6, 1, 9, 0, 4, 12, 2], [14, 2, 5, 0, 1, 9, 0], vocab=CFG.vocab, seed=3)
    plan = client.plan(batch.lengths, loss_tokens=batch.loss_tokens, dp=1, cp=2, cp_algo="zigzag", max_tokens=24)
    check_plan(plan, batch, 24, cp=2)
    for mb in plan.micro_batches:
        assert np.all(np.asarray(mb.cu_seqlens_padded) % 4 == 0), "zigzag slots are multiples of 2*CP"
    loss, logits, logp, g, _ = spawned(plan, batch, 2, tmp_path, cp=2, cp_algo="zigzag")
    compare(batch, loss, logits, logp, g)


def test_cp2_ulysses_gloo(client, tmp_path):
    batch = make_batch([6, 1, 9, 3, 4, 12], [14, 2, 5, 0, 1, 9], vocab=CFG.vocab, seed=4)
    plan = client.plan(batch.lengths, loss_tokens=batch.loss_tokens, dp=1, cp=2, cp_algo="ulysses",
                       num_heads=CFG.heads, max_tokens=24)
    check_plan(plan, batch, 24, cp=2)
    for mb in plan.micro_batches:
        assert mb.cu_seqlens_padded[-1] % 2 == 0, "the Ulysses stream splits into CP equal shards"
    loss, logits, logp, g, _ = spawned(plan, batch, 2, tmp_path, cp=2, cp_algo="ulysses")
    compare(batch, loss, logits, logp, g)


def test_padded_mode(client):
    batch = random_batch(12, max_prompt=10, max_response=24, vocab=CFG.vocab, seed=5)
    plan = client.plan(batch.lengths, loss_tokens=batch.loss_tokens, dp=2, mode="padded", max_tokens=96)
    check_plan(plan, batch, 96)
    for mb in plan.micro_batches:
        w = mb.padded_width
        assert w == max(int(batch.lengths[i]) for i in mb.seqs)
        assert list(mb.cu_seqlens_padded) == [w * k for k in range(len(mb) + 1)]
        assert len(mb) * w <= 96
    loss, logits, logp, g, _ = run_in_process(plan, batch, padded=True)
    compare(batch, loss, logits, logp, g)


def test_two_mini_batches_sgd(client):
    """Two optimizer steps (SGD) against two padded steps on the planner's
    mini-batches (consecutive halves of the input without shuffle);
    gradients before and parameters after each step must agree."""
    batch = random_batch(14, max_prompt=10, max_response=24, vocab=CFG.vocab, seed=6)
    plan = client.plan(batch.lengths, loss_tokens=batch.loss_tokens, dp=1, mini_batches=2, max_tokens=64)
    check_plan(plan, batch, 64)
    rows = mini_rows(plan)
    assert [list(rows[0]), list(rows[1])] == [list(range(7)), list(range(7, 14))]

    lr = 0.5
    ref = TinyDecoder(CFG)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=lr)
    want = []
    for mini in (0, 1):
        opt_ref.zero_grad()
        loss, _, _ = baseline_step(ref, batch.rows(rows[mini]))
        g = grads(ref)
        opt_ref.step()
        want.append((loss, g, params(ref)))

    model = TinyDecoder(CFG)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    got = []

    def step(mini):
        got.append((grads(model), None))
        opt.step()
        got[-1] = (got[-1][0], params(model))
        opt.zero_grad()

    opt.zero_grad()
    res = packd_rank_step(model, plan, 0, batch.rows(plan[0].seqs), batch.loss_tokens, after_mini=step)
    assert len(got) == 2
    assert_close(torch.tensor(res["loss"]), torch.tensor(want[0][0] + want[1][0]), REL, "sum of mini-batch losses")
    for mini in (0, 1):
        assert_grads_close(got[mini][0], want[mini][1], REL)
        for name, p in want[mini][2].items():
            assert_close(got[mini][1][name], p, REL, f"parameter {name} after step {mini + 1}")
        # The step moved the parameters: the check is not vacuous.
        assert not torch.equal(want[mini][2]["head.weight"], TinyDecoder(CFG).head.weight.detach())


def test_max_seqs(client):
    batch = random_batch(16, max_prompt=6, max_response=10, vocab=CFG.vocab, seed=8)
    plan = client.plan(batch.lengths, loss_tokens=batch.loss_tokens, dp=2, max_seqs=3, max_tokens=256)
    check_plan(plan, batch, 256)
    assert max(len(mb) for mb in plan.micro_batches) <= 3
    assert plan.stats.micro_batches_per_rank >= 3  # the count comes from max_seqs, not the cap
    loss, logits, logp, g, _ = run_in_process(plan, batch)
    compare(batch, loss, logits, logp, g)


def test_zero_length_and_empty_responses(client):
    # index 1 and 6: length 0; 3 and 8: prompt only (no loss tokens); 5: one token.
    batch = make_batch([7, 0, 4, 5, 2, 1, 0, 9, 3, 6], [8, 0, 11, 0, 3, 0, 0, 5, 0, 13], vocab=CFG.vocab, seed=9)
    plan = client.plan(batch.lengths, loss_tokens=batch.loss_tokens, dp=2, max_tokens=32)
    check_plan(plan, batch, 32)
    assert plan.stats.zero_length == 2
    for mb in plan.micro_batches:
        slot = np.diff(mb.cu_seqlens_padded)
        assert np.all(slot[batch.lengths[mb.seqs] == 0] == 0), "zero-length sequences get zero-width slots"
    loss, logits, logp, g, _ = run_in_process(plan, batch)
    compare(batch, loss, logits, logp, g)


def test_microbatch_group(client):
    """PP-style counts: with microbatch_group=4 every rank runs a multiple of
    4 micro-batches; the planner splits further rather than leaving a
    micro-batch empty, and refuses (FAILED_PRECONDITION) when a rank has
    fewer sequences than the count needs."""
    batch = random_batch(10, max_prompt=6, max_response=10, vocab=CFG.vocab, seed=12)
    plan = client.plan(batch.lengths, loss_tokens=batch.loss_tokens, dp=2, microbatch_group=4, max_tokens=256)
    check_plan(plan, batch, 256)
    assert plan.stats.micro_batches_per_rank % 4 == 0 and plan.stats.micro_batches_per_rank >= 4
    assert min(len(mb) for mb in plan.micro_batches) >= 1
    loss, logits, logp, g, _ = run_in_process(plan, batch)
    compare(batch, loss, logits, logp, g)

    with pytest.raises(packd.FailedPrecondition, match="microbatch_group"):
        client.plan(batch.lengths[:6], loss_tokens=batch.loss_tokens[:6], dp=2, microbatch_group=4, max_tokens=256)
