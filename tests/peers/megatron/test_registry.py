"""packd.megatron inside the real Megatron-Core: patch() and undo() on its
scheduler registry, the scheduler built and called the way Megatron's
``wrap_data_iterator`` and ``run`` build and call it, and, on random
batches, packd's schedule against Megatron's own DpBalancedScheduler.

With MEGATRON_LM_SRC unset the venv's release (megatron-core 0.16.1) is
what imports; it has no registry, and the one test that applies is that
patch() says so. With MEGATRON_LM_SRC naming a Megatron-LM tree that has
the registry, the rest apply."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packd
import packd.megatron
from packd.megatron import DpBalancedScheduler

import megatron.core.datasets.data_schedule as ds

HAS_REGISTRY = hasattr(ds, "scheduler_map")


if not HAS_REGISTRY:

    def test_release_without_registry_is_refused():
        """A Megatron-Core without the registry: patch() raises ImportError
        naming what is missing and changes nothing."""
        before = dict(vars(ds))
        with pytest.raises(ImportError, match="has no scheduler_map, PackingSchedulerEnum, DpBalancedScheduler"):
            packd.megatron.patch()
        assert dict(vars(ds)) == before

else:

    @pytest.fixture(scope="module")
    def client():
        return packd.Client.local()

    def config_lookup(name):
        """The scheduler class ``wrap_data_iterator`` builds for the config
        value ``name`` (its own conversion: enum member by upper-case name,
        then the registry)."""
        return ds.scheduler_map[ds.PackingSchedulerEnum[name.upper()]]

    def test_patch_registers_and_undo_restores():
        members = list(ds.PackingSchedulerEnum)
        registry = dict(ds.scheduler_map)
        with packd.megatron.patch() as handle:
            assert config_lookup("packd_dp_balanced") is DpBalancedScheduler
            assert config_lookup("dp_balanced") is ds.DpBalancedScheduler
            assert ds.PackingSchedulerEnum("packd_dp_balanced").name == "PACKD_DP_BALANCED"
            assert packd.megatron.patch() is handle
            with pytest.raises(ValueError, match="undo\\(\\) it before patching with replace=\\['default_dynamic_cp', 'dp_balanced'\\]"):
                packd.megatron.patch(replace=True)
        assert list(ds.PackingSchedulerEnum) == members
        assert ds.scheduler_map == registry
        with pytest.raises(KeyError):
            ds.PackingSchedulerEnum["PACKD_DP_BALANCED"]
        handle.undo()  # twice is harmless

    def test_patch_replace_default():
        with packd.megatron.patch(replace=True) as handle:
            assert config_lookup("dp_balanced") is DpBalancedScheduler
            assert config_lookup("packd_dp_balanced") is DpBalancedScheduler
            assert config_lookup("packd_balanced_cp") is packd.megatron.BalancedCPScheduler
            assert handle.replaced[:2] == ["scheduler_map[PACKD_DP_BALANCED]", "scheduler_map[DP_BALANCED]"]
            assert handle.replaced[2] == "scheduler_map[PACKD_BALANCED_CP]"
            # Megatron's dynamic-CP scheduler is replaced where this version has it.
            if "DEFAULT_DYNAMIC_CP" in ds.PackingSchedulerEnum.__members__:
                assert config_lookup("default_dynamic_cp") is packd.megatron.BalancedCPScheduler
                assert handle.replaced[3:] == ["scheduler_map[DEFAULT_DYNAMIC_CP]"] and not handle.skipped
            else:
                assert handle.replaced[3:] == [] and handle.skipped == ["default_dynamic_cp"]
        assert config_lookup("dp_balanced") is ds.DpBalancedScheduler

    def test_built_as_megatron_builds_it():
        """wrap_data_iterator passes four positional arguments (the VPP
        group None without VPP); run() asks for the sample keys."""
        with packd.megatron.patch():
            sched = config_lookup("packd_dp_balanced")(8192, 2, 4, None)
        ref = ds.DpBalancedScheduler(8192, 2, 4, None)
        assert sched.get_required_sample_keys() == ref.get_required_sample_keys()
        assert sched.max_seq_len_all_ranks == ref.max_seq_len_all_ranks
        assert sched.run.__doc__ and callable(ds.DpBalancedScheduler.run)

    def stats(groups, seqlen, dp, cp):
        """Micro-batches per DP rank, the largest tokens of one DP rank's
        micro-batch, and every id once."""
        ids = []
        most = 0
        for row in groups:
            assert len(row) == dp * cp
            for r in range(dp):
                ids.extend(row[r * cp])
                most = max(most, sum(seqlen[s] for s in row[r * cp]))
        return len(groups), most, sorted(ids)

    @st.composite
    def batches(draw):
        dp = draw(st.integers(1, 8))
        cp = draw(st.sampled_from([1, 2, 4]))
        group = draw(st.sampled_from([None, 2, 4]))
        per_rank = draw(st.sampled_from([1024, 4096, 8192]))
        n = draw(st.integers(4 * dp * (group or 1), 160))
        # Megatron's ids are the positions (global ids of the gathered batch).
        lengths = draw(st.lists(st.integers(16, per_rank * cp), min_size=n, max_size=n))
        return (per_rank, cp, dp, group), list(enumerate(lengths))

    @settings(max_examples=120, deadline=None)
    @given(batches())
    def test_against_megatron(client, batch):
        """The same batch through Megatron's DpBalancedScheduler and packd's:
        the same format (dp x cp lists per micro-batch, every id once, the
        cp lists of one DP rank equal); packd keeps the cap on every
        micro-batch, and where Megatron's schedule keeps it too, packd needs
        no more micro-batches."""
        args, pairs = batch
        per_rank, cp, dp, group = args
        seqlen = dict(pairs)
        cap = per_rank * cp
        try:
            theirs = ds.DpBalancedScheduler(*args).get_groups_and_subsamples(pairs)
        except AssertionError:
            theirs = None
        try:
            ours = DpBalancedScheduler(*args, client=client).get_groups_and_subsamples(pairs)
        except AssertionError:
            # packd refuses only where no schedule keeps the cap; Megatron's,
            # if it has one, then breaks the cap.
            assert theirs is None or stats(theirs, seqlen, dp, cp)[1] > cap
            return
        k, most, ids = stats(ours, seqlen, dp, cp)
        assert ids == sorted(seqlen) and most <= cap and k % (group or 1) == 0
        for row in ours:
            for r in range(dp):
                assert all(row[r * cp + c] == row[r * cp] for c in range(cp))
        if theirs is not None:
            tk, tmost, tids = stats(theirs, seqlen, dp, cp)
            assert tids == ids
            if tmost <= cap:
                assert k <= tk

    def test_oversized_sample(client):
        """Megatron's scheduler puts a sample longer than the cap in a
        micro-batch of its own, over the cap (and, when it is the first
        sample, leaves an empty micro-batch before it); packd refuses,
        naming it."""
        pairs = [(0, 100), (1, 100), (2, 5000), (3, 100), (4, 100), (5, 100)]
        theirs = ds.DpBalancedScheduler(1024, 2, 2, None).get_groups_and_subsamples(pairs)
        assert max(sum(dict(pairs)[s] for s in lst) for row in theirs for lst in row) == 5000
        first = ds.DpBalancedScheduler(1024, 2, 2, None).get_groups_and_subsamples([(0, 5000)] + pairs[3:])
        assert [] in first[0]
        with pytest.raises(AssertionError, match="sample_id_seqlens\\[2\\]: sample 2 has seqlen 5000"):
            DpBalancedScheduler(1024, 2, 2, None, client=client).get_groups_and_subsamples(pairs)

    def test_too_few_samples_same_type_as_megatron(client):
        """Three samples for two DP ranks with a VPP group of 2 (four
        micro-batches): Megatron asserts, and so does packd (with the
        counts named)."""
        pairs = [(0, 100), (1, 100), (2, 100)]
        with pytest.raises(AssertionError):
            ds.DpBalancedScheduler(1024, 1, 2, 2).get_groups_and_subsamples(pairs)
        with pytest.raises(AssertionError, match="3 samples cannot fill dp_size 2 x microbatch_group_size_per_vp_stage 2"):
            DpBalancedScheduler(1024, 1, 2, 2, client=client).get_groups_and_subsamples(pairs)
