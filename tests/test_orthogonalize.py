"""Directional ablation in the weights (``engine.load.orthogonalize``): orthogonalized weights give
the hooked model's logits and leave no component along the direction in any residual write (six
families, tied embeddings untied with the unembedding unchanged); an architecture with norms after
the output projections (Gemma 2/3) is refused in one line with nothing changed; a failed check
restores the weights; a saved folder reloads through the toolkit's loader with the ablation note
and tag and loads in plain transformers with the same logits; the command line writes it."""

from __future__ import annotations

import json

import pytest
import torch

from introspect.engine import directions as D
from introspect.engine.load import orthogonalize as O
from introspect.engine.load.ablation import (
    ABLATION_NOTE,
    AblationError,
    Direction,
    remove_direction,
    write_hooks,
)
from introspect.engine.load.models import ABLATION_SIDECAR, load_model, model_info

FAMILIES = ["llama", "mistral", "qwen2", "gpt2", "gpt-neox", "falcon"]
TEXTS = ["Tell me about the sea.", "What is a lantern, and who lights it at dusk?"]


def _unit(d: int, seed: int = 0) -> torch.Tensor:
    v = torch.randn(d, generator=torch.Generator().manual_seed(seed))
    return v / v.norm()


def _logits(model, text: str) -> torch.Tensor:
    ids = model.tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return model(ids).float()


def _close(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| over the logit scale (at least 1): the float32 tolerance is 1e-4 of it."""
    return float((a - b).abs().max()) / max(1.0, float(b.abs().max()))


def _write_components(model, text: str, r: torch.Tensor) -> dict[str, float]:
    """Each residual write's largest component along r, relative to the write's norm."""
    got: dict[str, float] = {}

    def keep(name):
        def hook(act, hook):
            a = act.detach().float()
            got[name] = float(((a @ r).abs() / a.norm(dim=-1).clamp_min(1e-12)).max())
        return hook

    ids = model.tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad(), model.hooks(fwd_hooks=[(n, keep(n)) for n in write_hooks(model)]):
        model(ids)
    return got


def _with_biases(model):
    """Seeded random biases on every writer that has one (random-init models start them at zero,
    which would leave their projection untested)."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for _, m in O.writers(model):
            if getattr(m, "bias", None) is not None:
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    return model


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.original_model.state_dict().items()}


@pytest.fixture
def fresh(tiny_dir):
    """A model of its own (orthogonalizing edits it in place)."""
    return lambda family="llama": load_model(str(tiny_dir(family)))


