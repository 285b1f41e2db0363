"""Shared fixtures: tiny random-init models of several families, saved to disk and loaded the
same way users load real ones (``load_model(path)``), plus the real embedded default (slow)."""

from __future__ import annotations

import os
from pathlib import Path

# Under pytest-xdist (``make test`` runs two workers) each worker takes its share of the cores, and
# so do the subprocesses its tests start: workers that each run torch on every core contend and run
# several times slower than one serial run. Set before torch loads; an explicit setting wins. numpy's
# BLAS pool is already up by now (a pytest plugin imports numpy), so the Makefile sets these too.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0) > 1:
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, _share)

import pytest  # noqa: E402
import torch  # noqa: E402

from introspect.engine.load.models import load_model  # noqa: E402

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

FAMILIES = {
    "llama": ("LlamaConfig", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)),
    "mistral": ("MistralConfig", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)),
    "qwen2": ("Qwen2Config", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)),
    "gpt2": ("GPT2Config", dict(n_embd=64, n_layer=4, n_head=4, n_positions=512)),
    "gpt-neox": ("GPTNeoXConfig", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                       num_attention_heads=4, max_position_embeddings=512)),
    "falcon": ("FalconConfig", dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                                    new_decoder_architecture=False, multi_query=True, alibi=False)),
}


def _train_tokenizer(path: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Frozen: the concept files as they were on 2026-11-27 (commit c80f437), in the order they were
    # read then. The tiny models' vocabulary, and with it every figure a tiny-model test checks
    # (splits, greedy choices, yes-gaps), must not move when training data is added to concepts/.
    corpus = (Path(__file__).resolve().parent / "data" / "tokenizer_corpus.txt").read_text().splitlines()
    corpus += ["Human: Tell me about it. Assistant: Ok. INJECTION: NO_INJECTION THOUGHT: REPEAT: CHOICE: 1 2 3"]
    corpus += ["Yes yes No no, yes. No. Yes, no."] * 50
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>",
                                   bos_token="<|endoftext|>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)  # the bridge needs a tokenizer that came from disk
    return fast


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A factory: family name -> directory holding a tiny random model and the test tokenizer."""
    import transformers

    root = tmp_path_factory.mktemp("tiny")
    tok_dir = root / "tokenizer"
    tok = _train_tokenizer(tok_dir)
    made: dict[str, Path] = {}

    def make(family: str) -> Path:
        if family not in made:
            cls_name, kw = FAMILIES[family]
            cfg = getattr(transformers, cls_name)(vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                                                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **kw)
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(cfg)
            out = root / family
            model.save_pretrained(out)
            tok.save_pretrained(out)
            made[family] = out
        return made[family]

    return make


@pytest.fixture(scope="session")
def tiny_model(tiny_dir):
    """A factory: family name -> loaded TransformerBridge (cached per session)."""
    loaded = {}

    def get(family: str = "llama"):
        if family not in loaded:
            loaded[family] = load_model(str(tiny_dir(family)))
        return loaded[family]

    return get


@pytest.fixture(scope="session")
def default_model():
    """The real embedded default (SmolLM2-135M-Instruct, 4-bit GGUF dequantized)."""
    if os.environ.get("INTROSPECT_SKIP_SLOW"):
        pytest.skip("INTROSPECT_SKIP_SLOW is set")
    return load_model("smollm2-135m-instruct")


def pytest_collection_modifyitems(config, items):
    """A test that loads the real default model is slow, whether or not it says so."""
    for item in items:
        if "default_model" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Vector and replay caches go to a per-test dir unless a test opts into the shared one."""
    monkeypatch.setenv("INTROSPECT_CACHE_VECTORS", str(tmp_path / "vectors"))
    monkeypatch.setenv("INTROSPECT_CACHE_REPLAY", str(tmp_path / "replay"))


@pytest.fixture
def threads():
    """Set torch's thread count for one test and restore it after (batch invariance is bitwise
    with one thread only)."""
    import torch

    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)
