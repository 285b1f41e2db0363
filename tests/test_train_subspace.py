"""The adapter's read directions (introspect.train.subspace): where injections move a map's input
and replay text does not, and an adapter that never reads outside them."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from introspect.engine.load.models import load_model
from introspect.train import loop as L
from introspect.train import subspace as SUB
from tests.test_train import tiny_cfg, words_file  # noqa: F401  (the module's word-file fixture)


def test_basis_finds_the_directions_replay_leaves_empty_and_the_shift_fills():
    g = torch.Generator().manual_seed(0)
    d = 12
    leave = torch.diag(torch.tensor([1.0] * 9 + [1e-6] * 3, dtype=torch.float64))
    shift = torch.zeros(d, d, dtype=torch.float64)
    shift[9:, 9:] = torch.eye(3, dtype=torch.float64)
    noise = torch.randn(d, d, generator=g, dtype=torch.float64) * 0.01
    q = SUB.basis([shift + noise @ noise.T], leave, 3)
    assert q.shape == (d, 3)
    assert torch.allclose(q.T @ q, torch.eye(3), atol=1e-5)
    assert SUB.share(shift, q) > 0.99 and SUB.share(leave, q) < 1e-3
    # a direction the shift fills as much but replay text fills too is not read
    shift2 = torch.diag(torch.tensor([1.0] + [0.0] * 8 + [1.0] * 3, dtype=torch.float64))
    assert SUB.share(torch.diag(torch.tensor([1.0] + [0.0] * 11, dtype=torch.float64)), SUB.basis([shift2], leave, 3)) < 1e-3


@pytest.mark.parametrize("family", ["llama", "gpt2"])  # nn.Linear, and GPT-2's Conv1D (its input last too)
def test_an_adapter_with_read_dims_reads_only_its_directions(tiny_dir, words_file, tmp_path, family):  # noqa: F811
    from peft.tuners.lora import LoraLayer

    model = load_model(str(tiny_dir(family)))
    cfg = tiny_cfg(words_file, steps=4, read_dims=4, mix=(("positive", 0.5), ("gaussian", 0.25), ("clean", 0.25)))
    plan = L.prepare(model, cfg)
    bases, summary = SUB.fit(model, plan, cfg, cfg.read_dims, steps=2)
    assert summary["read_maps"] == len(bases) > 0
    assert summary["read_share_leave"] < summary["read_share_shift"]
    # the out-of-sample readings: the gates' replay items and training rows the fit did not read
    assert {"read_share_shift_unseen", "read_share_prompt_unseen"} <= set(summary)
    assert ("read_share_leave_heldout" in summary) == bool(plan.replay_heldout)  # none kept from 2 questions
    assert all(0 <= v <= 1 for k, v in summary.items() if k.startswith("read_share"))
    out = L.train(model, cfg, tmp_path / "a", progress=False)
    assert out["read_dims"] == 4 and out["read_share_leave"] < out["read_share_shift"]
    # the saved adapter: every A row inside its map's read directions, and not all zero
    model2 = load_model(str(tiny_dir(family)))
    bases2, _ = SUB.fit(model2, L.prepare(model2, cfg), cfg, cfg.read_dims)
    L.lora.attach(model2, cfg.layer, cfg.rank, cfg.lora_alpha, seed=cfg.seed)
    L.lora.load_adapter_state(model2, load_file(str(tmp_path / "a" / L.lora.WEIGHTS_FILE)))
    n = 0
    for m in model2.original_model.modules():
        if isinstance(m, LoraLayer):
            q = bases2[id(m.get_base_layer())]
            a = m.lora_A["default"].weight.detach().float()
            assert a.norm() > 0
            assert (a - a @ q @ q.T).norm() <= 1e-4 * a.norm()
            n += 1
    assert n == len(bases2)
