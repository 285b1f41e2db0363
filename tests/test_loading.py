"""Loading: weights placed before they load, fingerprints from files (never parameters), hub
snapshots named by their commit, gated repositories explained, local models called by their name.

No hub and no GPU here: the hub is a monkeypatched ``snapshot_download`` returning a folder laid
out as the hub cache lays it out, and GPUs are monkeypatched free-memory figures.
"""

from __future__ import annotations

import shutil

import pytest
import torch

import introspect.engine.load.models as M
from introspect.engine.load import devices, hub
from introspect.engine.load.gguf_files import ModelError
from introspect.engine.load.models import load_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INTROSPECT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _no_parameter_hashing(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("parameters were hashed")

    monkeypatch.setattr(M, "weights_fingerprint", boom)


def test_local_folder_named_by_its_name_and_hashed_once(tiny_dir, cache, monkeypatch, tmp_path):
    _no_parameter_hashing(monkeypatch)
    monkeypatch.setattr(hub, "REMEMBER_BYTES", 0)  # remember even these tiny files
    src = tmp_path / "my-model"
    shutil.copytree(tiny_dir("llama"), src)
    first = load_model(str(src)).introspect_info
    assert first.name == "my-model" and first.fingerprint.startswith("sha256:")
    from introspect.engine.load import gguf_files

    real = gguf_files.file_sha256
    monkeypatch.setattr(gguf_files, "file_sha256", lambda *a, **k: pytest.fail("a file was hashed again"))
    monkeypatch.chdir(tmp_path)
    again = load_model("./my-model").introspect_info  # another spelling, another working directory
    assert (again.name, again.fingerprint) == ("my-model", first.fingerprint)
    assert (cache / "file-digests.json").exists()
    monkeypatch.setattr(gguf_files, "file_sha256", real)
    other = tmp_path / "other"
    shutil.copytree(tiny_dir("mistral"), other)
    assert load_model(str(other)).introspect_info.fingerprint != first.fingerprint


def _fake_hub(root, tiny, monkeypatch, calls, cached=False):
    """A hub whose ``snapshot_download`` serves ``tiny``; with ``cached`` False nothing is in the
    local cache yet, so an offline-first lookup (``local_files_only``) finds nothing."""
    snap = root / "hub" / "models--org--tiny-chat" / "snapshots" / COMMIT
    shutil.copytree(tiny, snap)
    import huggingface_hub
    from huggingface_hub import errors

    def fake_snapshot(repo_id, revision=None, ignore_patterns=None, local_files_only=False, **kw):
        if local_files_only:
            if not cached:
                raise errors.LocalEntryNotFoundError("not cached")
            return str(snap)
        calls.append((repo_id, revision, tuple(ignore_patterns or ())))
        assert repo_id == "org/tiny-chat"
        return str(snap)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files",
                        lambda self, repo_id, revision=None: ["config.json", "model.safetensors", "pytorch_model.bin"])
    return snap


def test_hub_model_fingerprint_is_its_snapshot_commit(tiny_dir, cache, monkeypatch, tmp_path):
    _no_parameter_hashing(monkeypatch)
    calls: list = []
    snap = _fake_hub(tmp_path, tiny_dir("qwen2"), monkeypatch, calls)
    info = load_model("org/tiny-chat").introspect_info
    assert info.fingerprint == f"hub:org/tiny-chat@{COMMIT}" and info.name == "org/tiny-chat"
    (_, _, skip), = calls
    assert "*.bin" in skip and "original/*" in skip  # safetensors only, no original checkpoints
    # the same snapshot given as a folder is the same model
    assert load_model(str(snap)).introspect_info.fingerprint == info.fingerprint
    assert load_model(str(snap)).introspect_info.name == "org/tiny-chat"


def test_revision_reaches_the_hub_and_is_refused_for_a_local_folder(tiny_dir, cache, monkeypatch, tmp_path):
    _no_parameter_hashing(monkeypatch)
    calls: list = []
    snap = _fake_hub(tmp_path, tiny_dir("qwen2"), monkeypatch, calls)
    assert load_model("org/tiny-chat", revision="v1.0").introspect_info.fingerprint == f"hub:org/tiny-chat@{COMMIT}"
    assert [c[1] for c in calls] == ["v1.0"]
    with pytest.raises(ModelError, match="revision 'v1.0' applies to hub ids"):
        load_model(str(snap), revision="v1.0")


