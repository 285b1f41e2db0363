"""The ``introspect`` provider on a vectors file (``-M vectors=FILE``), as ``--vectors FILE`` in a
toolkit run: the injected vector is the file's (the runner's spec, bit for bit), another file's
vector changes the answers, a file for another width, model or layer is one line before anything
decodes, the context cache keeps runs with and without the file apart, and an Inspect eval's
records say where the vectors came from as the direct run's header does.

Skips when the ``inspect`` extra (inspect-ai) is not installed."""

from __future__ import annotations

import asyncio
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

import torch  # noqa: E402
from inspect_ai.model import ChatMessageUser, GenerateConfig, get_model  # noqa: E402

from introspect.engine import vector_files as VF  # noqa: E402
from introspect.engine.vectors import ConceptVector, VectorBank  # noqa: E402
from introspect.integrations.inspect import provider as P  # noqa: E402
from introspect.integrations.inspect.messages import rendered  # noqa: E402
from introspect.integrations.inspect.request import RequestError, parse_request  # noqa: E402
from introspect.tasks.base import TaskConfig, Trial  # noqa: E402
from introspect.tasks.injection import common  # noqa: E402
from introspect.tasks.prompts import load_words  # noqa: E402
from introspect.tasks.runner import make_context  # noqa: E402

PROMPT = [ChatMessageUser(content="Tell me about it.")]
LAYERS = (1, 2)
WORD = load_words().targets[0]


def _random_file(path: Path, model, resid: dict[int, float], *, seed: int, d: int | None = None,
                 fingerprint: str | None = None, layers=LAYERS, swap: dict | None = None) -> Path:
    """A vectors file of random directions (raw norm 5) for every target word at ``layers``,
    carrying the model's own mean residual norms (so ``resid`` α means what it means for built
    vectors); ``swap``: (word, layer) -> another seed for that one vector."""
    info = model.introspect_info
    d = d or int(model.cfg.d_model)
    cvs = []
    for i, w in enumerate(load_words().targets):
        for la in layers:
            s = (swap or {}).get((w, la), seed * 100_003 + i * 7 + la)
            v = torch.randn(d, generator=torch.Generator().manual_seed(s))
            cvs.append(ConceptVector(w, la, v / v.norm(), 5.0, float(resid.get(la, 10.0))))
    VF.save(path, cvs, model_id="other-model" if fingerprint else info.name,
            fingerprint=fingerprint or info.fingerprint, d_model=d)
    return path


@pytest.fixture(scope="module")
def tiny_path(tiny_dir, tiny_model):
    path = str(tiny_dir("llama"))
    P._MODELS.setdefault(P.model_key(path), tiny_model("llama"))  # the session's tiny model, loaded once
    return path


@pytest.fixture(scope="module")
def files(tiny_model, tmp_path_factory):
    """Two files for the tiny model: ``a`` (random directions) and ``b`` (``a`` with WORD's layer-2
    vector another random direction); their resid norms are the model's."""
    model = tiny_model("llama")
    resid = VectorBank(model, load_words().baseline).resid_norms(LAYERS)
    root = tmp_path_factory.mktemp("vectors")
    return {"a": _random_file(root / "a.safetensors", model, resid, seed=1),
            "b": _random_file(root / "b.safetensors", model, resid, seed=1, swap={(WORD, 2): 999}),
            "resid": resid}


def ask(model, inject=None, **config):
    cfg = GenerateConfig(max_tokens=config.pop("max_tokens", 8), temperature=config.pop("temperature", 1.0),
                         extra_body=None if inject is None else {"introspect": inject}, **config)
    return asyncio.run(model.generate(PROMPT, config=cfg))


def _raw(path: Path, word: str, layer: int) -> torch.Tensor:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return fh.get_tensor(f"blocks.{layer}.hook_resid_post/{word}")


