"""The ``introspect`` Inspect provider on a tiny random model: registration, per-request
injection, stream reproducibility, the placebo's bitwise match with its control, and errors.

Skips when the ``inspect`` extra (inspect-ai) is not installed."""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai.model import ChatMessageUser, GenerateConfig, get_model  # noqa: E402

from introspect.integrations.inspect import provider as P  # noqa: E402
from introspect.integrations.inspect.request import RequestError, parse_request  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPT = [ChatMessageUser(content="Tell me about it.")]


@pytest.fixture(scope="module")
def tiny_path(tiny_dir, tiny_model):
    path = str(tiny_dir("llama"))
    # the provider's per-process cache holds the session's tiny model: loaded once for every test
    P._MODELS.setdefault(P.model_key(path), tiny_model("llama"))
    return path


@pytest.fixture(scope="module")
def model(tiny_path):
    return get_model(f"introspect/{tiny_path}", memoize=False)


def ask(model, inject=None, messages=PROMPT, **config):
    cfg = GenerateConfig(max_tokens=config.pop("max_tokens", 8), temperature=config.pop("temperature", 1.0),
                         extra_body=None if inject is None else {"introspect": inject}, **config)
    return asyncio.run(model.generate(messages, config=cfg))


def test_entry_point_is_listed_and_resolves():
    eps = {ep.name: ep.value for ep in entry_points(group="inspect_ai")}
    assert eps.get("introspect") == "introspect.integrations.inspect._registry"
    # another package's provider names are not ours to take
    assert not {"transformer_lens", "tl_bridge"} & {k for k, v in eps.items() if v.startswith("introspect.")}
    n_loaded = len(P._MODELS)
    m = get_model("introspect/some-model-never-loaded", memoize=False, batch_size=4, dtype="float32")
    assert type(m.api).__name__ == "IntrospectAPI" and m.api.name == "some-model-never-loaded"
    assert m.api.batch_size == 4 and len(P._MODELS) == n_loaded  # __init__ loads nothing
    with pytest.raises(ValueError, match="unknown model args"):
        get_model("introspect/x", memoize=False, temperature_typo=1)
    s = get_model("introspect/x", memoize=False, adapter="some/dir", adapter_scale="0.5")  # -M values may be strings
    assert s.api.adapter_scale == 0.5 and len(P._MODELS) == n_loaded
    with pytest.raises(ValueError, match="adapter scale must be a finite number > 0"):
        get_model("introspect/x", memoize=False, adapter="some/dir", adapter_scale=0)
    with pytest.raises(ValueError, match="adapter_scale needs an adapter"):
        get_model("introspect/x", memoize=False, adapter_scale=0.5)


