"""Scale-out without a cluster: the sbatch file SLURM would get, GPUs per local shard, weights
fetched once by the launcher, and GPU memory given back between the models of a sweep.

The sbatch text is rendered by submitit exactly as it would be submitted (``sbatch`` is never
called); GPUs and ``sinfo`` answers are monkeypatched.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments import executors as X  # noqa: E402
from experiments import launch as L  # noqa: E402
from introspect.tasks.base import ConfigError  # noqa: E402


@pytest.fixture
def fake_slurm(monkeypatch):
    """sbatch/squeue/srun 'on PATH' and a scripted sinfo."""
    answers = {"%P %l": "gpu* 2-00:00:00\n", "%G": "gpu:a100:8(S:0-1)\n"}
    monkeypatch.setattr(X.shutil, "which", lambda b: f"/usr/bin/{b}")

    def run(cmd):
        key = cmd[cmd.index("-o") + 1]
        if answers.get(key) is None:
            raise subprocess.CalledProcessError(1, cmd)
        return answers[key]

    monkeypatch.setattr(X, "_run", run)
    return answers


def _sbatch(backend) -> str:
    return backend.ex._make_submission_file_text("python -u -m submitit.core._submit x", "uid")


def test_sbatch_has_ntasks_threads_and_offline(fake_slurm, tmp_path):
    text = _sbatch(X.SlurmBackend(tmp_path, X.Resources(gpus_per_task=1), offline=True))
    assert "#SBATCH --ntasks=1" in text  # SLURM 23.11+ rejects --gpus-per-task without it
    assert "#SBATCH --gpus-per-task=1" in text and "#SBATCH --cpus-per-task=4" in text
    assert "export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-$(nproc)}" in text
    assert "export HF_HUB_OFFLINE=1" in text and "#SBATCH --requeue" in text
    plain = _sbatch(X.SlurmBackend(tmp_path, X.Resources(cpus_per_task=2)))
    assert "HF_HUB_OFFLINE" not in plain and "#SBATCH --cpus-per-task=2" in plain and "gpus-per-task" not in plain


def test_a_device_map_shard_gets_a_whole_node(fake_slurm, tmp_path):
    text = _sbatch(X.SlurmBackend(tmp_path, X.Resources(partition="gpu"), whole_node=True))
    assert "#SBATCH --gpus-per-task=8" in text and "#SBATCH --cpus-per-task=32" in text
    assert "#SBATCH --gpus-per-task=2" in _sbatch(X.SlurmBackend(tmp_path, X.Resources(gpus_per_task=2), whole_node=True))
    fake_slurm["%G"] = None  # sinfo cannot say
    with pytest.raises(ConfigError, match="give --gpus-per-task") as e:
        X.SlurmBackend(tmp_path, X.Resources(), whole_node=True)
    assert "\n" not in str(e.value)


class _FakeExecutor:
    started: list[str] = []

    def __init__(self, **kw):
        self.setup = []

    def update_parameters(self, **kw):
        self.setup = kw.get("setup", [])

    def submit(self, fn):
        _FakeExecutor.started.append(next(x for x in self.setup if "CUDA_VISIBLE_DEVICES" in x))
        return type("J", (), {"done": lambda self: False, "job_id": "0"})()


@pytest.mark.parametrize("per, parallel, want", [
    (1, 8, ["0", "1", "2", "3"]), (2, 8, ["0,1", "2,3"]), (4, 8, ["0,1,2,3"]),
])
def test_local_shards_get_the_gpus_their_model_needs(monkeypatch, tmp_path, per, parallel, want):
    monkeypatch.setattr(X.submitit, "LocalExecutor", _FakeExecutor)
    _FakeExecutor.started = []
    b = X.LocalBackend(tmp_path, X.Resources(), parallel, 4, gpus_per_shard=per, offline=True)
    b.submit({k: (lambda: 0) for k in range(6)})
    assert [s.split("=")[1] for s in _FakeExecutor.started] == want  # one group per running shard
    assert b.parallel == len(want) and len(b.queue) == 6 - len(want)


def test_gpus_for_a_model_size(monkeypatch):
    G = 1 << 30
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"total_memory": 80 * G})())
    assert X.gpus_for(16 * G) == 1 and X.gpus_for(140 * G) == 3 and X.gpus_for(0) == 1


def test_launcher_fetches_each_hub_model_once(tiny_dir, tmp_path, monkeypatch):
    import huggingface_hub

    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / ("a" * 40)
    shutil.copytree(tiny_dir("llama"), snap)
    calls = []
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", lambda self, repo_id, revision=None: [])
    monkeypatch.setattr(huggingface_hub, "snapshot_download",
                        lambda repo_id, **kw: calls.append(repo_id) or str(snap))
    need = X.prefetch(["org/tiny", str(tiny_dir("qwen2"))])
    assert calls == ["org/tiny"]  # the local folder needs no fetching
    assert need > 0


def test_gpu_memory_is_released_between_models(tiny_dir, tmp_path, monkeypatch):
    released = []
    monkeypatch.setattr(L, "release", lambda: released.append(1))
    s = {"models": [str(tiny_dir("llama")), str(tiny_dir("gpt2"))], "tasks": ["D"], "layers": [1],
         "alphas": [4.0], "n_concepts": 1, "max_new_tokens": 2, "out": str(tmp_path / "out")}
    plan = L.Launch(s, 1, "local")
    assert L.run_shard(plan, 0) > 0
    assert len(released) == 2
