"""The published record schema (``introspect/records/schema/v1/*.schema.json``): valid draft
2020-12, tied to the header's schema version, in agreement with the runtime check on write
(``records.jsonl.validate``), its reference page generated from it, and every record every task
writes on the tiny model (and every record converted from an Inspect log) valid against it, so a
field changed without a schema change fails here. Validation needs ``jsonschema`` (the dev extra)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from introspect.records import schema as S
from introspect.records import schema_doc
from introspect.records.jsonl import (
    CONDITIONS,
    SCHEMA_VERSION,
    Record,
    SchemaError,
    make_header,
    validate,
)
from introspect.tasks.base import TASKS

ROOT = Path(__file__).resolve().parents[1]
JSON_TYPES = {int: {"integer"}, float: {"number"}, str: {"string"}, bool: {"boolean"}, dict: {"object"},
              type(None): {"null"}, list: {"array"}}


def _steer_control(**kw) -> dict:
    """A task A steering-check control: a trial valid against task A's schema."""
    rec = dict(condition="steer_control", variant="steer", word="ocean",
               grade={"mentions": False, "lp_word": -3.5, "coherent": True})
    return _trial(**{**rec, **kw})


def _types(p: dict) -> set:
    """The JSON types a property schema allows (from its type, enum, const or anyOf)."""
    if "anyOf" in p:
        return set().union(*(_types(q) for q in p["anyOf"]))
    if "type" in p:
        return set(p["type"] if isinstance(p["type"], list) else [p["type"]])
    values = p.get("enum", [p["const"]] if "const" in p else [])
    return {next(iter(JSON_TYPES[type(v)])) for v in values}


def _jsonschema():
    return pytest.importorskip("jsonschema", reason="record schema validation needs jsonschema (the dev extra)")


def _trial(**kw) -> dict:
    rec = Record(seed=0, model_id="m", task="A", condition="control", variant="paper", trial_id="0123456789abcdef",
                 run_id="r", prompt="p", response="No.", gen={"temperature": 1.0, "top_p": 1.0, "top_k": 0, "do_sample": True,
                                                              "max_new_tokens": 4, "stream_seed": 1, "stop_reason": "eos"}).to_dict()
    rec.update(kw)
    return rec


# ---------------------------------------------------------------- the files
def test_files_are_draft_2020_12_and_tied_to_the_header_version():
    js = _jsonschema()
    assert S.SCHEMA_DIR.name == f"v{SCHEMA_VERSION}"
    for name in S.names():
        s = S.load(name)
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema", name
        js.Draft202012Validator.check_schema(s)
        assert s.get("title") and s.get("description"), name
    assert S.load("header")["properties"]["schema"] == {**S.load("header")["properties"]["schema"],
                                                         "const": SCHEMA_VERSION}
    header = make_header(run_id="r", model_id="m", fingerprint="f", seed=0, config={"layers": [1]})
    assert S.errors(header) == [] and S.errors(header, "header") == []
    assert S.errors({**header, "schema": SCHEMA_VERSION + 1})  # a header of another version is not these records


def test_every_task_has_a_schema_and_the_record_schema_dispatches_to_each():
    assert set(TASKS) <= set(S.task_names()), "a registered task has no task-<name>.schema.json"
    rec = S.load("record")
    text = json.dumps(rec)
    for name in S.names():
        if name not in ("record", "trial"):  # trial.schema.json: through every task schema
            assert f'"{name}{S.SUFFIX}"' in text, f"record.schema.json never refers to {name}"
    for task in S.task_names():
        s = S.load(f"task-{task}")
        assert s["properties"]["task"] == {**s["properties"]["task"], "const": task}
        assert s["$ref"] == f"trial{S.SUFFIX}"
        for part in ("grade", "gen", "extra"):
            assert s["properties"][part].get("additionalProperties") is False, (task, part)


# ---------------------------------------------------------------- agreement with the runtime check
def test_trial_schema_is_the_record_dataclass():
    trial = S.load("trial")
    assert set(trial["properties"]) == {f.name for f in fields(Record)}
    assert set(trial["required"]) == {f.name for f in fields(Record)}  # asdict writes every field
    assert tuple(trial["properties"]["condition"]["enum"]) == CONDITIONS
    from introspect.records.jsonl import _REQUIRED, _TYPES

    assert _REQUIRED <= set(trial["required"])
    for key, types in _TYPES.items():
        allowed = set().union(*(JSON_TYPES[t] for t in types))
        declared = _types(trial["properties"][key])
        if "integer" in allowed and "number" in allowed:
            allowed.discard("integer")
        assert declared <= allowed, (key, declared, allowed)  # the schema is never looser than the check


