"""Loading: every family boots as a TransformerBridge with the hook names the toolkit relies on."""

import pytest
import torch

from introspect.models import ModelError, load_model, registry, resolve

FAMILIES = ["llama", "mistral", "qwen2", "gpt2", "gpt-neox", "falcon"]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_boots_with_resid_hooks(tiny_model, family):
    m = tiny_model(family)
    assert type(m).__name__ == "TransformerBridge"
    assert not m.training
    assert m.cfg.n_layers == 4 and m.cfg.d_model == 64
    for layer in range(4):
        assert f"blocks.{layer}.hook_resid_post" in m.hook_dict
        assert f"blocks.{layer}.hook_resid_pre" in m.hook_dict
    toks = torch.tensor([m.tokenizer("Tell me about bread")["input_ids"]])
    _, cache = m.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_resid_post"))
    assert cache["blocks.3.hook_resid_post"].shape == (1, toks.shape[1], 64)
    assert m.introspect_info.fingerprint.startswith("sha256:")


def test_fingerprint_is_stable_and_distinguishes(tiny_dir, tiny_model):
    again = load_model(str(tiny_dir("llama")))
    assert again.introspect_info.fingerprint == tiny_model("llama").introspect_info.fingerprint
    assert tiny_model("mistral").introspect_info.fingerprint != again.introspect_info.fingerprint


def test_registry_has_seed_models():
    names = set(registry())
    for want in ["smollm2-135m-instruct", "meta-llama/Meta-Llama-3-8B", "mistralai/Mistral-7B-Instruct-v0.2",
                 "tiiuae/falcon-7b", "EleutherAI/gpt-neox-20b", "Qwen/Qwen2.5-7B-Instruct", "gpt2"]:
        assert want in names


def test_unknown_model_lists_known_names():
    with pytest.raises(ModelError, match="known names: .*smollm2-135m-instruct"):
        resolve("no-such-model")


def test_dir_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelError, match="config.json"):
        resolve(str(tmp_path))


def test_hub_id_resolves_without_network():
    assert resolve("someorg/somemodel") == ("someorg/somemodel", None)


@pytest.mark.slow
def test_default_model_loads_offline(default_model):
    info = default_model.introspect_info
    assert info.fingerprint.startswith("gguf:")
    assert "4-bit" in info.notes[0]
    assert default_model.cfg.n_layers == 30 and default_model.cfg.d_model == 576
