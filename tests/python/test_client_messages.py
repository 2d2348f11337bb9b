"""Every Python-side validation error of a sequence argument names the
argument, the index and the value (never only a dtype), whatever form the
bad value comes in: a list with a string or None, a float array, a bool
among integers, a negative number, a string array. One test per message."""

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client" / "python"))

import packd  # noqa: E402
from packd import layout  # noqa: E402
from packd._adapt import host_values, lengths_of  # noqa: E402


@pytest.fixture(scope="module")
def client():
    return packd.Client.local()


@pytest.mark.parametrize(
    "lengths, message",
    [
        ([512, "1024", 2048], "lengths[1]: expected an integer, got '1024' (a str)"),
        ([512, None], "lengths[1]: expected an integer, got None (a NoneType)"),
        ([512, 7, True], "lengths[2]: expected an integer, got True (a bool)"),
        ([512, 1024.0], "lengths[1]: expected an integer, got 1024.0 (a float)"),
        (np.array([512.0, 1024.5, 3.0]), "lengths[1]: expected an integer, got 1024.5 (the array has dtype float64)"),
        (np.array([512.0, 1024.0]), "lengths[0]: expected an integer, got 512.0 (the array has dtype float64)"),
        (np.array(["512", "x"]), "lengths[0]: expected an integer, got '512' (the array has dtype <U3)"),
        (np.array([True, False]), "lengths[0]: expected an integer, got True (the array has dtype bool)"),
        ([512, -1], "lengths[1]: must be >= 0, got -1"),
        ([512, 1 << 32], "lengths[1]: must be in [0, 4294967295], got 4294967296"),
    ],
)
def test_plan_lengths_message(client, lengths, message):
    with pytest.raises(packd.InvalidArgument) as err:
        client.plan(lengths, dp=1)
    assert err.value.message == message


def test_plan_loss_tokens_and_groups_are_named(client):
    with pytest.raises(packd.InvalidArgument) as err:
        client.plan([10, 20], loss_tokens=[5, "x"], dp=1)
    assert err.value.message == "loss_tokens[1]: expected an integer, got 'x' (a str)"
    with pytest.raises(packd.InvalidArgument) as err:
        client.plan([10, 20], groups=np.array([1.0, 2.5]), dp=1)
    assert err.value.message == "groups[1]: expected an integer, got 2.5 (the array has dtype float64)"


def test_torch_lengths_message(client):
    torch = pytest.importorskip("torch")
    with pytest.raises(packd.InvalidArgument) as err:
        client.plan(torch.tensor([3.0, 4.5]), dp=1)
    assert err.value.message == "lengths[1]: expected an integer, got 4.5 (the array has dtype float32)"


def test_adapter_lengths_message():
    with pytest.raises(ValueError) as err:
        lengths_of(np.array([3.0, 4.5]), "seqlen_list")
    assert str(err.value) == "seqlen_list[1]: expected an integer, got 4.5 (the array has dtype float64)"


def test_adapter_numbers_message():
    with pytest.raises(ValueError) as err:
        host_values([3, "four", 5], "seqlen_list")
    assert str(err.value) == "seqlen_list[1]: expected a number, got 'four' (dtype <U21)"
    with pytest.raises(ValueError) as err:
        host_values([3, -1], "seqlen_list")
    assert str(err.value) == "seqlen_list[1]: must be finite and >= 0, got -1.0"


def test_layout_index_message():
    with pytest.raises(ValueError) as err:
        layout.make_micro([2, "x", 6], 1)
    assert str(err.value) == "lengths[1]: expected an integer, got 'x' (a str)"
    with pytest.raises(ValueError) as err:
        layout.make_micro(np.array([2.0, 4.5]), 1)
    assert str(err.value) == "lengths[1]: expected an integer, got 4.5 (the array has dtype float64)"


def test_gpu_plan_data_messages():
    from packd import gpu

    gpu.library_path()  # Raises naming where it looked when the library is not built.
    x = np.zeros((2, 4), dtype=np.int64)
    with pytest.raises(ValueError) as err:
        gpu.pack(x, None, [2, 2], [0, 1.5], [0, 2, 4])
    assert str(err.value) == "seqs[1]: expected an integer, got 1.5 (a float)"
    with pytest.raises(ValueError) as err:
        gpu.pack(x, None, [2, 2], [0, 1], [0, 2, 1 << 40])
    assert str(err.value) == f"cu_seqlens_padded[2]: {1 << 40} is outside int32"


def test_reverse_idx_message():
    from packd.verl import get_reverse_idx

    with pytest.raises(ValueError) as err:
        get_reverse_idx([0, 2, 2])
    assert str(err.value) == "idx_map[2]: 2 repeats idx_map[1] (expected a permutation of range(3))"
    with pytest.raises(ValueError) as err:
        get_reverse_idx([0, 5, 1])
    assert str(err.value) == "idx_map[1]: 5 is outside range(3) (expected a permutation of range(3))"


def test_calibration_record_lengths_message():
    records = [{"lengths": np.array([100, 200]), "seconds": 1.0}] * 4 + [{"lengths": np.array([1.5, 2.0]), "seconds": 1.0}]
    with pytest.raises(ValueError) as err:
        packd.calibrate(records)
    assert str(err.value) == "record 4: lengths[0]: expected an integer, got 1.5 (the array has dtype float64)"