MUTATIONS = [
    ("no type", lambda r: r.pop("type")),
    ("unknown type", lambda r: r.update(type="row")),
    ("no seed", lambda r: r.pop("seed")),
    ("no model", lambda r: r.pop("model_id")),
    ("no task", lambda r: r.pop("task")),
    ("no condition", lambda r: r.pop("condition")),
    ("unknown condition", lambda r: r.update(condition="sideways")),
    ("seed as text", lambda r: r.update(seed="0")),
    ("layer as text", lambda r: r.update(layer_idx="2")),
    ("alpha as text", lambda r: r.update(alpha="4")),
    ("injected as text", lambda r: r.update(injected="yes")),
    ("grade as list", lambda r: r.update(grade=[])),
    ("extra as text", lambda r: r.update(extra="")),
    ("p_yes as text", lambda r: r.update(p_yes="0.5")),
    ("sample as float text", lambda r: r.update(sample="1")),
    ("word as number", lambda r: r.update(word=3)),
]


@pytest.mark.parametrize("what, mutate", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_what_the_runtime_check_refuses_the_schema_refuses(what, mutate):
    _jsonschema()
    rec = _trial()
    assert validate(copy.deepcopy(rec)) and S.errors(rec, "trial") == []
    mutate(rec)
    with pytest.raises(SchemaError):
        validate(rec)
    assert S.errors(rec), what


def test_a_renamed_or_unlisted_field_fails():
    _jsonschema()
    ok = _steer_control()
    assert S.errors(ok) == []
    assert S.errors({**ok, "grade": {"mention": False, "lp_word": -3.5, "coherent": True}})  # renamed
    assert S.errors({**ok, "extra": {"new_field": 1}})  # not in task A's schema
    assert S.errors({**ok, "layers": [1]})  # no such top-level field
    assert S.errors({**ok, "condition": "clean"})  # not a condition of task A
    extra = {"inspect_sample_id": "s1", "epoch": 1, "call": 0, "label": "injected", "direction": "concept",
             "stream_key": "s1", "alpha_as": {"raw": 4.0}, "vector_word": None, "injected_positions": None,
             "placebo": False, "fingerprint": "f"}
    other = _trial(task="my_inspect_task", condition="injected", variant="default", extra=extra,
                   grade={"detected": True, "my_score": 0.5})
    assert S.errors(other) == []  # a task of one's own (an Inspect log): the generic schema
    assert S.errors({**other, "extra": {**extra, "label": 3}})


# ---------------------------------------------------------------- the reference page and the CLI
def test_reference_pages_are_generated_from_the_files(tmp_path):
    docs = ROOT / "docs"
    pages = schema_doc.pages()
    regen = "regenerate them: python -m introspect.records.schema_doc"
    for rel, text in pages.items():
        page = docs / rel
        assert page.exists(), f"{page} is missing; {regen}"
        assert page.read_text(encoding="utf-8") == text, f"{page} is stale; {regen}"
    # no page of the generator's folder is left over from a schema file that is gone
    assert {p.relative_to(docs).as_posix() for p in (docs / schema_doc.FOLDER).glob("*.md")} == \
        {rel for rel in pages if rel.startswith(schema_doc.FOLDER + "/")}
    main = pages[schema_doc.PAGE]
    for name in S.names():
        assert f"`{name}{S.SUFFIX}`" in main
    assert max(text.count("\n") for text in pages.values()) < 400  # every page short enough to read
    # the command writes the same pages, and --check tells a stale one
    assert schema_doc.main(["--docs", str(tmp_path)]) == 0
    assert {p.relative_to(tmp_path).as_posix(): p.read_text() for p in tmp_path.rglob("*.md")} == pages
    (tmp_path / schema_doc.PAGE).write_text("old")
    assert schema_doc.main(["--docs", str(tmp_path), "--check"]) == 1


def test_schema_doc_runs_as_a_module(tmp_path):
    subprocess.run([sys.executable, "-m", "introspect.records.schema_doc", "--docs", str(tmp_path)],
                   capture_output=True, text=True, check=True, cwd=ROOT)
    assert (tmp_path / schema_doc.PAGE).read_text() == schema_doc.pages()[schema_doc.PAGE]
    out = subprocess.run([sys.executable, "-m", "introspect.records.schema_doc", "--check"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_checking_files_from_the_command_line(tmp_path, capsys):
    _jsonschema()
    good = tmp_path / "good.jsonl"
    header = make_header(run_id="r", model_id="m", fingerprint="f", seed=0, config={})
    good.write_text(json.dumps(header) + "\n" + json.dumps(_steer_control()) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_steer_control(grade={"mentions": "yes", "lp_word": -1.0, "coherent": True})) + "\n{torn")
    assert S.main([str(good)]) == 0
    assert S.main([str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{good}: ok" in out and f"{bad}:1: grade" in out and f"{bad}:2: not JSON" in out
    assert S.main(["--path"]) == 0 and capsys.readouterr().out.strip() == str(S.SCHEMA_DIR)


# ---------------------------------------------------------------- every task's records on the tiny model
TINY = dict(n=2, history_len=3, n_options=4, n_tokens=(1, 2), list_tokens=6, predict_tokens=6, response_tokens=6,
            answer_tokens=6, rank_tokens=6, short_tokens=6, draws=2)
INJ = dict(layers=(1, 2), alphas=(4.0,), n_concepts=2, n_trials=1, max_new_tokens=6, batch_size=8)


def _items(tmp: Path) -> str:
    """A small multiple-choice file (hendrycks CSV) for the ability items and question sources."""
    p = tmp / "algebra_test.csv"
    p.write_text("".join(f"What is {i}?,{i},{i + 1},{i + 2},{i + 3},A\n" for i in range(12)))
    return str(p)


def _runs(items: str) -> dict[str, tuple[list[str], dict, dict, bool]]:
    """(tasks, config, options, reproducible) per run: every registered task at least once, and
    the options that add fields (the batch in reproducible mode, framings, the few-shot format,
    a placebo, rotations, cloze, a question file, prefills, fixed budgets, a calibrated pool)."""
    every = sorted(TASKS)
    return {
        "every-task-reproducible": (every, dict(INJ, n_samples=2),
                                    dict(TINY, n_bias=1, ability_items=items, pool=24, layer=2, steer=(8.0,),
                                         stratify=False), True),
        "injection-variants": (["A", "B", "C", "D"], dict(INJ, variant="all", alpha_units="resid"),
                               dict(n_bias=1, placebo=True, format="fewshot"), False),
        "sk-options": (["seb-association", "seb-restriction", "seb-difficulty", "delegate", "recovery"],
                       dict(max_new_tokens=6, batch_size=8, temperature=1.0, n_samples=2),
                       dict(TINY, prefill=True, calibrate=False, rotations=True, insert_after=[2], kinds=["random"]), False),
        "sk-files": (["seb-difficulty", "delegate", "ability"], dict(max_new_tokens=6, batch_size=8),
                     dict(TINY, format="fewshot", questions=items, ability_items=items, cloze=True), False),
        "calibrated-pool": (["delegate"], dict(max_new_tokens=6, batch_size=8),
                            dict(TINY, calibrate_pool=True, stratify=False), False),
    }


@pytest.fixture(scope="module")
def written(tiny_model, tmp_path_factory):
    """Every line the runs above wrote (run_grid: what a command-line run writes)."""
    _jsonschema()  # nothing to check the records with: skip before running the tasks
    from introspect.tasks.base import TaskConfig
    from introspect.tasks.runner import run_grid

    tmp = tmp_path_factory.mktemp("records")
    items = _items(tmp)
    lines = []
    for name, (tasks, cfg, opts, repro) in _runs(items).items():
        run_grid(tiny_model("llama"), tasks, TaskConfig(**cfg).with_options(**opts), tmp / name, progress=False,
                 reproducible=repro)
        for f in sorted((tmp / name).rglob("*.jsonl")):
            lines += [(f"{name}/{f.name}:{n}", line) for n, line in enumerate(f.read_text().splitlines(), 1)]
    return lines


def _check_all(lines):
    v = S.validator()
    per_task = {t: S.validator(f"task-{t}") for t in S.task_names()}
    bad, tasks = [], set()
    for where, line in lines:
        rec = json.loads(line)
        errs = [e.message for e in v.iter_errors(rec)]
        if rec["type"] == "trial":
            tasks.add(rec["task"])
            if rec["task"] in per_task:  # its own file alone says the same
                errs += [e.message for e in per_task[rec["task"]].iter_errors(rec)]
        else:
            errs += [e.message for e in S.validator("header").iter_errors(rec)]
        bad += [f"{where}: {m}" for m in errs]
    return bad, tasks


@pytest.mark.slow  # every task on a tiny model, ~40 s: CI (make test-all) runs it
def test_every_record_every_task_writes_validates(written):
    _jsonschema()
    bad, tasks = _check_all(written)
    assert not bad, "records the schema does not describe (change the schema with the code):\n" + "\n".join(bad[:20])
    assert tasks == set(TASKS)  # every registered task ran
    kinds = {json.loads(line)["type"] for _, line in written}
    assert kinds == {"header", "trial"}
    # the optional fields were exercised, so their schema is tested too
    text = "\n".join(line for _, line in written)
    for key in ('"batch"', '"latent_k"', '"cloze_choice"', '"baseline_rotation_letters"', '"pool_knobs"',
                '+fewshot"', '+placebo"'):
        assert key in text, key


# ---------------------------------------------------------------- records converted from Inspect logs
INSPECT_RUNS = {  # registered Inspect task -> its arguments (tiny sizes)
    "injected_thoughts": dict(n_concepts=2, max_tokens=4, n_bias=1, samples=2),
    "thoughts_vs_text": dict(n_concepts=2, max_tokens=4, variant="all"),
    "prefill_intent": dict(n_concepts=2, max_tokens=4, variant="all"),
    "internal_control": dict(n_concepts=2, n_control_words=2, variant="all"),
    "seb_association": dict(n=2, n_options=4, draws=2, list_tokens=6, predict_tokens=6, decision_tokens=3),
    "seb_restriction": dict(n=2, draws=1, temperature=0.0, decision_tokens=3, response_tokens=6, prefill=True),
    "seb_difficulty": dict(groups=1, draws=1, decision_tokens=3, rank_tokens=6, answer_tokens=6, logprobs=False),
    "ability": dict(n=3, max_tokens=4),
    "delegate_baseline": dict(n=2, history_len=2, pool=8, max_tokens=4),
}


@pytest.fixture(scope="module")
def converted(tiny_dir, tiny_model, tmp_path_factory):
    """Records converted from Inspect logs: every registered task by name on the tiny model
    (the ``introspect`` provider), the Delegate Game over the baseline's log, and a task of one's
    own on the inject solver and detection scorer."""
    pytest.importorskip("inspect_ai")
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import GenerateConfig

    from introspect.integrations.inspect import provider as P
    from introspect.integrations.inspect.records import records_from_log
    from introspect.integrations.inspect.scorers import detection
    from introspect.integrations.inspect.solvers import inject

    path = str(tiny_dir("llama"))
    P._MODELS.setdefault(P.model_key(path), tiny_model("llama"))
    tmp = tmp_path_factory.mktemp("inspect")
    runs = {name: (f"introspect/{name}", args) for name, args in INSPECT_RUNS.items()}
    runs["ability"][1]["items"] = _items(tmp)
    group = {"concept": "bread", "layer": 2, "alpha": 2, "alpha_units": "resid", "stream_key": "s1",
             "conditions": [{"direction": d} for d in ("none", "zero", "concept", "random", "negative")]
             + [{"direction": "other_concept", "vector_concept": "ocean"}]}
    runs["own"] = (Task(dataset=[Sample(id="s1", input="Tell me about it.", metadata={"introspect": group})],
                        solver=inject(), scorer=detection(), config=GenerateConfig(max_tokens=4), name="own_task"), {})
    lines, logs = [], {}
    for name, (task, args) in runs.items():
        log = inspect_eval(task, task_args=args, model=f"introspect/{path}", display="none",
                           log_dir=str(tmp / name), log_format="json")[0]
        assert log.status == "success", (name, log.error)
        logs[name] = log.location
        lines += [(name, json.dumps(r)) for r in records_from_log(log)]
    game = inspect_eval("introspect/delegate_game", model=f"introspect/{path}", display="none",
                        task_args={"baseline_log": logs["delegate_baseline"], "max_tokens": 4, "feedback": [False, True]},
                        log_dir=str(tmp / "game"), log_format="json")[0]
    assert game.status == "success", game.error
    return lines + [("delegate_game", json.dumps(r)) for r in records_from_log(game)]


@pytest.mark.slow  # every Inspect task on a tiny model, ~12 s: CI (make test-all) runs it
def test_every_record_converted_from_an_inspect_log_validates(converted):
    _jsonschema()
    bad, tasks = _check_all(converted)
    assert not bad, "converted records the schema does not describe:\n" + "\n".join(bad[:20])
    assert tasks == {"A", "B", "C", "D", "seb-association", "seb-restriction", "seb-difficulty", "ability",
                     "delegate-baseline", "delegate", "own_task"}
