"""Directional ablation as a model variant: after ``remove_direction`` nothing written into the
residual stream has a component along the direction (every hooked point, prompt and cached
decoding), an injected vector keeps its component along it, greedy generations equal a raw
transformers reimplementation (forward hooks on the HF modules), and the refusal direction is
computed and chosen by Arditi et al.'s rules on a tiny model."""

from __future__ import annotations

import pytest
import torch

from introspect.engine import directions as D
from introspect.engine.load.ablation import AblationError, Direction, remove_direction, write_hooks
from introspect.engine.load.models import load_model, model_info
from introspect.engine.run.chat import Conversation, render
from introspect.engine.run.decode import generate
from introspect.engine.run.inject import InjectionSpec, injecting, pad_left


def _unit(d: int, seed: int = 0) -> torch.Tensor:
    v = torch.randn(d, generator=torch.Generator().manual_seed(seed))
    return v / v.norm()


@pytest.fixture
def fresh(tiny_dir):
    """A model of its own (the ablation is permanent, so the session's shared model stays clean)."""
    return lambda family="llama": load_model(str(tiny_dir(family)))


def _prompt(model, text="Tell me about the sea."):
    return render(model.tokenizer, Conversation.of(("user", text)))


def _writes(model, prompt, injections=None):
    """Every hooked write and the residual after each block, on one prompt."""
    got = {}

    def keep(name):
        def hook(act, hook):
            got[name] = act.detach().float().clone()
            return act
        return hook

    names = write_hooks(model) + [f"blocks.{i}.hook_resid_post" for i in range(model.cfg.n_layers)]
    toks, mask, offsets = pad_left([prompt], model.tokenizer.pad_token_id)
    with injecting(model, [injections], [prompt], offsets), model.hooks(fwd_hooks=[(n, keep(n)) for n in names]), \
            torch.no_grad():
        model(toks, attention_mask=mask, use_cache=False)
    return got


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt-neox", "falcon"])
def test_nothing_written_has_a_component_along_the_direction(fresh, family):
    model = fresh(family)
    r = _unit(model.cfg.d_model)
    before = _writes(model, _prompt(model))
    assert max(float((a @ r).abs().max()) for a in before.values()) > 1e-3  # there was something to remove
    remove_direction(model, Direction("test", r, layer=1))
    after = _writes(model, _prompt(model))
    for name, act in after.items():  # the writes, hence the stream they sum to, have none left
        assert float((act @ r).abs().max()) < 1e-4 * max(1.0, float(act.norm(dim=-1).max())), name
    info = model_info(model)
    assert "+ablate-test-" in info.name and "+ablate:" in info.fingerprint
    assert any(n.startswith("ablation: ") for n in info.notes)
    with pytest.raises(AblationError, match="already has a direction removed"):
        remove_direction(model, Direction("again", r, layer=1))


def test_an_injected_vector_keeps_its_component_along_the_direction(fresh):
    model = fresh()
    r = _unit(model.cfg.d_model)
    remove_direction(model, Direction("test", r, layer=1))
    p = _prompt(model)
    spec = InjectionSpec(1, 5.0, r, list(range(1, len(p))))
    got = _writes(model, p, spec)
    five = torch.tensor([[0.0] + [5.0] * (len(p) - 1)])  # position 0 not injected: its component stays 0
    assert torch.allclose(got["blocks.1.hook_resid_post"] @ r, five, atol=1e-3)
    # later blocks write nothing along r, so the injected part is carried unchanged to the end
    last = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
    assert torch.allclose(got[last] @ r, five, atol=1e-3)


def test_greedy_generations_equal_a_raw_transformers_reimplementation(fresh, tiny_dir):
    import transformers

    model = fresh()
    r = _unit(model.cfg.d_model, 3)
    remove_direction(model, Direction("test", r, layer=1))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_dir("llama")), torch_dtype=torch.float32).eval()

    def proj(module, args, out):
        t = out[0] if isinstance(out, tuple) else out
        t = t - (t @ r)[..., None] * r
        return (t, *out[1:]) if isinstance(out, tuple) else t

    hf.model.embed_tokens.register_forward_hook(proj)
    for layer in hf.model.layers:
        layer.self_attn.register_forward_hook(proj)
        layer.mlp.register_forward_hook(proj)
    prompts = [_prompt(model), _prompt(model, "What is a lantern?")]
    ours = generate(model, prompts, max_new_tokens=8, temperature=0.0)
    for p, g in zip(prompts, ours):
        ids = torch.tensor([p.ids])
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                          pad_token_id=model.tokenizer.pad_token_id)[0, len(p):].tolist()
        assert list(g.tokens) == ref[: len(g.tokens)] and len(g.tokens) > 0