@pytest.fixture(scope="module")
def gemma_dir(tiny_dir, tmp_path_factory):
    """A tiny random Gemma 2 or 3 (post-attention and post-feedforward norms), the suite's tokenizer."""
    import transformers

    made = {}

    def make(cls_name: str):
        if cls_name not in made:
            tok = transformers.AutoTokenizer.from_pretrained(tiny_dir("llama"))
            cfg = getattr(transformers, cls_name)(
                vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=512, bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
            torch.manual_seed(0)
            out = tmp_path_factory.mktemp(cls_name)
            transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
            tok.save_pretrained(out)
            made[cls_name] = out
        return made[cls_name]
    return make


@pytest.mark.parametrize("family", FAMILIES)
def test_weights_give_the_hooks_logits_and_no_write_keeps_the_direction(fresh, family):
    r = _unit(64)
    d = Direction("test", r, layer=1)
    hooked = remove_direction(_with_biases(fresh(family)), d)
    model = _with_biases(fresh(family))
    before = _write_components(model, TEXTS[0], r)
    assert max(before.values()) > 1e-2  # there was something to remove
    plain = [_logits(model, t) for t in TEXTS]
    O.orthogonalize(model, d)
    biased = 0
    for name, module in O.writers(model):  # the weights themselves: no output along r
        w = module.weight.detach().float()
        assert float((w @ r if O._axis(module) == 1 else r @ w).abs().max()) < 1e-5 * max(1.0, float(w.abs().max())), name
        b = getattr(module, "bias", None)
        assert b is None or abs(float(b.detach().float() @ r)) < 1e-6, name
        biased += b is not None
    assert biased == {"gpt2": 8, "gpt-neox": 8}.get(family, 0)  # output biases: GPT-2 and NeoX have them
    for t, p in zip(TEXTS, plain):
        got, want = _logits(model, t), _logits(hooked, t)
        assert _close(got, want) < 1e-4, (family, t, _close(got, want))
        assert _close(p, want) > 1e-3  # the ablation changed the logits: the comparison can fail
    for name, c in _write_components(model, TEXTS[1], r).items():  # no hook attached here
        assert c < 1e-4, name
    check = model.introspect_orthogonalized["check"]
    assert check["max_abs_logit_diff"] <= 1e-4 * check["logit_scale"]
    info, hinfo = model_info(model), model_info(hooked)
    assert (info.name, info.fingerprint) == (hinfo.name, hinfo.fingerprint) and "+ablate-test-" in info.name
    assert [n for n in info.notes if n.startswith(ABLATION_NOTE)] == [n for n in hinfo.notes if n.startswith(ABLATION_NOTE)]
    with pytest.raises(AblationError, match="already has a direction removed"):
        remove_direction(model, d)
    with pytest.raises(AblationError, match="already has a direction removed"):
        O.orthogonalize(model, d)


@pytest.mark.parametrize("family", ["gpt2", "falcon"])  # both tie their input and output embeddings
def test_tied_embeddings_are_untied_and_the_unembedding_is_unchanged(fresh, family):
    model = fresh(family)
    hf = model.original_model
    emb, head = O._inner(hf.get_input_embeddings()), O._inner(hf.get_output_embeddings())
    assert head.weight.data_ptr() == emb.weight.data_ptr() and hf.config.tie_word_embeddings
    unembed = head.weight.detach().clone()
    r = _unit(64, 1)
    O.orthogonalize(model, Direction("test", r, layer=1))
    head = O._inner(hf.get_output_embeddings())
    assert head.weight.data_ptr() != emb.weight.data_ptr() and not hf.config.tie_word_embeddings
    assert torch.equal(head.weight, unembed)  # the unembedding reads the original directions
    assert float((emb.weight.detach() @ r).abs().max()) < 1e-5 and float((unembed @ r).abs().max()) > 1e-2
    assert model.introspect_orthogonalized["untied_embeddings"] is True


@pytest.mark.parametrize("cls_name", ["Gemma2Config", "Gemma3TextConfig"])
def test_norms_after_the_projections_are_refused_in_one_line_and_nothing_changes(gemma_dir, cls_name, tmp_path):
    model = load_model(str(gemma_dir(cls_name)))
    hf = model.original_model
    before = _state(model)
    tied = O._inner(hf.get_output_embeddings()).weight.data_ptr() == O._inner(hf.get_input_embeddings()).weight.data_ptr()
    d = Direction("test", _unit(64), layer=1)
    with pytest.raises(AblationError) as e:
        O.save_orthogonalized(model, d, tmp_path / "out")
    msg = str(e.value)
    assert "\n" not in msg and "normalize the attention and MLP outputs" in msg and "ln1_post" in msg
    assert "--remove-direction without --save-orthogonalized" in msg
    after = _state(model)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    head_ptr = O._inner(hf.get_output_embeddings()).weight.data_ptr()
    assert (head_ptr == O._inner(hf.get_input_embeddings()).weight.data_ptr()) == tied
    assert not getattr(model, "introspect_ablation", None) and "+ablate" not in model_info(model).name
    assert list(tmp_path.iterdir()) == []  # nothing written, no temporary folder left
    remove_direction(model, d)  # the hooks still work on it


def test_a_failed_check_restores_the_weights_and_the_tie(fresh, monkeypatch):
    model = fresh("gpt2")  # tied, Conv1D projections with biases, a position embedding
    hf = model.original_model
    before = _state(model)
    edited = {}

    def fail(*args, **kw):
        edited.update(_state(model))
        return "made to fail", {}

    monkeypatch.setattr(O, "_postcheck", fail)
    with pytest.raises(AblationError, match="made to fail; weights restored"):
        O.orthogonalize(model, Direction("test", _unit(64), layer=1))
    assert any(not torch.allclose(before[k], edited[k], atol=1e-3) for k in before)  # edited when checked
    after = _state(model)
    assert all(torch.allclose(before[k], after[k], atol=1e-6) for k in before)  # then put back
    assert O._inner(hf.get_output_embeddings()).weight is O._inner(hf.get_input_embeddings()).weight
    assert hf.config.tie_word_embeddings and not getattr(model, "introspect_ablation", None)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_saved_folder_reloads_with_the_ablation_note_and_the_same_logits(fresh, family, tmp_path):
    import transformers

    d = Direction("refusal", _unit(64, 2), layer=2, position=-1, data={"requests": "x"}, selection={"kl": 0.01})
    hooked = remove_direction(fresh(family), d)
    model = fresh(family)
    out = O.save_orthogonalized(model, d, tmp_path / "no-refusal")
    assert [p.name for p in tmp_path.iterdir()] == ["no-refusal"]  # the temporary folder was renamed
    side = json.loads((out / ABLATION_SIDECAR).read_text())
    assert side["ablation"] == hooked.introspect_ablation and side["base_model"] == family
    back = load_model(str(out))
    info, hinfo = model_info(back), model_info(hooked)
    sha = hooked.introspect_ablation["sha256"]
    assert info.name == f"no-refusal+ablate-refusal-{sha[:8]}" and info.fingerprint.endswith(f"+ablate:{sha[:16]}")
    notes = [n for n in info.notes if n.startswith(ABLATION_NOTE)]
    assert notes and notes == [n for n in hinfo.notes if n.startswith(ABLATION_NOTE)]
    assert any("orthogonalized out of the weights" in n for n in info.notes)
    with pytest.raises(AblationError, match="already has a direction removed"):
        remove_direction(back, d)
    plain = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()  # no toolkit, no hook
    assert plain.config.tie_word_embeddings is False
    assert not torch.equal(plain.get_output_embeddings().weight, plain.get_input_embeddings().weight)
    for t in TEXTS:
        want = _logits(hooked, t)
        assert _close(_logits(back, t), want) < 1e-4
        ids = back.tokenizer(t, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            assert _close(plain(ids).logits.float(), want) < 1e-4


def test_a_folder_that_exists_is_refused_before_anything_changes(fresh, tmp_path):
    model = fresh()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    before = _state(model)
    with pytest.raises(AblationError, match="already exists and is not an empty folder"):
        O.save_orthogonalized(model, Direction("test", _unit(64), layer=1), tmp_path / "full")
    with pytest.raises(AblationError, match="does not exist"):
        O.save_orthogonalized(model, Direction("test", _unit(64), layer=1), tmp_path / "no" / "such")
    assert all(torch.equal(v, _state(model)[k]) for k, v in before.items())


def test_the_command_line_writes_the_folder_and_refuses_bad_input(fresh, tiny_dir, tmp_path, capsys):
    from introspect.cli import settings

    model = fresh()
    path = tmp_path / "dir.safetensors"
    D.save(model, Direction("mine", _unit(64, 4), layer=1), path)
    base = ["--model", str(tiny_dir("llama")), "--remove-direction", str(path)]
    out = tmp_path / "saved"
    assert settings.main([*base, "--save-orthogonalized", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and f"--model {out}" in printed
    assert json.loads((out / ABLATION_SIDECAR).read_text())["ablation"]["direction"] == "mine"
    for argv, why in [(["--model", str(tiny_dir("llama")), "--save-orthogonalized", str(tmp_path / "a")],
                       "needs --remove-direction"),
                      ([*base, "--task", "A", "--save-orthogonalized", str(tmp_path / "b")], "runs no task; drop --task"),
                      ([*base, "--save-orthogonalized", str(out)], "already exists")]:
        assert settings.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and why in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.safetensors", "saved"]