def test_registry_module_imports_only_inspect():
    src = (ROOT / "src/introspect/integrations/inspect/_registry.py").read_text()
    top = [n for n in ast.parse(src).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    mods = {(n.module if isinstance(n, ast.ImportFrom) else n.names[0].name).split(".")[0] for n in top}
    assert mods <= {"__future__", "typing", "inspect_ai"}, mods


def test_loading_the_entry_point_does_not_import_torch():
    code = "import sys, introspect.integrations.inspect._registry; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_same_stream_key_same_text(model):
    inj = {"concept": "bread", "layer": 2, "alpha": 4, "stream_key": "trial-0"}
    a, b = ask(model, inj), ask(model, inj)
    assert a.completion == b.completion and a.completion
    ma, mb = a.metadata["introspect"], b.metadata["introspect"]
    assert ma["choices"][0]["stream_seed"] == mb["choices"][0]["stream_seed"]
    assert ma["choices"][0]["logprob"] == mb["choices"][0]["logprob"]
    other = ask(model, {**inj, "stream_key": "trial-1"})
    assert other.metadata["introspect"]["choices"][0]["stream_seed"] != ma["choices"][0]["stream_seed"]
    assert other.completion != a.completion  # another stream draws other tokens (T = 1, 8 tokens)


def test_zero_injection_reproduces_its_control_bitwise(model):
    group = {"concept": "bread", "layer": 2, "alpha": 2, "alpha_units": "resid", "stream_key": "k",
             "positions": {"from_text": "about"},
             "conditions": [{"direction": "none"}, {"direction": "placebo"}, {"direction": "concept"},
                            {"direction": "negative"}, {"direction": "random"}]}
    out = ask(model, group, max_tokens=12, num_choices=2)
    rows = out.metadata["introspect"]["choices"]
    assert [r["label"] for r in rows] == [lab for lab in ("control", "placebo", "injected", "negative", "random")
                                          for _ in range(2)]
    texts = [c.message.text for c in out.choices]
    lps = [r["logprob"] for r in rows]
    for k in range(2):  # placebo == control, sample by sample: same tokens, same log-probabilities
        assert texts[2 + k] == texts[k] and lps[2 + k] == lps[k]
        assert rows[2 + k]["stream_seed"] == rows[k]["stream_seed"]
    assert texts[0] != texts[1]  # two samples draw from two streams
    # a real push at twice the residual norm changes the answer (the test could fail)
    assert texts[4] != texts[0] and texts[6] != texts[0] and texts[8] != texts[0]
    inj = rows[4]
    assert inj["alpha_as"]["resid"] == pytest.approx(2.0) and inj["alpha_effective"] > 0
    assert rows[6]["alpha_effective"] == pytest.approx(-inj["alpha_effective"])
    pos = inj["injected_positions"]
    assert pos["generated"] and pos["hook"] == "blocks.2.hook_resid_post"
    start, end = pos["prompt"][0]
    assert end == out.metadata["introspect"]["prompt_tokens"] and 0 < start < end
    assert rows[0]["alpha_effective"] == 0.0 and "injected_positions" not in rows[0]


def test_metadata_is_json_and_says_how_it_was_made(model, tiny_model):
    out = ask(model, {"concept": "ocean", "layer": 1, "alpha": 3, "stream_key": "m"}, seed=7)
    meta = out.metadata["introspect"]
    assert json.loads(json.dumps(meta)) == meta  # plain JSON: no tensor, array or object
    assert meta["fingerprint"] == tiny_model("llama").introspect_info.fingerprint
    assert {"torch", "transformers", "transformer-lens", "introspect", "inspect_ai"} <= set(meta["versions"])
    from importlib.metadata import version

    assert meta["versions"]["inspect_ai"] == version("inspect-ai")  # found under its normalised name
    assert meta["sampling"]["temperature"] == 1.0 and meta["max_new_tokens"] == 8 and meta["seed"] == 7
    row = meta["choices"][0]
    assert row["stop_reason"] in ("eos", "stop", "length") and row["alpha_as"]["raw"] == pytest.approx(3.0)
    assert out.choices[0].stop_reason == {"eos": "stop", "stop": "stop", "length": "max_tokens"}[row["stop_reason"]]
    assert sum(meta["fired"].values()) > 0 and out.usage.output_tokens == row["n_tokens"]


def test_no_request_is_a_plain_model(model):
    a, b = ask(model, temperature=0), ask(model, temperature=0)
    assert a.completion == b.completion
    assert a.metadata["introspect"]["choices"][0]["direction"] == "none"


@pytest.mark.parametrize("bad, msg", [
    ({"concept": "bread", "layer": 2}, "alpha"),
    ({"concept": "bread", "alpha": 2}, "integer layer"),
    ({"concept": "bread", "layer": 2, "alpha": 2, "vector": [0.1, 0.2]}, "unknown keys"),
    ({"concept": "bread", "layer": 2, "alpha": 2, "direction": "sideways"}, "unknown"),
    ({"concept": "bread", "layer": 2, "alpha": 2, "alpha_units": "furlongs"}, "alpha_units"),
    ({"concept": "bread", "layer": 2, "alpha": 2, "positions": "middle"}, "positions"),
    ({"concept": "bread", "layer": 2, "alpha": 2, "conditions": [{"stream_key": "x"}]}, "top level"),
    ({"concept": "bread", "layer": 2, "alpha": 2, "conditions": [{}, {}]}, "labels must differ"),
    ({"direction": "concept", "layer": 2, "alpha": 2}, "needs a concept"),
])
def test_malformed_requests_fail_with_a_reason(bad, msg):
    with pytest.raises(RequestError, match=msg):
        parse_request({"introspect": bad})


def test_a_tensor_in_a_request_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(RequestError, match="never tensors"):
        parse_request({"introspect": {"concept": "bread", "layer": 2, "alpha": torch.tensor(2.0)}})


def test_model_errors_reach_the_caller(model):
    with pytest.raises(RequestError, match="out of range"):
        ask(model, {"concept": "bread", "layer": 9, "alpha": 2})
    with pytest.raises(RequestError, match="does not occur"):
        ask(model, {"concept": "bread", "layer": 1, "alpha": 2, "positions": {"from_text": "zebra crossing"}})


def test_the_provider_loads_a_model_by_path_once(tiny_dir):
    """No pre-seeded cache: the first request loads the directory (as ``load_model`` would), and
    a second provider instance with the same args reuses the loaded model."""
    path = str(tiny_dir("qwen2"))
    key = P.model_key(path, dtype="float32")
    P._MODELS.pop(key, None)
    a = get_model(f"introspect/{path}", memoize=False, dtype="float32")
    assert key not in P._MODELS  # nothing loaded yet
    out = ask(a, {"concept": "bread", "layer": 3, "alpha": 2, "stream_key": "q"}, max_tokens=4)
    assert key in P._MODELS and out.metadata["introspect"]["fingerprint"] == P._MODELS[key].introspect_info.fingerprint
    b = get_model(f"introspect/{path}", memoize=False, dtype="float32")
    assert b.api.model() is P._MODELS[key]
    assert ask(b, {"concept": "bread", "layer": 3, "alpha": 2, "stream_key": "q"}, max_tokens=4).completion == out.completion
    P._MODELS.pop(key)


def _direct_logprobs(hf, ids):
    """The next-token log-softmax of a plain forward pass of the wrapped HF model (no engine)."""
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        logits = hf.original_model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return torch.log_softmax(logits, dim=-1)


def test_logprobs_are_the_decoding_s_own(model, tiny_path):
    """With ``logprobs``: per generated token its log-prob and the step's top k, plain floats,
    equal to a direct forward pass's log-softmax at steps 0 and 1; the greedy token is the top one."""
    from introspect.integrations.inspect.messages import rendered

    out = ask(model, temperature=0, max_tokens=6, logprobs=True, top_logprobs=5)
    row = out.metadata["introspect"]["choices"][0]
    content = out.choices[0].logprobs.content
    assert len(content) == row["n_tokens"] >= 2
    hf = P.loaded_model(tiny_path)
    prompt = rendered(hf.tokenizer, PROMPT, {}, "positions")
    ids = list(prompt.ids)
    for step in (0, 1):
        direct = _direct_logprobs(hf, ids)
        vals, top_ids = direct.topk(5)
        got = content[step].top_logprobs
        assert [t.token for t in got] == [P.token_text(hf.tokenizer, i) for i in top_ids.tolist()]
        assert [t.logprob for t in got] == pytest.approx(vals.tolist(), abs=1e-5)
        assert all(type(t.logprob) is float for t in got) and type(content[step].logprob) is float
        ids.append(int(top_ids[0]))  # greedy: the next step's prompt ends with the top token
    for lp in content:  # the sampled (greedy) token is among the top k, as the top one
        assert (lp.token, lp.logprob) == (lp.top_logprobs[0].token, lp.top_logprobs[0].logprob)
    assert "".join(lp.token for lp in content) == out.completion
    assert sum(lp.logprob for lp in content) == pytest.approx(row["logprob"], abs=1e-6)


def test_sampled_logprobs_and_none_when_not_asked(model):
    """At T = 1 the sampled token's log-prob is its own (they sum to the metadata's), the top k
    of step 0 are the prompt's (as greedy's); without ``logprobs`` no ``Logprobs``; without
    ``top_logprobs`` the tokens' log-probs only."""
    greedy = ask(model, temperature=0, max_tokens=3, logprobs=True, top_logprobs=3)
    hot = ask(model, {"stream_key": "lp"}, temperature=1.0, max_tokens=6, logprobs=True, top_logprobs=3,
              num_choices=2)
    for c, row in zip(hot.choices, hot.metadata["introspect"]["choices"]):
        assert sum(lp.logprob for lp in c.logprobs.content) == pytest.approx(row["logprob"], abs=1e-6)
        assert [t.logprob for t in c.logprobs.content[0].top_logprobs] == pytest.approx(
            [t.logprob for t in greedy.choices[0].logprobs.content[0].top_logprobs], abs=1e-6)
        assert all(lp.logprob <= lp.top_logprobs[0].logprob + 1e-6 for lp in c.logprobs.content)
    assert ask(model, temperature=0, max_tokens=3).choices[0].logprobs is None
    bare = ask(model, temperature=0, max_tokens=3, logprobs=True).choices[0].logprobs.content
    assert bare and all(lp.top_logprobs is None for lp in bare)


def test_seb_on_our_provider_reads_decisions_from_its_logprobs(tiny_path, tmp_path):
    """An SEB task run on an ``introspect/`` model: its decisions come back with log-probs, so
    the trial is read from them (before, our models were always read from text)."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.log import read_eval_log

    from introspect.integrations.inspect import seb as S
    from introspect.integrations.inspect.records import records_from_log

    task = S.seb_restriction(n=1, draws=1, temperature=0.0, decision_tokens=3, response_tokens=6, prefill=True)
    logs = inspect_eval(task, model=get_model(f"introspect/{tiny_path}", memoize=False), display="none",
                        log_dir=str(tmp_path), log_format="json")
    assert logs[0].status == "success", logs[0].error
    log = read_eval_log(logs[0].location)
    judge = log.samples[0].store[S.SEB_KEY]["judge"][0]
    assert judge["choices"][0]["logprobs"]["content"][0]["top_logprobs"]  # the provider returned them
    rec = records_from_log(log)[1]
    assert rec["grade"]["decision_source"] == "logprobs" and rec["variant"] == "own+logprobs+answer-prefill"
