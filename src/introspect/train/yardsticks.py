"""Yardsticks for the replay gates: the base model changed in ways its users call "the same model".

Why: greedy identity of 40-token answers to the base model's (the old gate, ≥ 0.80) fails the
unchanged base model computed in bf16 or read from a Q8_0 file, and a random weight change of the
adapter's size (``train.gates.random_twin``) says only that any change of that size does as badly.
Neither says how large a change to tolerate in terms a researcher already accepts. These do: the
base model computed in bf16 (how most GPUs run it) and its weights re-quantized block-wise as GGUF
files of the same model are (Q8_0 exactly: blocks of 32 along the input, scale = the block's
largest |weight| / 127; "q6" is the 6-bit analogue). "q6" is the replay gates' bound
(``train.gates.BAR``, the owner's choice in issue 72): the adapter's teacher-forced KL to the base
model no larger than a 6-bit copy's, its top-token agreement no lower; bf16 and Q8_0 are context.
Each is applied with the adapter switched off and undone exactly (every parameter and buffer
restored bit for bit), so the gates measure it on the same held-out replay answers as the adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch

BLOCK = 32  # GGUF's block length along a weight's input dimension (Q8_0, Q4_0, Q4_1, ...)


def quantize_roundtrip(w: torch.Tensor, bits: int, block: int = BLOCK) -> torch.Tensor:
    """``w`` ([out, in]) quantized symmetrically to ``bits`` in blocks of ``block`` along its input
    and dequantized: scale d = block absmax / (2^(bits-1) - 1), integers round(x / d) clamped to the
    signed range, and d stored in fp16 as GGUF stores it, so the weight read back is the integer
    times fp16(d). With bits = 8 this is llama.cpp's Q8_0 (``quantize_row_q8_0_ref``). A row whose
    length ``block`` does not divide is one block."""
    x = w.detach().float()
    b = block if x.shape[-1] % block == 0 else x.shape[-1]
    x = x.reshape(-1, b)
    qmax = 2 ** (bits - 1) - 1
    d = x.abs().amax(1, keepdim=True) / qmax
    q = (x / d.clamp_min(1e-30)).round().clamp(-qmax - 1, qmax) * d.half().float()
    return torch.where(d > 0, q, x).reshape(w.shape).to(w.dtype)


def base_linears(model: Any) -> list[torch.nn.Module]:
    """Every linear map of the base model a GGUF file quantizes: the transformer's ``Linear`` (and
    GPT-2 ``Conv1D``) maps, not a LoRA adapter's own maps and not the output head or embeddings
    (often tied, and kept at higher precision in GGUF files). A map whose weight is a view into
    another's (the bridge's q, k, v inside GPT-2's fused ``c_attn``) is left to the map that owns
    the storage, so no weight is quantized twice."""
    from introspect.train.lora import _linear_types

    hf = model.original_model

    def unwrap(m: Any) -> Any:  # the bridge wraps HF modules: its original sits in _original_component
        return getattr(m, "_original_component", m)

    skip = {unwrap(f()).weight.untyped_storage().data_ptr()
            for f in (getattr(hf, "get_input_embeddings", None), getattr(hf, "get_output_embeddings", None))
            if f is not None and f() is not None and hasattr(unwrap(f()), "weight")}
    found = [m for n, m in hf.named_modules() if isinstance(m, _linear_types()) and "lora_" not in n]
    owners: dict[int, torch.nn.Module] = {}
    for m in found:
        ptr = m.weight.untyped_storage().data_ptr()
        if ptr not in skip and (ptr not in owners or m.weight.numel() > owners[ptr].weight.numel()):
            owners[ptr] = m
    return [m for m in found if owners.get(m.weight.untyped_storage().data_ptr()) is m]


@contextmanager
def requantized(model: Any, bits: int) -> Iterator[None]:
    """The base model's linear weights (``base_linears``) re-quantized to ``bits`` for as long as
    the block runs, restored exactly afterwards."""
    from introspect.train.fused import out_by_in

    if not 2 <= int(bits) <= 16:
        raise ValueError(f"bits={bits}: want an integer from 2 to 16 (8 is Q8_0)")
    saved = []
    with torch.no_grad():
        for m in base_linears(model):
            saved.append((m.weight, m.weight.detach().clone()))
            oi = out_by_in(m)  # a view of the weight as [out, in]: blocks run along the input dimension
            oi.copy_(quantize_roundtrip(oi, int(bits)))
    try:
        yield
    finally:
        with torch.no_grad():
            for w, w0 in saved:
                w.copy_(w0)


@contextmanager
def computed_in(model: Any, dtype: torch.dtype) -> Iterator[None]:
    """The whole model (weights, buffers such as rotary frequencies, and so its activations) cast to
    ``dtype`` for as long as the block runs; afterwards every parameter and buffer is its own
    original tensor again (the very storage: casting back would keep the rounding, and even an
    exact copy at another address moved a log-prob by 5e-7 on a tiny model, through another kernel path)."""
    hf = model.original_model
    params = [(p, p.data) for p in hf.parameters()]  # casting gives each a new tensor; these stay untouched
    buffers = [(mod, name, b) for mod in hf.modules() for name, b in mod._buffers.items() if b is not None]
    hf.to(dtype)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, data in params:
                p.data = data
            for mod, name, b in buffers:
                mod._buffers[name] = b


YARDSTICKS: dict[str, tuple[str, Callable[[Any], AbstractContextManager[None]]]] = {
    "bf16": ("the base model computed in bf16", lambda m: computed_in(m, torch.bfloat16)),
    "q8_0": ("the base model's weights re-quantized to Q8_0", lambda m: requantized(m, 8)),
    "q6": ("the base model's weights re-quantized to 6 bits (Q8_0's rule)", lambda m: requantized(m, 6)),
}


def check_names(names: Any) -> tuple[str, ...]:
    """``names`` as a tuple, each one a known yardstick (a one-line error naming the known ones)."""
    names = tuple(names)
    bad = [n for n in names if n not in YARDSTICKS]
    if bad:
        raise ValueError(f"unknown yardstick {bad[0]!r}: want some of {', '.join(YARDSTICKS)}")
    return names