def test_a_complete_cached_snapshot_loads_offline_without_listing_or_token(tiny_dir, cache, monkeypatch, tmp_path):
    """Cached and complete: no repo listing, no download, so a gated model (whose listing would
    need a token) and an air-gapped node both load it; an incomplete one is downloaded."""
    import huggingface_hub
    from huggingface_hub import errors

    _no_parameter_hashing(monkeypatch)
    calls: list = []
    snap = _fake_hub(tmp_path, tiny_dir("qwen2"), monkeypatch, calls, cached=True)

    import httpx

    url = "https://huggingface.co/api/models/org/tiny-chat"

    def no_network(*a, **k):  # listing a gated repository without a token
        raise errors.GatedRepoError("401 Client Error. Cannot access gated repo for url " + url,
                                    response=httpx.Response(401, request=httpx.Request("GET", url)))

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", no_network)
    assert hub.snapshot("org/tiny-chat") == snap and calls == []
    assert load_model("org/tiny-chat").introspect_info.fingerprint == f"hub:org/tiny-chat@{COMMIT}"
    assert calls == []
    # a sharded snapshot whose index names a shard that never arrived is not complete
    (snap / "model.safetensors.index.json").write_text('{"weight_map": {"w": "model-00002-of-00002.safetensors"}}')
    assert hub.cached_snapshot("org/tiny-chat") is None
    with pytest.raises(ModelError, match="gated repository"):
        hub.snapshot("org/tiny-chat")


def test_gated_repository_says_hf_token(monkeypatch):
    import httpx
    import huggingface_hub
    from huggingface_hub import errors

    url = "https://huggingface.co/api/models/meta-llama/Llama-3.1-8B-Instruct"
    response = httpx.Response(401, request=httpx.Request("GET", url))

    def gated(*a, **k):
        raise errors.GatedRepoError("401 Client Error. Cannot access gated repo for url " + url, response=response)

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", gated)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", gated)
    with pytest.raises(ModelError, match="gated repository.*HF_TOKEN") as e:
        load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert "\n" not in str(e.value)


def test_offline_without_a_cached_copy_is_one_line(monkeypatch):
    import huggingface_hub
    from huggingface_hub import errors

    def offline(*a, **k):
        raise errors.LocalEntryNotFoundError("no cached snapshot")

    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", offline)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ModelError, match="not in the local hub cache.*hf download org/absent") as e:
        load_model("org/absent")
    assert "\n" not in str(e.value)


def test_weights_bytes_reads_safetensors_headers(tiny_dir, tiny_model):
    n = sum(p.numel() for p in tiny_model("llama").original_model.parameters())
    assert hub.weights_bytes(tiny_dir("llama"), 4) == 4 * n
    assert hub.weights_bytes(tiny_dir("llama"), 2) == 2 * n


@pytest.fixture
def gpus(monkeypatch):
    """Fake GPUs: a list of free bytes per device."""
    free: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(free))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(free))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (free[i], 80 * devices.GiB))
    return free


def test_placement(gpus):
    G = devices.GiB
    assert devices.place(10 * G).device_map is None  # no GPU: the CPU
    assert devices.place(10 * G, device_map="auto").max_memory is None  # nothing to cap
    gpus.extend([80 * G] * 4)
    assert devices.place(16 * G).device_map == {"": 0}  # an 8B in bf16 goes straight onto GPU 0
    assert devices.place(16 * G, "cuda:2").device_map == {"": 2}
    assert devices.place(16 * G, "cpu").device_map is None
    big = devices.place(140 * G)  # a 70B in bf16: over all four, never offloaded to the CPU
    assert big.device_map == "auto" and set(big.max_memory) == {0, 1, 2, 3}
    assert devices.place(140 * G, device_map={"": 1}).device_map == {"": 1}  # the user's map wins
    asked = devices.place(16 * G, device_map="auto")  # asked for: capped like the automatic spread
    assert asked.device_map == "auto" and asked.max_memory == {i: int(devices.HEADROOM * 80 * G) for i in range(4)}
    for args in [(140 * G, "cuda:1"), (400 * G,)]:
        with pytest.raises(ModelError, match="weights need ~") as e:
            devices.place(*args)
        assert "\n" not in str(e.value)
    with pytest.raises(ModelError, match="does not exist"):
        devices.place(G, "cuda:7")


def test_model_info_of_a_foreign_bridge_reads_its_folder(tiny_dir, monkeypatch):
    """A bridge booted without load_model is identified by its folder's files, not its parameters."""
    from transformer_lens.model_bridge import TransformerBridge

    from introspect.engine.load.models import model_info

    _no_parameter_hashing(monkeypatch)
    path = str(tiny_dir("gpt2"))
    bridge = TransformerBridge.boot_transformers(path, device="cpu")
    info = model_info(bridge)
    assert info.name == "gpt2" and info.fingerprint == load_model(path).introspect_info.fingerprint
    assert info.attention == "eager"  # what TransformerLens boots
