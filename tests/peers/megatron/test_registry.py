"""packd.megatron inside the real Megatron-Core: patch() and undo() on its
scheduler registry, the scheduler built and called the way Megatron's
``wrap_data_iterator`` and ``run`` build and call it, and, on random
batches, packd's schedule against Megatron's own DpBalancedScheduler.

With MEGATRON_LM_SRC unset the venv's release (megatron-core 0.16.1) is
what imports; it has no registry, and the one test that applies is that
patch() says so. With MEGATRON_LM_SRC naming a Megatron-LM tree that has
the registry, the rest apply: main keys it by ``PackingSchedulerEnum``,
the dev branch by the config string and has ``default_dynamic_cp``
(``DefaultDynamicCPScheduler``), whose tests run there only."""

import inspect

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
        with pytest.raises(ImportError, match="has no scheduler_map, DpBalancedScheduler"):
            packd.megatron.patch()
        assert dict(vars(ds)) == before

else:

    @pytest.fixture(scope="module")
    def client():
        return packd.Client.local()

    ENUM = getattr(ds, "PackingSchedulerEnum", None)
    HAS_DYNAMIC_CP = hasattr(ds, "DefaultDynamicCPScheduler")

    def config_lookup(name):
        """The scheduler class ``wrap_data_iterator`` builds for the config
        value ``name`` (its own conversion: on main the enum member by
        upper-case name, then the registry; on dev the registry by the
        string)."""
        return ds.scheduler_map[name if ENUM is None else ENUM[name.upper()]]

    def label(name):
        """How ``handle.replaced`` names the registry entry of ``name``."""
        return f"scheduler_map[{name if ENUM is None else name.upper()}]"

    def test_patch_registers_and_undo_restores():
        members = None if ENUM is None else list(ENUM)
        registry = dict(ds.scheduler_map)
        with packd.megatron.patch() as handle:
            assert config_lookup("packd_dp_balanced") is DpBalancedScheduler
            assert config_lookup("dp_balanced") is ds.DpBalancedScheduler
            if ENUM is not None:
                assert ENUM("packd_dp_balanced").name == "PACKD_DP_BALANCED"
            assert packd.megatron.patch() is handle
            with pytest.raises(ValueError, match="undo\\(\\) it before patching with replace=\\['default_dynamic_cp', 'dp_balanced'\\]"):
                packd.megatron.patch(replace=True)
        assert ds.scheduler_map == registry
        with pytest.raises(KeyError):
            config_lookup("packd_dp_balanced")
        if ENUM is not None:
            assert list(ENUM) == members
        handle.undo()  # twice is harmless

    def test_patch_replace_default():
        with packd.megatron.patch(replace=True) as handle:
            assert config_lookup("dp_balanced") is DpBalancedScheduler
            assert config_lookup("packd_dp_balanced") is DpBalancedScheduler
            assert config_lookup("packd_balanced_cp") is packd.megatron.BalancedCPScheduler
            assert handle.replaced[:3] == [label("packd_dp_balanced"), label("dp_balanced"), label("packd_balanced_cp")]
            # Megatron's dynamic-CP scheduler is replaced where this version has it.
            if HAS_DYNAMIC_CP:
                assert config_lookup("default_dynamic_cp") is packd.megatron.BalancedCPScheduler
                assert handle.replaced[3:] == [label("default_dynamic_cp")] and not handle.skipped
            else:
                assert handle.replaced[3:] == [] and handle.skipped == ["default_dynamic_cp"]
        assert config_lookup("dp_balanced") is ds.DpBalancedScheduler
        if HAS_DYNAMIC_CP:
            assert config_lookup("default_dynamic_cp") is ds.DefaultDynamicCPScheduler

    def test_built_as_megatron_builds_it():
        """wrap_data_iterator passes four positional arguments (the VPP
        group None without VPP); run() asks for the sample keys."""
        with packd.megatron.patch():
            sched = config_lookup("packd_dp_balanced")(8192, 2, 4, None)
            # The dev branch also passes max_num_seqs, by keyword.
            assert config_lookup("packd_dp_balanced")(8192, 2, 4, None, max_num_seqs=None).max_num_seqs is None
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

    # Megatron-LM versions whose schedulers take max_num_seqs (the dev
    # branch): the property test then draws it too.
    HAS_MAX_NUM_SEQS = "max_num_seqs" in inspect.signature(ds.BasePackingScheduler.__init__).parameters

    @st.composite
    def batches(draw):
        dp = draw(st.integers(1, 8))
        cp = draw(st.sampled_from([1, 2, 4]))
        group = draw(st.sampled_from([None, 2, 4]))
        per_rank = draw(st.sampled_from([1024, 4096, 8192]))
        n = draw(st.integers(4 * dp * (group or 1), 160))
        # Megatron's ids are the positions (global ids of the gathered batch).
        lengths = draw(st.lists(st.integers(16, per_rank * cp), min_size=n, max_size=n))
        args = (per_rank, cp, dp, group)
        if HAS_MAX_NUM_SEQS:
            args += (draw(st.sampled_from([None, 1, 2, 3, 8])),)
        return args, list(enumerate(lengths))

    @settings(max_examples=120, deadline=None)
    @given(batches())
    def test_against_megatron(client, batch):
        """The same batch through Megatron's DpBalancedScheduler and packd's:
        the same format (dp x cp lists per micro-batch, every id once, the
        cp lists of one DP rank equal); packd keeps the cap on every
        micro-batch, and where Megatron's schedule keeps it too, packd needs
        no more micro-batches."""
        args, pairs = batch
        per_rank, cp, dp, group = args[:4]
        most_seqs = args[4] if len(args) > 4 else None
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
        assert most_seqs is None or max(len(lst) for row in ours for lst in row) <= most_seqs
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

    if HAS_DYNAMIC_CP:

        def test_dynamic_cp_built_as_dev_builds_it():
            """wrap_data_iterator on the dev branch builds the scheduler of
            ``default_dynamic_cp`` with four positional arguments and the
            keywords max_num_seqs and min_cp_size. packd's has every
            attribute Megatron's DefaultDynamicCPScheduler sets, with the
            same value, the same sample keys, and its ``run`` is that
            class's (which reroutes, packs and sets local_cp_size)."""
            with packd.megatron.patch(replace=True):
                ours = config_lookup("default_dynamic_cp")(8192, 2, 4, None, max_num_seqs=16, min_cp_size=2)
            theirs = ds.DefaultDynamicCPScheduler(8192, 2, 4, None, max_num_seqs=16, min_cp_size=2)
            assert vars(theirs), "Megatron's scheduler sets no attributes?"
            for name, value in vars(theirs).items():
                assert getattr(ours, name) == value, name
            assert ours.get_required_sample_keys() == theirs.get_required_sample_keys()
            assert packd.megatron._megatron_class(ours._megatron_classes) is ds.DefaultDynamicCPScheduler

        def dcp_check(groups, seqlen, pool, per_rank, least, most_seqs):
            """Megatron's dynamic-CP format and packd's promises: every id
            once, every rank with work, a group one aligned block of a size
            Megatron makes (a power of two at least ``least``, or the
            pool), within the per-GPU cap once aligned to 2c and within
            ``most_seqs``."""
            ids = []
            for row in groups:
                assert len(row) == pool
                j = 0
                while j < pool:
                    assert row[j], f"rank {j} has no sample"
                    k = j
                    while k < pool and row[k] == row[j]:
                        k += 1
                    c = k - j
                    assert c == pool or (c & (c - 1) == 0 and j % c == 0 and c >= least), (j, c)
                    step = 2 * c if c > 1 else 1
                    assert sum(-(-seqlen[s] // step) * step for s in row[j]) <= c * per_rank
                    assert most_seqs is None or len(row[j]) <= most_seqs
                    ids.extend(row[j])
                    j = k
            assert sorted(ids) == sorted(seqlen)

        @st.composite
        def dcp_batches(draw):
            dp = draw(st.sampled_from([1, 2, 4, 8]))
            cp = draw(st.sampled_from([1, 2, 4]))
            pool = dp * cp
            per_rank = draw(st.sampled_from([1024, 4096]))
            least = draw(st.sampled_from([1, 1, 2]))
            most_seqs = draw(st.sampled_from([None, None, 2, 6]))
            n = draw(st.integers(1, 96))
            longest = per_rank * min(pool, 4) - 2 * pool
            lengths = draw(st.lists(st.integers(16, max(16, longest)), min_size=n, max_size=n))
            return (per_rank, cp, dp, None), least, most_seqs, list(enumerate(lengths))

        @settings(max_examples=80, deadline=None)
        @given(dcp_batches())
        def test_dynamic_cp_against_megatron(client, batch):
            """The same batch through Megatron's DefaultDynamicCPScheduler
            and packd's, as the dev branch builds them: packd's schedule
            is always one Megatron's pipeline can run, within the cap and
            max_num_seqs; Megatron's, where it schedules, has the same
            format (its cap and max_num_seqs are not checked: it does not
            promise them)."""
            args, least, most_seqs, pairs = batch
            per_rank, cp, dp, _ = args
            pool = dp * cp
            seqlen = dict(pairs)
            if least > pool:
                return
            ours = packd.megatron.BalancedCPScheduler(
                *args, max_num_seqs=most_seqs, min_cp_size=least, client=client
            ).get_groups_and_subsamples(pairs)
            dcp_check(ours, seqlen, pool, per_rank, least, most_seqs)
            try:
                theirs = ds.DefaultDynamicCPScheduler(
                    *args, max_num_seqs=most_seqs, min_cp_size=least
                ).get_groups_and_subsamples(pairs)
            except AssertionError:
                return
            dcp_check(theirs, seqlen, pool, 1 << 40, 1, None)

        def test_dynamic_cp_max_num_seqs(client):
            """max_num_seqs (Megatron-LM's thd_max_packed_sequences, the
            static THD capacity) bounds packd's groups; Megatron's
            dynamic-CP scheduler stores it and packs past it."""
            pairs = [(i, 64) for i in range(16)]
            theirs = ds.DefaultDynamicCPScheduler(1024, 1, 2, None, max_num_seqs=2).get_groups_and_subsamples(pairs)
            assert max(len(lst) for row in theirs for lst in row) > 2
            ours = packd.megatron.BalancedCPScheduler(1024, 1, 2, None, max_num_seqs=2, client=client)
            groups = ours.get_groups_and_subsamples(pairs)
            dcp_check(groups, dict(pairs), 2, 1024, 1, 2)
