"""packed == padded under dynamic context parallelism: 4 gloo processes run
one step of a plan in Megatron-Core's format whose slots mix groups of 4, 2
and 1 GPUs (tests/e2e/dcp_helpers.py: routing to the groups, per-group
shards with packd.gpu, attention inside each group by hand in fp64,
restore to sample order on rank 0), and the loss, every parameter gradient
and the unpacked logits and token log-probs equal the padded
single-process baseline within 1e-9 of each tensor's scale; by hand-made
plans, random ones, and packd's own through packd.megatron's scheduler."""

import numpy as np
import pytest
import torch

from dcp_helpers import spawn
from e2e_helpers import assert_close, assert_grads_close, baseline_step, grads, make_batch, random_batch
from tiny_model import Config, TinyDecoder

CFG = Config(vocab=61, hidden=32, heads=4, layers=2, mlp=48, dtype="float64", seed=7)
REL = 1e-9
WORLD = 4

# Ten samples: long ones for the group of 4, lengths below 2c, a prompt
# without response (no loss tokens), a one-token sample.
PROMPTS = [9, 12, 5, 3, 1, 6, 4, 7, 2, 8]
RESPONSES = [21, 17, 8, 0, 0, 3, 2, 9, 1, 5]

# Per slot, per rank, the sample ids (ranks with equal lists form a group).
SLOTS = [
    [[0, 1], [0, 1], [0, 1], [0, 1]],  # one group of 4
    [[2], [2], [3, 4], [5]],  # 2 + 1 + 1
    [[6], [7], [8, 9], [8, 9]],  # 1 + 1 + 2
]


def baseline(batch):
    model = TinyDecoder(CFG)
    loss, logits, logp = baseline_step(model, batch)
    return loss, logits, logp, grads(model)


@pytest.mark.parametrize("layout,tp", [("zigzag", 1), ("contiguous", 2)])
def test_dynamic_cp_groups_of_4_2_1_equal_padded(tmp_path, layout, tp):
    batch = make_batch(PROMPTS, RESPONSES, vocab=CFG.vocab, seed=21)
    assert sorted(i for slot in SLOTS for ids in {tuple(x) for x in slot} for i in ids) == list(range(len(batch)))
    job = dict(cfg=CFG.as_dict(), slots=SLOTS, layout=layout, tp=tp, ids=batch.ids, mask=batch.mask,
               resp=batch.resp, loss_tokens=batch.loss_tokens)
    out = spawn(WORLD, job, tmp_path)
    assert [o["sizes"] for o in out] == [[4, 2, 1], [4, 2, 1], [4, 1, 2], [4, 1, 2]]
    for o in out[1:]:  # all-reduced: the same everywhere
        assert o["loss"] == out[0]["loss"]
        for k in o["grads"]:
            assert torch.equal(o["grads"][k], out[0]["grads"][k])
    ref_loss, ref_logits, ref_logp, ref_grads = baseline(batch)
    assert_close(torch.tensor(out[0]["loss"]), torch.tensor(ref_loss), REL, "loss")
    assert_close(out[0]["logits"], ref_logits, REL, "unpacked logits")
    assert_close(out[0]["logp"], ref_logp, REL, "unpacked token log-probs")
    assert_grads_close(out[0]["grads"], ref_grads, REL)
    # The check is not vacuous: the baseline's outputs are not all zero.
    assert float(ref_logits.abs().max()) > 0 and float(ref_logp.abs().max()) > 0
    assert not np.isclose(ref_loss, 0.0)


def random_slots(rng, world: int, slots: int):
    """Random Megatron-format slots: each splits the ranks into aligned
    power-of-two groups, each group runs 1 or 2 fresh samples."""
    out, nxt = [], 0
    for _ in range(slots):
        slot, r = [None] * world, 0
        while r < world:
            c = 1
            while r % (2 * c) == 0 and r + 2 * c <= world and rng.random() < 0.6:
                c *= 2
            ids = list(range(nxt, nxt + int(rng.integers(1, 3))))
            nxt += len(ids)
            for k in range(r, r + c):
                slot[k] = ids
            r += c
        out.append(slot)
    return out, nxt


@pytest.mark.parametrize("seed,layout", [(1, "zigzag"), (2, "contiguous"), (3, "zigzag")])
def test_dynamic_cp_random_plan_equals_padded(tmp_path, seed, layout):
    rng = np.random.default_rng(seed)
    slots, n = random_slots(rng, WORLD, 3)
    batch = random_batch(n, max_prompt=9, max_response=20, vocab=CFG.vocab, seed=seed)
    job = dict(cfg=CFG.as_dict(), slots=slots, layout=layout, tp=1, ids=batch.ids, mask=batch.mask,
               resp=batch.resp, loss_tokens=batch.loss_tokens)
    out = spawn(WORLD, job, tmp_path)
    ref_loss, ref_logits, ref_logp, ref_grads = baseline(batch)
    assert_close(torch.tensor(out[0]["loss"]), torch.tensor(ref_loss), REL, "loss")
    assert_close(out[0]["logits"], ref_logits, REL, "unpacked logits")
    assert_close(out[0]["logp"], ref_logp, REL, "unpacked token log-probs")
    assert_grads_close(out[0]["grads"], ref_grads, REL)


@pytest.mark.parametrize("layout,tp", [("zigzag", 1), ("contiguous", 2)])
def test_packd_dynamic_cp_plan_equals_padded(tmp_path, layout, tp):
    """packd's own plan, in the Megatron format packd.megatron's
    BalancedCPScheduler gives (dp 2 x cp 2, 8 tokens per GPU), run as the
    step's slots: its groups change size from slot to slot, and the step
    still equals the padded baseline."""
    from packd.megatron import BalancedCPScheduler

    batch = make_batch(PROMPTS, RESPONSES, vocab=CFG.vocab, seed=23)
    lengths = batch.mask.sum(axis=1)
    sched = BalancedCPScheduler(8, 2, 2, None)
    slots = sched.get_groups_and_subsamples([(i, int(n)) for i, n in enumerate(lengths)])
    sizes = [[sum(ids == own for ids in slot) for own in slot] for slot in slots]
    assert {c for row in sizes for c in row} == {1, 2, 4}, "the plan mixes groups of 4, 2 and 1"
    job = dict(cfg=CFG.as_dict(), slots=slots, layout=layout, tp=tp, ids=batch.ids, mask=batch.mask,
               resp=batch.resp, loss_tokens=batch.loss_tokens)
    out = spawn(WORLD, job, tmp_path)
    assert [o["sizes"] for o in out] == [[row[r] for row in sizes] for r in range(WORLD)]
    ref_loss, ref_logits, ref_logp, ref_grads = baseline(batch)
    assert_close(torch.tensor(out[0]["loss"]), torch.tensor(ref_loss), REL, "loss")
    assert_close(out[0]["logits"], ref_logits, REL, "unpacked logits")
    assert_close(out[0]["logp"], ref_logp, REL, "unpacked token log-probs")
    assert_grads_close(out[0]["grads"], ref_grads, REL)