def test_the_injected_vector_is_the_file_s_and_the_runner_s(tiny_path, tiny_model, files):
    """A concept condition adds α × the file's raw tensor; the spec equals the one the toolkit's
    runner makes on the same file (``make_context(vectors=FILE)`` + task A's ``spec_for``), and
    differs from the built vector's (so the check could fail)."""
    model = tiny_model("llama")
    vs = VF.read(files["a"])
    request = parse_request({"introspect": {"concept": WORD, "layer": 2, "alpha": 3, "stream_key": "v",
                                            "conditions": [{"direction": "concept"}, {"direction": "random"}]}})
    prompt = rendered(model.tokenizer, PROMPT, {}, "positions")
    (spec, desc), (rnd, rdesc) = P.build_specs(model, request, prompt, vectors=vs)
    raw = _raw(files["a"], WORD, 2)
    assert torch.allclose(spec.alpha * spec.vector, 3.0 * raw, atol=1e-5)
    assert desc["alpha_effective"] == pytest.approx(3.0 * float(raw.norm()), rel=1e-6)
    assert rdesc["alpha_effective"] == pytest.approx(desc["alpha_effective"])  # a Gaussian at the file's norm
    ctx = make_context(model, TaskConfig(layers=(2,), alphas=(3.0,), vectors_file=str(files["a"])))
    runner = common.spec_for(ctx, Trial("inspect", "injected", layer=2, alpha=3.0, word=WORD), prompt,
                             spec.token_positions).spec
    assert torch.equal(runner.vector, spec.vector) and runner.alpha == spec.alpha
    (built, _), _ = P.build_specs(model, request, prompt)  # no file: the toolkit's own vector
    assert float(torch.dot(built.vector, spec.vector)) < 0.9
    (other, _), _ = P.build_specs(model, request, prompt, vectors=VF.read(files["b"]))
    assert not torch.allclose(other.vector, spec.vector)


def test_a_vectors_file_changes_the_answers_and_says_so(tiny_path, files):
    """At the same strength (resid units), the file's direction changes the injected answer, a
    file with another vector for the concept changes it again, the control stays the same; the
    metadata names the file as a toolkit run's header does (model ``<model>+vectors-<sha8>``,
    same fingerprint)."""
    inj = {"concept": WORD, "layer": 2, "alpha": 4, "alpha_units": "resid", "stream_key": "vf",
           "conditions": [{"direction": "none"}, {"direction": "concept"}]}
    built = ask(get_model(f"introspect/{tiny_path}", memoize=False), inj)
    a = ask(get_model(f"introspect/{tiny_path}", memoize=False, vectors=str(files["a"])), inj)
    b = ask(get_model(f"introspect/{tiny_path}", memoize=False, vectors=str(files["b"])), inj)
    ta, tb, tc = ([c.message.text for c in o.choices] for o in (built, a, b))
    assert ta[0] == tb[0] == tc[0]  # the control: same stream, nothing added
    assert tb[1] != ta[1] and tc[1] != tb[1]
    ra, rb = built.metadata["introspect"]["choices"][1], a.metadata["introspect"]["choices"][1]
    assert rb["alpha_effective"] == pytest.approx(ra["alpha_effective"])  # the same push, another direction
    mb, ma = a.metadata["introspect"], built.metadata["introspect"]
    vs = VF.read(files["a"])
    assert mb["model_id"] == ma["model_id"] + f"+vectors-{vs.sha256[:8]}" and mb["fingerprint"] == ma["fingerprint"]
    assert mb["vectors"] == vs.record() and mb["vectors"]["path"] == str(files["a"])
    assert ma["vectors"]["source"] == "built" and "notes" not in ma
    (note,) = mb["notes"]
    assert note.startswith(f"vectors: file {files['a']} sha256 {vs.sha256[:12]}")


