"""dlkit.domains: every student's test meets the edges of the domain, and views hold the same values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dlkit import domains, fakegpu


def test_every_draw_holds_the_edges_then_random_shapes():
    for seed in range(20):
        shapes = domains.array_shapes(np.random.default_rng(seed), random=3)
        assert shapes[0] == () and (1,) in shapes and (0,) in shapes
        assert any(len(s) == 2 and s[1] == 1 for s in shapes) and any(len(s) == 2 and s[1] == 0 for s in shapes)
        assert len(shapes) == 8 and all(all(0 <= side <= 5 for side in s) and len(s) <= 3 for s in shapes)
    plain = domains.array_shapes(np.random.default_rng(0), zero_d=False, empty=False)
    assert () not in plain and not any(0 in s for s in plain)


def test_the_random_part_follows_the_seed():
    first, again = (domains.array_shapes(np.random.default_rng(7), random=6) for _ in range(2))
    assert first == again
    assert any(domains.array_shapes(np.random.default_rng(s), random=6) != first for s in range(8, 12))


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (5,), (3, 0)])
def test_numpy_views_hold_the_values_in_other_memory(shape):
    array = np.random.default_rng(0).standard_normal(shape)
    found = domains.layouts(array)
    assert found[0][1] is array
    assert len(found) == (3 if len(shape) >= 2 else 2)
    for what, view in found[1:]:
        assert np.array_equal(view, array) and view.dtype == array.dtype
        assert not view.flags.c_contiguous or array.size == 0, what
        assert not np.shares_memory(view, array)


def test_a_0d_array_has_no_views():
    assert [what for what, _ in domains.layouts(np.array(2.5))] == ["the array itself"]


def test_torch_views_keep_dtype_device_and_requires_grad():
    leaf = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    for what, view in domains.layouts(leaf)[1:]:
        assert torch.equal(view.detach(), leaf.detach()) and view.dtype == torch.float64
        assert not view.is_contiguous() and view.requires_grad and view.is_leaf, what
    with fakegpu.active() as device:
        t = torch.randn(2, 5, device=device)
        for what, view in domains.layouts(t)[1:]:
            assert view.device == device and not view.is_contiguous(), what
            assert torch.equal(view.cpu(), t.cpu())
