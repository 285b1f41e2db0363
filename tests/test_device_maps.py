"""Device maps and batch plans of real 7B and 70B configurations, computed on the meta device
(configs only, no weights; no GPU): what ``load_model`` would place on 1 x 80 GB and 8 x 80 GB,
and the rows each run would plan. Printed, so a CI log shows them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from introspect.engine.load import devices
from introspect.engine.load.gguf_files import ModelError

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"
GiB = devices.GiB
GPU = 80 * GiB
TOKENS = devices.PLAN_TOKENS + 40  # a task prompt plus task A's answer budget
LONG = 16384  # a long transcript (the Delegate Game's phase 1): where memory, not the cap, binds


def _meta(name: str):
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    d = json.loads((CONFIGS / name).read_text())
    d.pop("_source")
    with init_empty_weights():
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(**d), dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def mistral7b():
    return _meta("mistral-7b-instruct-v0.2.json")


@pytest.fixture(scope="module")
def llama70b():
    return _meta("deepseek-r1-distill-llama-70b.json")


@pytest.fixture
def gpus(monkeypatch):
    """``n`` empty 80 GB GPUs (driver free, reserved, allocated faked)."""
    state: dict[int, list[int]] = {}

    def have(n: int) -> dict[int, list[int]]:
        state.clear()
        state.update({i: [GPU, 0, 0] for i in range(n)})
        return state

    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(state))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(state))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (state[i][0], GPU))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=0: state[i][1])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i=0: state[i][2])
    return have


def _weights(model) -> int:
    return sum(p.numel() * 2 for p in model.parameters())  # bf16


def _bridge_like(model, dmap: dict[str, object]):
    """The loaded model as fit_batch sees it: parameters on their mapped devices, TL config names."""
    def where(name: str) -> torch.device:
        best = max((k for k in dmap if k == "" or name == k or name.startswith(k + ".")), key=len)
        d = dmap[best]
        return torch.device(f"cuda:{d}" if isinstance(d, int) else d)

    params = [(n, SimpleNamespace(device=where(n), element_size=lambda: 2)) for n, _ in model.named_parameters()]
    head = where("lm_head.weight")
    c = model.config
    cfg = SimpleNamespace(n_layers=c.num_hidden_layers, n_heads=c.num_attention_heads,
                          n_key_value_heads=c.num_key_value_heads,
                          d_head=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                          d_model=c.hidden_size, d_mlp=c.intermediate_size, d_vocab=c.vocab_size)
    hf = SimpleNamespace(named_parameters=lambda: iter(params), parameters=lambda: (p for _, p in params),
                         get_output_embeddings=lambda: SimpleNamespace(weight=SimpleNamespace(device=head)))
    return SimpleNamespace(original_model=hf, cfg=cfg)


def _load(state, model, dmap) -> dict[int, int]:
    """Fill each fake GPU with the weights the map puts there; returns bytes per GPU."""
    per = Counter()
    for n, p in model.named_parameters():
        d = dmap[max((k for k in dmap if k == "" or n == k or n.startswith(k + ".")), key=len)]
        per[d] += p.numel() * 2
    for i, b in per.items():
        state[i][2] = state[i][1] = b  # allocated (and reserved) by the weights
        state[i][0] = GPU - b
    return dict(per)


def _show(capsys, title: str, m, per: dict, rows: int, why: str, long_rows: int) -> None:
    layers = {d.index: n for d, n in sorted(devices.blocks_per_device(m).items(), key=str)}
    with capsys.disabled():
        print(f"\n{title}: layers per GPU {layers}; weights per GPU (GiB) "
              f"{ {i: round(b / GiB, 1) for i, b in sorted(per.items())} }; batch {rows} rows of {TOKENS} "
              f"tokens ({why}); {long_rows} rows of {LONG} tokens")


def test_7b_on_one_80gb_gpu_loads_whole_and_plans_its_batch(mistral7b, gpus, capsys):
    state = gpus(1)
    need = _weights(mistral7b)
    assert 14.0 * GiB > need > 13.0 * GiB  # 7.24 B parameters in bf16
    place = devices.place(need, "cuda")
    assert place.device_map == {"": 0}
    dmap = devices.device_map(mistral7b, place)
    per = _load(state, mistral7b, dmap)
    m = _bridge_like(mistral7b, dmap)
    rows, why = devices.plan_batch(m, 0, 40)
    # by hand: one GPU holds all 32 blocks' KV (2 x 8 heads x 128 x 2 bytes a block and token),
    # one block's activations and the fp32 copies of the last position's logits
    free = GPU - need

    def row(t: int) -> int:
        return t * 32 * (2 * 8 * 128 * 2) + t * (8 * 4096 + 3 * 14336) * 2 + 16 * 32000

    assert rows == min(devices.GPU_MAX_BATCH, int(devices.BATCH_HEADROOM * free) // row(TOKENS)) == 256
    long_rows = devices.fit_batch(m, LONG, cap=10_000)
    assert long_rows == int(devices.BATCH_HEADROOM * free) // row(LONG) < devices.GPU_MAX_BATCH
    assert set(dmap.values()) == {0} and not {"cpu", "disk"} & set(map(str, dmap.values()))
    _show(capsys, "Mistral-7B-Instruct-v0.2 on 1 x 80 GB", m, per, rows, why, long_rows)
    gpus(8)  # on eight GPUs a model that fits on one still loads on one (no cross-GPU hops)
    assert devices.place(need, "cuda").device_map == {"": 0}


@pytest.mark.slow  # building the 70B skeleton takes about a minute: CI (make test-all) runs it
def test_70b_needs_more_than_one_80gb_gpu_and_says_so(llama70b, gpus):
    gpus(1)
    with pytest.raises(ModelError, match=r"the weights need ~131\.\d GiB and GPU 0 has 80\.0 GiB free") as e:
        devices.place(_weights(llama70b), "cuda")
    assert "\n" not in str(e.value)


@pytest.mark.slow  # building the 70B skeleton takes about a minute: CI (make test-all) runs it
def test_70b_over_eight_80gb_gpus_is_balanced_with_nothing_on_cpu_or_disk(llama70b, gpus, capsys):
    state = gpus(8)
    need = _weights(llama70b)
    place = devices.place(need, "cuda")
    assert place.device_map == "auto" and place.max_memory == {i: int(devices.HEADROOM * GPU) for i in range(8)}
    dmap = devices.device_map(llama70b, place)
    assert all(isinstance(d, int) for d in dmap.values()), "a module on CPU or disk: the bridge refuses offload"
    layers = Counter(v for k, v in dmap.items() if k.startswith("model.layers."))
    assert sum(layers.values()) == 80 and set(layers) == set(range(8))  # every GPU holds blocks
    # balanced (transformers: 9, 11 x 6, 5: the ends hold the embeddings and the head), not filled
    # one GPU after another (that would put 41 blocks on GPU 0 and leave six GPUs empty)
    assert max(layers.values()) <= 12
    per = _load(state, llama70b, dmap)
    assert sum(per.values()) == need and max(per.values()) <= devices.HEADROOM * GPU
    m = _bridge_like(llama70b, dmap)
    rows, why = devices.plan_batch(m, 0, 40)
    head = dmap["lm_head"]

    def want(t: int) -> int:  # by hand: the minimum over GPUs of what each one's share needs
        return min(int(devices.BATCH_HEADROOM * (GPU - per[i])) //
                   (t * 2 * 8 * 128 * 2 * layers.get(i, 0) + t * (8 * 8192 + 3 * 28672) * 2
                    + (16 * 128256 if i == head else 0)) for i in per)

    assert rows == min(devices.GPU_MAX_BATCH, want(TOKENS))
    long_rows = devices.fit_batch(m, LONG, cap=10_000)
    assert long_rows == want(LONG) < devices.GPU_MAX_BATCH
    _show(capsys, "DeepSeek-R1-Distill-Llama-70B on 8 x 80 GB", m, per, rows, why, long_rows)