def test_the_context_cache_keeps_runs_with_and_without_vectors_apart(tiny_path, tiny_model, files, tmp_path):
    model = tiny_model("llama")
    va, vb = VF.read(files["a"]), VF.read(files["b"])
    keys = [P.context_key(model), P.context_key(model, va), P.context_key(model, vb)]
    assert len(set(keys)) == 3 and P.context_key(model, VF.read(files["a"])) == keys[1]
    for k in keys:
        P._CONTEXTS.pop(k, None)
    plain = get_model(f"introspect/{tiny_path}", memoize=False)
    onfile = get_model(f"introspect/{tiny_path}", memoize=False, vectors=str(files["a"]))
    inj = {"concept": WORD, "layer": 2, "alpha": 4, "alpha_units": "resid", "stream_key": "cache"}
    first = ask(plain, inj).completion
    with_file = ask(onfile, inj).completion
    assert ask(plain, inj).completion == first != with_file  # the file's bank never served the plain run
    assert onfile.api.model() is plain.api.model()  # one loaded model, two banks
    banks = P._CONTEXTS[keys[0]].vectors, P._CONTEXTS[keys[1]].vectors
    assert banks[0] is not banks[1] and banks[0].supplied is None and banks[1].supplied.sha256 == va.sha256
    assert P._CONTEXTS[keys[1]].model_id != P._CONTEXTS[keys[0]].model_id
    # the same path rewritten with other vectors is another key (its sha256), not the stale bank
    f = tmp_path / "v.safetensors"
    _random_file(f, model, files["resid"], seed=1)
    k1 = P.context_key(model, VF.read(f))
    _random_file(f, model, files["resid"], seed=2)
    assert P.context_key(model, VF.read(f)) != k1


@pytest.mark.parametrize("case", ["width", "model", "layer_range", "layer_missing"])
def test_a_file_for_another_model_layer_or_width_is_one_line_before_anything_decodes(case, tiny_path, tiny_model,
                                                                                     files, tmp_path, monkeypatch):
    model = tiny_model("llama")
    d, fp = int(model.cfg.d_model), model.introspect_info.fingerprint
    f = tmp_path / "v.safetensors"
    if case == "width":
        _random_file(f, model, files["resid"], seed=3, d=d + 8)
    elif case == "model":
        _random_file(f, model, files["resid"], seed=3, fingerprint="not-this-one")
    elif case == "layer_range":
        _random_file(f, model, files["resid"], seed=3, layers=(1, 9))
    else:
        _random_file(f, model, files["resid"], seed=3, layers=(1,))
    expect = {"width": f"holds d_model={d + 8} vectors, this model's residual stream is {d} wide: export "
                       "vectors from this model (introspect vectors --export FILE)",
              "model": f"was made for other-model (fingerprint not-this-one), this model is {fp}: export vectors "
                       "from this model",
              "layer_range": "vectors at layers [9] but this model has layers 0..3",
              "layer_missing": f"has no vector for '{WORD}'@L2 (1 missing); it holds {len(load_words().targets)} "
                               "words"}[case]
    calls = []
    monkeypatch.setattr(P, "generate", lambda *a, **k: calls.append(1) or pytest.fail("decoded"))
    m = get_model(f"introspect/{tiny_path}", memoize=False, vectors=str(f))  # the file itself reads fine
    with pytest.raises((VF.VectorFileError, RequestError)) as e:
        ask(m, {"concept": WORD, "layer": 2, "alpha": 4, "stream_key": "x"})
    msg = str(e.value)
    assert "\n" not in msg and expect in msg, msg
    assert calls == []
    if case == "layer_missing":  # what would be right: the layers it holds, or an export at layer 2
        assert "at layers [1]" in msg and "introspect vectors --layers 2 --export FILE" in msg
        assert m.api.model() is model  # the file suits the model; only that request asked too much
    else:  # a task asking for the model (its default layers) meets the same line
        with pytest.raises(VF.VectorFileError) as again:
            m.api.model()
        assert str(again.value) == msg


@pytest.mark.parametrize("case", ["missing", "foreign", "damaged"])
def test_an_unreadable_vectors_file_fails_when_the_provider_is_made(case, tiny_model, files, tmp_path):
    f = tmp_path / "v.safetensors"
    expect = {"missing": "does not exist; write one with introspect vectors --export FILE",
              "foreign": "is not an introspect vectors file", "damaged": "does not match its sha256"}[case]
    if case == "foreign":
        from safetensors.torch import save_file

        save_file({"v": torch.ones(4)}, str(f))
    elif case == "damaged":
        from safetensors import safe_open
        from safetensors.torch import save_file

        with safe_open(str(files["a"]), framework="pt") as fh:
            meta, ts = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}
        key = next(iter(ts))
        ts[key] = ts[key] * 1.01
        save_file(ts, str(f), metadata=meta)
    n_loaded = len(P._MODELS)
    with pytest.raises(VF.VectorFileError) as e:
        get_model("introspect/some-model-never-loaded", memoize=False, vectors=str(f))
    assert "\n" not in str(e.value) and expect in str(e.value)
    assert len(P._MODELS) == n_loaded  # refused before any model loads