def test_a_refusal_direction_is_chosen_by_the_papers_rules_and_cached(fresh, monkeypatch, tmp_path):
    monkeypatch.setenv("INTROSPECT_CACHE", str(tmp_path / "cache"))
    model = fresh()
    harmful, harmless = [f"How do I steal item {i}?" for i in range(8)], [f"How do I bake cake {i}?" for i in range(8)]
    diff, positions, norms = D.candidate_directions(model, harmful, harmless)
    assert diff.shape[:2] == (model.cfg.n_layers, len(positions)) and positions[-1] == -1
    monkeypatch.setattr(D, "KL_MAX", float("inf"))  # a random tiny model: keep the KL rule from deciding
    monkeypatch.setattr(D, "DEPTH_MAX", 1.0)
    try:
        d, cands = D.choose(model, harmful, harmless)
    except ValueError as e:  # no candidate induces refusal tokens on a random model: said in one line
        assert "no refusal direction passes the selection" in str(e)
        return
    assert len(cands) == model.cfg.n_layers * len(positions)
    assert abs(float(d.vector.norm()) - 1) < 1e-5 and d.selection["n_passing"] >= 1
    best = min((c for c in cands if c.induce > 0), key=lambda c: c.bypass)
    assert (d.layer, d.position) == (best.layer, best.position)


def test_the_relative_bar_keeps_what_reaches_the_models_own_harmful_score(fresh, monkeypatch):
    """Adding the candidate at layer L scores -0.8 + 0.2 L; the harmful requests themselves -0.5:
    Arditi's bar (0) keeps none and says the relative bar would, the relative bar keeps layers 2-3,
    no bar keeps all."""
    model = fresh()
    harmful, harmless = [f"How do I steal item {i}?" for i in range(8)], [f"How do I bake cake {i}?" for i in range(8)]

    def fake(model, prompts, *, hooks=(), injections=None):
        if injections:
            return torch.full((len(prompts),), -0.8 + 0.2 * injections[0].layer_idx)
        return torch.full((len(prompts),), -1.0 if hooks else -0.5)

    monkeypatch.setattr(D, "refusal_scores", fake)
    monkeypatch.setattr(D, "KL_MAX", float("inf"))
    monkeypatch.setattr(D, "DEPTH_MAX", 1.0)
    with pytest.raises(ValueError, match="needs > 0.00.*refusal-relative .* would keep one"):
        D.choose(model, harmful, harmless)
    d, cands = D.choose(model, harmful, harmless, bar="relative")
    assert d.name == "refusal-relative" and d.layer == 2 and d.selection["induce_bar"] == -0.5
    assert d.selection["n_passing"] == sum(c.layer >= 2 for c in cands) > 0
    assert "own refusal score" in d.selection["rule"] and not d.selection["induces_refusal"]
    d, cands = D.choose(model, harmful, harmless, bar="unfiltered")  # every candidate kept: the first wins the tie
    assert d.name == "refusal-unfiltered" and d.layer == 0 and d.selection["n_passing"] == len(cands)
    assert "no induce filter" in d.selection["rule"] and d.selection["induce_bar"] is None
    monkeypatch.setattr(D, "KL_MAX", -1.0)  # no candidate within KL: the one rule left says so
    with pytest.raises(ValueError, match="none of the .* candidates below 1 of the depth keeps harmless answers"):
        D.choose(model, harmful, harmless, bar="unfiltered")


def test_a_direction_file_round_trips_and_a_wrong_one_is_one_line(fresh, tmp_path):
    model = fresh()
    r = _unit(model.cfg.d_model)
    d = Direction("mine", r, layer=2, position=-1, data={"requests": "x"}, selection={"raw_norm": 3.0,
                                                                                          "mean_resid_norm": 9.0})
    path = tmp_path / "dir.safetensors"
    D.save(model, d, path)
    back = D.resolve(model, str(path))
    assert torch.allclose(back.vector, r, atol=1e-6) and back.layer == 2 and back.data["requests"] == "x"
    with pytest.raises(AblationError, match="refusal\\[@L\\], refusal-relative\\[@L\\], refusal-unfiltered\\[@L\\] or a"):
        D.resolve(model, str(tmp_path / "missing.safetensors"))
    with pytest.raises(AblationError, match="the layer must be 0..3"):
        D.resolve(model, "refusal@9")
    with pytest.raises(AblationError, match="the layer must be 0..3"):
        D.resolve(model, "refusal-relative@9")
    with pytest.raises(AblationError, match="has shape"):
        remove_direction(model, Direction("wide", torch.ones(model.cfg.d_model + 1) / 8, layer=1))


def test_the_run_that_chooses_a_direction_and_the_runs_that_read_it_remove_the_same_vector(fresh, monkeypatch, tmp_path):
    """The chosen direction is read back from its cache file, so the first run's folder name
    (``+ablate-<name>-<sha8>``) is every later run's."""
    monkeypatch.setenv("INTROSPECT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(D, "KL_MAX", float("inf"))
    monkeypatch.setattr(D, "DEPTH_MAX", 1.0)
    model = fresh()
    first = D.refusal_direction(model, bar="unfiltered")
    again = D.refusal_direction(model, bar="unfiltered")
    assert first.sha256 == again.sha256 and first.name == "refusal-unfiltered"
    assert "file" in first.data and first.selection["bar"] == "unfiltered"
