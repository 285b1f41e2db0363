"""Memory arithmetic of GPU runs, checked with faked device queries (no GPU here): free memory
counts PyTorch's reserved-but-unused blocks, each GPU is sized for what lives on it, allocation
failures of cuBLAS/cuDNN halve the batch, a fatal device error says so, and the failed batch is
freed before memory is released."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest
import torch

from introspect.engine.load import devices

GiB = devices.GiB


class _P(SimpleNamespace):
    def element_size(self) -> int:
        return 2  # bf16


def _model(blocks: dict[str, int], head: str, n_layers: int = 32):
    """A stand-in bridge: ``blocks`` decoder blocks per device, the output layer on ``head``,
    an 8B-like config (32 layers, 8 KV heads of 128, d_model 4096, d_mlp 14336, vocab 128256)."""
    params, i = [], 0
    for dev, n in blocks.items():
        for _ in range(n):
            params += [(f"model.layers.{i}.self_attn.q_proj.weight", _P(device=torch.device(dev))),
                       (f"model.layers.{i}.mlp.up_proj.weight", _P(device=torch.device(dev)))]
            i += 1
    params.append(("model.embed_tokens.weight", _P(device=torch.device(next(iter(blocks))))))
    hf = SimpleNamespace(named_parameters=lambda: iter(params), parameters=lambda: (p for _, p in params),
                         get_output_embeddings=lambda: SimpleNamespace(weight=_P(device=torch.device(head))))
    cfg = SimpleNamespace(n_layers=n_layers, n_heads=32, n_key_value_heads=8, d_head=128, d_model=4096,
                          d_mlp=14336, d_vocab=128256)
    return SimpleNamespace(original_model=hf, cfg=cfg)


@pytest.fixture
def gpus(monkeypatch):
    """Fake per-GPU (driver free, reserved, allocated) in bytes."""
    state: dict[int, tuple[int, int, int]] = {}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (state[i][0], 80 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=0: state[i][1])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i=0: state[i][2])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(state))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return state


def test_free_memory_counts_reserved_but_unallocated_blocks(gpus):
    gpus[0] = (10 * GiB, 6 * GiB, 2 * GiB)  # 4 GiB cached by PyTorch, free to this process
    assert devices.gpu_free(0) == 14 * GiB
    m = _model({"cuda:0": 32}, "cuda:0")
    assert devices.free_bytes(m)[0] == 14 * GiB
    # the same memory, before and after PyTorch caches 4 GiB of it: the same plan
    before = devices.fit_batch(m, 1024)
    gpus[0] = (6 * GiB, 6 * GiB, 2 * GiB)
    assert devices.fit_batch(m, 1024) < before  # (sanity: less memory, fewer rows)
    gpus[0] = (14 * GiB, 0, 0)
    assert devices.fit_batch(m, 1024) == before


def test_each_gpu_is_sized_for_the_blocks_it_holds(gpus):
    """30 blocks on GPU 0 with 20 GiB free, 2 blocks and the output layer on GPU 1 with 4 GiB
    free: rows = min over GPUs of 0.8 x free / (that GPU's KV + one block's activations
    [+ logits]), by hand."""
    gpus[0] = (20 * GiB, 0, 0)
    gpus[1] = (4 * GiB, 0, 0)
    m = _model({"cuda:0": 30, "cuda:1": 2}, "cuda:1")
    assert devices.blocks_per_device(m) == {torch.device("cuda:0"): 30, torch.device("cuda:1"): 2}
    tokens = 2048
    kv_block = 2 * 8 * 128 * 2  # K and V, 8 KV heads of 128, bf16: per token and block
    act = tokens * (8 * 4096 + 3 * 14336) * 2
    rows0 = int(0.8 * 20 * GiB) // (tokens * kv_block * 30 + act)
    rows1 = int(0.8 * 4 * GiB) // (tokens * kv_block * 2 + act + 16 * 128256)
    assert (rows0, rows1) == (30, 10)
    assert devices.fit_batch(m, tokens, cap=10_000) == 10
    # the old rule (tightest free x GPU count, whole-model rows) planned 11 rows, more than GPU 1
    # holds: one block's activations live on one GPU, they are not split over the two
    assert int(0.8 * 4 * GiB * 2) // devices.row_bytes(m, tokens) == 11


def test_cublas_and_cudnn_allocation_failures_halve_the_batch():
    m = SimpleNamespace()
    for msg in ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"):
        assert devices.is_oom(RuntimeError(msg))
        assert devices.halve_after_oom(m, RuntimeError(msg), 8) == 4 and m.introspect_batch_cap == 4
    for msg in ("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx`",
                "mat1 and mat2 shapes cannot be multiplied"):
        assert not devices.is_oom(RuntimeError(msg))
        with pytest.raises(RuntimeError, match="EXECUTION_FAILED|shapes"):
            devices.halve_after_oom(m, RuntimeError(msg), 8)


def test_an_illegal_memory_access_fails_with_a_clear_message():
    e = RuntimeError("CUDA error: an illegal memory access was encountered")
    assert not devices.is_oom(e)
    with pytest.raises(devices.DeviceError, match="unusable .* restart the run"):
        devices.halve_after_oom(SimpleNamespace(), e, 8)


def test_the_failed_batch_is_freed_before_memory_is_released(monkeypatch):
    """The traceback of an OOM holds the failing frames' tensors; ``halve_after_oom`` clears those
    frames before ``release``, so the memory can go back although it runs inside ``except``."""
    seen = {}

    def release():
        gc.collect()
        seen["alive_at_release"] = ref() is not None

    monkeypatch.setattr(devices, "release", release)

    def step():
        batch = torch.ones(1000)
        seen["ref"] = weakref.ref(batch)
        raise torch.OutOfMemoryError("CUDA out of memory")

    try:
        step()
    except Exception as e:
        ref = seen["ref"]
        assert ref() is not None  # the traceback keeps the batch alive here...
        assert devices.halve_after_oom(SimpleNamespace(), e, 8) == 4
    assert seen["alive_at_release"] is False  # ...until halve_after_oom clears it