def test_an_inspect_eval_on_a_file_is_the_direct_run_on_it(tiny_path, tiny_model, files, tmp_path, threads):
    """``injected_thoughts`` with ``-M vectors=FILE`` and ``introspect run --task A --vectors FILE``
    of the same settings: the same trials (ids), answers and p(yes) under the same model id
    ``<model>+vectors-<sha8>``, and the records' header says where the vectors came from as the
    direct run's header does (``vectors``, ``config.vectors_file``, the note)."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.log import read_eval_log

    from introspect.integrations.inspect.records import records_from_log
    from introspect.integrations.inspect.tasks import injected_thoughts
    from introspect.records.jsonl import read_records
    from introspect.tasks.runner import run_grid

    threads(1)
    model = tiny_model("llama")
    cfg = TaskConfig(layers=(1,), alphas=(2.0,), n_concepts=2, n_trials=1, seed=0, max_new_tokens=5, variant="paper",
                     batch_size=8, vectors_file=str(files["a"])).with_options(n_bias=0, steer_check=False,
                                                                               latent_naming=False)
    summary = run_grid(model, ["A"], cfg, tmp_path / "direct", progress=False)
    direct = read_records(summary.files["A"])
    d_head = next(r for r in direct if r["type"] == "header")
    d_trials = {r["trial_id"]: r for r in direct if r["type"] == "trial"}

    task = injected_thoughts(layer=1, alpha=2.0, n_concepts=2, samples=1, max_tokens=5, n_bias=0)
    log = inspect_eval(task, model=get_model(f"introspect/{tiny_path}", memoize=False, vectors=str(files["a"])),
                       display="none", log_dir=str(tmp_path / "logs"), log_format="json")[0]
    assert log.status == "success", log.error
    recs = records_from_log(read_eval_log(log.location))
    head, trials = recs[0], [r for r in recs[1:] if not r["model_id"].endswith("+placebo")]

    assert summary.model.endswith(f"+vectors-{VF.read(files['a']).sha256[:8]}")
    assert {r["model_id"] for r in trials} == {summary.model} == {head["model_id"]}
    assert head["fingerprint"] == d_head["fingerprint"]
    assert {r["trial_id"] for r in trials} == set(d_trials) and len(trials) == 2 * 5
    for r in trials:
        twin = d_trials[r["trial_id"]]
        assert (r["condition"], r["word"], r["response"]) == (twin["condition"], twin["word"], twin["response"])
        assert r["p_yes"] == pytest.approx(twin["p_yes"], rel=1e-4, abs=1e-6)
        assert r["alpha_effective"] == pytest.approx(twin["alpha_effective"], rel=1e-6)
    assert head["vectors"] == d_head["vectors"] and head["vectors"]["source"] == "file"
    assert head["config"]["vectors_file"] == d_head["config"]["vectors_file"] == str(files["a"])
    (note,) = [n for n in d_head["notes"] if n.startswith("vectors: ")]
    assert note in head["notes"]
    if importlib.util.find_spec("jsonschema"):  # the published schema takes the header as it takes the direct run's
        from introspect.records import schema as S

        assert S.errors(head, "header") == [] and all(S.errors(r, "trial") == [] for r in trials)
    # the file mattered: the injected answers are not the built vectors' (same streams, same trial ids)
    built = run_grid(model, ["A"], replace(cfg, vectors_file=None), tmp_path / "built", progress=False)
    b_trials = {r["trial_id"]: r for r in read_records(built.files["A"]) if r["type"] == "trial"}
    injected = [t for t in d_trials if d_trials[t]["condition"] == "injected"]
    assert injected and any(b_trials[t]["response"] != d_trials[t]["response"] for t in injected)
