"""train.fused: LoRA maps on pieces of one fused map, saved as one LoRA on the whole."""

import pytest
import torch

from introspect.engine.load.adapters import AdapterError
from introspect.train import fused as F

P = "base_model.model."


def _pieces(seed: int = 0):
    """A fused 12 × 8 map and three pieces of it whose rows are interleaved (as Falcon's are per head)."""
    g = torch.Generator().manual_seed(seed)
    whole = torch.nn.Linear(8, 12, bias=False)
    with torch.no_grad():
        whole.weight.copy_(torch.randn(12, 8, generator=g))
    rows = {"q": torch.tensor([0, 3, 6, 9, 1, 4]), "k": torch.tensor([7, 10, 2]), "v": torch.tensor([5, 8, 11])}
    parts = {}
    for name, r in rows.items():
        lin = torch.nn.Linear(8, len(r), bias=False)
        with torch.no_grad():
            lin.weight.copy_(whole.weight[r])
        parts[f"blk.attn.{name}"] = lin
    return whole, parts, rows


def test_pieces_are_found_and_their_loras_fuse_into_the_same_weight_change_and_back():
    whole, parts, rows = _pieces()
    other = torch.nn.Linear(8, 12, bias=False)  # another map of the block: holds none of their rows
    groups = F.find_sources(parts, {"blk.attn.fused": whole, "blk.other": other})
    assert list(groups) == ["blk.attn.fused"]
    assert {p.name: p.rows.tolist() for p in groups["blk.attn.fused"]} == {f"blk.attn.{k}": v.tolist()
                                                                            for k, v in rows.items()}
    g = torch.Generator().manual_seed(1)
    state = {P + n + key: torch.randn(shape, generator=g) for n, lin in parts.items()
             for key, shape in ((F.A_KEY, (4, 8)), (F.B_KEY, (lin.weight.shape[0], 4)))}
    state[P + "blk.mlp" + F.A_KEY] = torch.ones(4, 8)  # a map of its own: passes through untouched
    fused = F.fuse(state, groups, {"blk.attn.fused": 12}, P)
    assert set(fused) == {P + "blk.attn.fused" + F.A_KEY, P + "blk.attn.fused" + F.B_KEY, P + "blk.mlp" + F.A_KEY}
    delta = fused[P + "blk.attn.fused" + F.B_KEY] @ fused[P + "blk.attn.fused" + F.A_KEY]  # rank 12 = 3 × 4
    for name, r in rows.items():
        own = state[P + f"blk.attn.{name}" + F.B_KEY] @ state[P + f"blk.attn.{name}" + F.A_KEY]
        assert torch.allclose(delta[r], own, atol=1e-6)
    back = F.unfuse(fused, groups, P)
    assert set(back) == set(state) and all(torch.equal(back[k], state[k]) for k in state)


def test_what_cannot_be_fused_is_refused():
    whole, parts, _ = _pieces()
    stranger = {"blk.attn.x": torch.nn.Linear(8, 3, bias=False)}  # random rows: in no map
    with pytest.raises(AdapterError, match="no HF map of its block holds its rows"):
        F.find_sources(stranger, {"blk.attn.fused": whole})
    twin = torch.nn.Linear(8, 12, bias=False)
    with torch.no_grad():
        twin.weight.copy_(whole.weight)
    with pytest.raises(AdapterError, match="more than one"):
        F.find_sources(parts, {"a": whole, "b": twin})
    with torch.no_grad():
        whole.weight[5] = whole.weight[0]  # a repeated row: which piece holds which cannot be told
    assert F.rows_in(parts["blk.attn.q"], whole) is None
    whole, parts, _ = _pieces()
    groups = F.find_sources(parts, {"blk.attn.fused": whole})
    state = {P + n + key: torch.ones(shape) for n, lin in parts.items()
             for key, shape in ((F.A_KEY, (4, 8)), (F.B_KEY, (lin.weight.shape[0], 4)))}
    fused = F.fuse(state, groups, {"blk.attn.fused": 12}, P)
    fused[P + "blk.attn.fused" + F.B_KEY][0, 11] = 0.5  # q's row 0 reaching into v's rank block
    with pytest.raises(AdapterError, match="not one the split maps"):
        F.unfuse(fused, groups, P)
