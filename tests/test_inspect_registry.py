"""Inspect tasks by name: the entry point registers every toolkit Inspect task as
``introspect/<task>`` (torch-free until a task is created), ``inspect_ai.eval("introspect/...")``
runs them, and task A (B, C) without ``-T layer=`` injects at the command line's default layers
for the model. Skips without the ``inspect`` extra."""

from __future__ import annotations

import inspect as pyinspect
import os
import subprocess
import sys
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai._util.registry import registry_find, registry_info, registry_lookup  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402

from introspect.integrations.inspect import _registry as R  # noqa: E402
from introspect.integrations.inspect import provider as P  # noqa: E402
from introspect.integrations.inspect.records import records_from_log  # noqa: E402
from introspect.tasks.runner import default_layers  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NAMES = {"injected_thoughts", "thoughts_vs_text", "prefill_intent", "internal_control", "seb_association",
         "seb_restriction", "seb_difficulty", "ability", "delegate_baseline", "delegate_game"}


def test_every_task_is_registered_by_name():
    assert set(R.TASKS) == NAMES
    eps = {ep.name: ep.value for ep in entry_points(group="inspect_ai")}
    assert eps.get("introspect") == R.__name__
    found = {registry_info(t).name for t in registry_find(lambda i: i.type == "task" and i.name.startswith("introspect/"))}
    assert found >= {f"introspect/{n}" for n in NAMES}
    for name, module in R.TASKS.items():
        task = registry_lookup("task", f"introspect/{name}")
        assert task is not None, name
        real = getattr(import_module(f"introspect.integrations.inspect.{module}"), name)
        # the stand-in's parameters are the task's own (Inspect checks -T arguments against them)
        assert R.task_params(module, name) == list(pyinspect.signature(real).parameters), name
        assert registry_info(task).metadata["params"] == list(pyinspect.signature(real).parameters), name


def test_every_module_task_is_in_the_registry_list():
    """A new ``@task`` in the integration's modules must be added to ``_registry.TASKS``."""
    import ast

    here = ROOT / "src/introspect/integrations/inspect"
    decorated = set()
    for f in here.glob("*.py"):
        for node in ast.parse(f.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                    (isinstance(d, ast.Name) and d.id == "task")
                    or (isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "task")
                    for d in node.decorator_list):
                decorated.add((node.name, f.stem))
    assert decorated == {(n, m) for n, m in R.TASKS.items()}


def test_listing_the_tasks_does_not_import_torch():
    code = ("import sys\nfrom inspect_ai._util.registry import registry_lookup\n"
            "t = registry_lookup('task', 'introspect/injected_thoughts')\n"
            "print(t is not None, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"], out.stderr[-2000:]


def test_no_layer_outside_an_introspect_model_is_one_clear_error():
    from introspect.integrations.inspect.tasks import layers_of

    assert layers_of(3) == (3,) and layers_of([1, 2]) == (1, 2)
    with pytest.raises(ValueError, match="-T layer="):
        inspect_eval("introspect/injected_thoughts", model="mockllm/model", display="none",
                     task_args={"n_concepts": 1, "n_bias": 0})


@pytest.fixture(scope="module")
def tiny(tiny_dir, tiny_model):
    path = str(tiny_dir("llama"))
    P._MODELS.setdefault(P.model_key(path), tiny_model("llama"))  # the session's model, loaded once
    return path


def test_task_a_by_name_without_a_layer(tiny, tmp_path):
    logs = inspect_eval("introspect/injected_thoughts", model=f"introspect/{tiny}", display="none",
                        log_dir=str(tmp_path), log_format="json",
                        task_args={"n_concepts": 2, "max_tokens": 4, "n_bias": 1, "placebo": False})
    assert logs[0].status == "success", logs[0].error
    log = read_eval_log(logs[0].location)
    assert log.eval.task_registry_name == "introspect/injected_thoughts"
    assert log.eval.task_args["n_bias"] == 1 and log.eval.task_args["layer"] is None
    assert log.eval.task_args["alpha"] == 4.0  # the task's own defaults are recorded, as for a file task
    layers = default_layers(4)  # the tiny model's 4 layers: what `introspect run` would inject at
    recs = records_from_log(log)
    trials = recs[1:]
    assert recs[0]["type"] == "header" and {r["task"] for r in trials} == {"A"}
    assert {r["layer_idx"] for r in trials if r["injected"]} == set(layers)
    assert len({r["trial_id"] for r in trials}) == len(trials)


@pytest.mark.slow  # a subprocess (~20 s): runs in CI (make test-all), not in the quick suite
def test_inspect_eval_command_line_by_name(tiny_dir, tmp_path):
    """``inspect eval introspect/injected_thoughts --model introspect//<tiny model>`` (no -T layer)."""
    exe = Path(sys.executable).parent / "inspect"
    if not exe.exists():
        pytest.skip("no inspect executable beside this Python")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "INSPECT_DISPLAY": "none"}
    cmd = [str(exe), "eval", "introspect/injected_thoughts", "--model", f"introspect/{tiny_dir('llama')}",
           "-T", "n_concepts=2", "-T", "max_tokens=4", "-T", "n_bias=0", "--limit", "1",
           "--log-dir", str(tmp_path / "logs"), "--display", "none", "--log-format", "json", "--no-log-realtime"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (log_file,) = (tmp_path / "logs").glob("*.json")
    log = read_eval_log(str(log_file))
    assert log.status == "success" and len(log.samples) == 1
    trials = [r for r in records_from_log(log)[1:] if not r["model_id"].endswith("+placebo")]
    assert {r["layer_idx"] for r in trials if r["injected"]} == set(default_layers(4))
