"""dlkit.checks and dlkit.convert: the messages students read when a test fails."""

import numpy as np
import pytest
import torch

import dlkit


def test_assert_close_passes_within_dtype_tolerance():
    x = torch.randn(4, 5)
    dlkit.assert_close(x + 1e-7, x)
    dlkit.assert_close(x.double() + 1e-10, x.double())


def test_assert_close_names_the_worst_element_and_how_far_off():
    want = np.zeros((3, 4))
    got = want.copy()
    got[1, 2] = 0.5
    got[2, 3] = 0.01
    with pytest.raises(AssertionError) as err:
        dlkit.assert_close(got, want, name="my_fn")
    message = str(err.value)
    assert "my_fn is off at index [1, 2]" in message
    assert "got 0.5, expected 0" in message
    assert "2 of 12 values out of tolerance" in message


def test_assert_close_rejects_shape_mismatch_instead_of_broadcasting():
    with pytest.raises(AssertionError, match=r"has shape \(3, 1\), expected \(3,\)"):
        dlkit.assert_close(np.ones((3, 1)), np.ones(3))


def test_assert_close_reports_nan_as_overflow():
    with pytest.raises(AssertionError, match="non-finite value nan at index \\[1\\]"):
        dlkit.assert_close(np.array([1.0, np.nan]), np.array([1.0, 2.0]))


def test_assert_close_says_when_nothing_was_returned():
    with pytest.raises(AssertionError, match="forget to return"):
        dlkit.assert_close(None, np.ones(2))


def test_float32_tolerance_is_looser_than_float64():
    rtol32, _ = dlkit.tolerances_for(torch.float32)
    rtol64, _ = dlkit.tolerances_for(np.float64)
    assert rtol32 > rtol64
    x = np.ones(3, dtype=np.float32)
    dlkit.assert_close(x * (1 + 1e-5), x)  # fine in float32
    with pytest.raises(AssertionError):
        dlkit.assert_close(x.astype(np.float64) * (1 + 1e-5), x.astype(np.float64))


def test_rel_error_matches_the_gradient_check_formula():
    assert dlkit.rel_error(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == 0.0
    assert dlkit.rel_error(np.array([1.0]), np.array([3.0])) == pytest.approx(0.5)


def test_assert_same_placement_catches_dtype_upcast():
    x = torch.ones(2, dtype=torch.float32)
    dlkit.assert_same_placement(x * 2, x)
    with pytest.raises(AssertionError, match="dtype torch.float64, but the inputs had dtype torch.float32"):
        dlkit.assert_same_placement(x.double(), x, name="out")


def test_to_numpy_handles_grad_noncontiguous_and_bfloat16():
    w = torch.randn(3, 2, requires_grad=True)
    out = dlkit.to_numpy(w.T * 2)
    assert isinstance(out, np.ndarray) and out.shape == (2, 3)
    np.testing.assert_allclose(out, (w.T * 2).detach().numpy())
    assert dlkit.to_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype == np.float32
    assert dlkit.to_numpy([1, 2]).tolist() == [1, 2]


def test_assert_close_accepts_tensors_that_require_grad():
    w = torch.randn(3, requires_grad=True)
    dlkit.assert_close(w * 1.0, w)
    with pytest.raises(AssertionError, match="is off"):
        dlkit.assert_close(w * 2.0, w)


def test_assert_no_float64_catches_a_float64_detour_that_the_result_hides():
    import torch

    from dlkit import assert_no_float64

    x = torch.randn(4, 3)
    assert torch.equal(assert_no_float64(lambda t: (t * 2).sum(0), x), (x * 2).sum(0))
    with pytest.raises(AssertionError, match="computes in float64"):
        assert_no_float64(lambda t: (t.double() * 2).float(), x, name="scale")
    with pytest.raises(AssertionError, match="mul"):
        assert_no_float64(lambda t: t * torch.tensor([2.0], dtype=torch.float64), x)
