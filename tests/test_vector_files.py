"""Vectors in and out: an exported file re-imported gives the built vectors' answers and grades,
a Python mapping of concept → tensor is injected at its own size with the model's residual norm,
and a file for another width or model, or one that lacks a word, is refused in one line before
anything is written."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from introspect.engine import vector_files as VF
from introspect.engine.vectors import ConceptVector, build_concept_vectors
from introspect.records.jsonl import read_records
from introspect.tasks.base import ConfigError, TaskConfig
from introspect.tasks.prompts import load_words
from introspect.tasks.runner import make_context, run_grid

ROOT = Path(__file__).resolve().parents[1]
LAYERS = (1, 2)
CFG = TaskConfig(layers=(1,), alphas=(6.0,), alpha_units="resid", n_concepts=2, max_new_tokens=4,
                 seed=5).with_options(n_bias=1)


def _export(tiny_dir, path: Path, *extra: str) -> int:
    from experiments.vectors import main

    return main(["--model", str(tiny_dir("llama")), "--layers", *map(str, LAYERS), "--export", str(path), *extra])


def _trials(path: Path) -> dict[str, dict]:
    return {r["trial_id"]: r for r in read_records(path) if r["type"] == "trial"}


def _headers(path: Path) -> list[dict]:
    return [r for r in read_records(path) if r["type"] == "header"]


@pytest.fixture
def exported(tiny_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT))
    path = tmp_path / "vecs.safetensors"
    assert _export(tiny_dir, path) == 0, capsys.readouterr().err
    assert "use it with --vectors" in capsys.readouterr().out
    return path


def test_the_file_holds_the_built_vectors_with_their_norms_and_provenance(exported, tiny_model):
    model = tiny_model("llama")
    words = load_words()
    vs = VF.read(exported)
    built = build_concept_vectors(model, words.targets, LAYERS, words.baseline)
    assert set(vs.vectors) == set(built) and vs.layers == list(LAYERS) and vs.d_model == model.cfg.d_model
    for key, cv in built.items():
        got = vs.vectors[key]
        assert torch.allclose(got.vector, cv.vector, atol=1e-6)
        assert got.raw_norm == pytest.approx(cv.raw_norm, rel=1e-6)
        assert got.mean_resid_norm == cv.mean_resid_norm
    assert vs.sha256 == VF.vectors_hash(built)  # the file's hash is the built vectors' own
    assert vs.built["baseline"] == list(words.baseline) and vs.built["chat"] is True
    from safetensors import safe_open

    with safe_open(str(exported), framework="pt") as fh:  # another tool sees hook-named raw-size tensors
        t = fh.get_tensor("blocks.1.hook_resid_post/" + words.targets[0])
    assert float(t.norm()) == pytest.approx(built[(words.targets[0], 1)].raw_norm, rel=1e-5)


def test_an_exported_file_reimported_gives_the_same_answers_and_grades(exported, tiny_model, tmp_path):
    model = tiny_model("llama")
    a = run_grid(model, ["A"], CFG, tmp_path / "out", progress=False)
    b = run_grid(model, ["A"], replace(CFG, vectors_file=str(exported)), tmp_path / "out", progress=False)
    assert b.model.startswith(a.model + "+vectors-") and b.fingerprint == a.fingerprint  # own folder, same streams
    ta, tb = _trials(a.files["A"]), _trials(b.files["A"])
    assert ta.keys() == tb.keys() and len(ta) > 4
    for tid, ra in ta.items():
        rb = tb[tid]
        assert (rb["response"], rb["grade"], rb["condition"], rb["word"]) == \
            (ra["response"], ra["grade"], ra["condition"], ra["word"]), tid
        if ra.get("p_yes") is not None:
            assert rb["p_yes"] == pytest.approx(ra["p_yes"], rel=1e-4, abs=1e-6)
    from introspect.report import load_results

    both = load_results(tmp_path / "out")  # one folder holding both: neither run's trials hide the other's
    assert set(both["model_id"]) == {a.model, b.model} and len(both) == len(ta) + len(tb)
    (ha,), (hb,) = _headers(a.files["A"]), _headers(b.files["A"])
    assert ha["vectors"]["source"] == "built" and hb["vectors"]["source"] == "file"
    assert hb["vectors"]["path"] == str(exported) and hb["config"]["vectors_file"] == str(exported)
    assert hb["vectors"]["made_for"]["fingerprint"] == a.fingerprint
    from introspect.records import schema as S

    pytest.importorskip("jsonschema")
    assert S.errors(ha, "header") == [] and S.errors(hb, "header") == []


def test_a_python_mapping_is_injected_at_its_own_size_with_the_models_resid_norm(tiny_model, tmp_path):
    model = tiny_model("llama")
    words = load_words()
    d = model.cfg.d_model
    g = torch.Generator().manual_seed(0)
    mapping = {w: 3.0 * torch.randn(d, generator=g) for w in words.targets}
    ctx = make_context(model, CFG, vectors=mapping)
    built = build_concept_vectors(model, words.targets[:1], [1], words.baseline)[(words.targets[0], 1)]
    cv = ctx.vectors.get(words.targets[0], 1)
    assert cv.raw_norm == pytest.approx(float(mapping[words.targets[0]].norm()), rel=1e-6)
    assert torch.allclose(cv.vector * cv.raw_norm, mapping[words.targets[0]], atol=1e-5)
    assert cv.mean_resid_norm == pytest.approx(built.mean_resid_norm, rel=1e-5)  # "resid" α means the same
    s = run_grid(model, ["A"], CFG, tmp_path / "py", progress=False, vectors=mapping)
    (h,) = _headers(s.files["A"])
    assert h["vectors"]["source"] == "python" and h["vectors"]["words"] == list(words.targets)
    assert s.model.endswith(f"+vectors-{h['vectors']['sha256'][:8]}")


def test_mapping_errors_name_the_word_and_the_fix(tiny_model):
    model = tiny_model("llama")
    words = load_words()
    d = model.cfg.d_model
    with pytest.raises(VF.VectorFileError, match=rf"shape \({d + 1},\), this model's residual stream needs \[{d}\]"):
        make_context(model, CFG, vectors={w: torch.ones(d + 1) for w in words.targets})
    with pytest.raises(VF.VectorFileError, match="norm 0.0: need a finite, non-zero vector"):
        make_context(model, CFG, vectors={w: torch.zeros(d) for w in words.targets})
    with pytest.raises(ConfigError, match=r"has no vector for .* run at those layers with a --words-file"):
        make_context(model, CFG, vectors={words.targets[0]: torch.ones(d)})


def _fake_file(path: Path, d: int, fingerprint: str, words) -> None:
    cvs = [ConceptVector(w, 1, torch.ones(d) / d ** 0.5, 2.0, 10.0) for w in words]
    VF.save(path, cvs, model_id="other-model", fingerprint=fingerprint, d_model=d)


@pytest.mark.parametrize("case", ["width", "model", "layer", "damaged", "foreign"])
def test_a_file_for_another_model_layer_or_width_is_one_line_and_nothing_is_written(case, tiny_dir, tiny_model,
                                                                                   tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT))
    from experiments.run import main

    model = tiny_model("llama")
    words = load_words()
    f = tmp_path / "v.safetensors"
    d, fp = model.cfg.d_model, model.introspect_info.fingerprint
    expect = {"width": f"holds d_model={d + 8} vectors, this model's residual stream is {d} wide",
              "model": "was made for other-model (fingerprint not-this-one)",
              "layer": "has no vector for", "damaged": "does not match its sha256",
              "foreign": "is not an introspect vectors file"}[case]
    if case == "foreign":
        from safetensors.torch import save_file

        save_file({"v": torch.ones(d)}, str(f))
    else:
        _fake_file(f, d + 8 if case == "width" else d, "not-this-one" if case == "model" else fp, words.targets)
    if case == "damaged":  # one tensor changed, its recorded hash kept
        from safetensors import safe_open
        from safetensors.torch import save_file

        with safe_open(str(f), framework="pt") as fh:
            meta, ts = fh.metadata(), {k: fh.get_tensor(k) for k in fh.keys()}
        key = next(iter(ts))
        ts[key] = ts[key] * 1.01
        save_file(ts, str(f), metadata=meta)
    out = tmp_path / "out"
    layers = ["2"] if case == "layer" else ["1"]
    rc = main(["--task", "A", "--model", str(tiny_dir("llama")), "--layers", *layers, "--alphas", "4",
               "--n-concepts", "2", "--max-new-tokens", "4", "--vectors", str(f), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and expect in err[0], err
    assert not out.exists()
