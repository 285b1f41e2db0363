"""The distillation teacher's trunk, computed once for teacher and student.

Why: a replay row's loss needs two passes over the same tokens, the base model's (the teacher,
adapter off, no gradient) and the adapted model's (the student). LoRA sits only on the blocks
after layer L, so blocks 0..L compute exactly the same thing in both passes; on the default
model that is 25 of 30 blocks run twice for nothing. ``recording(model, L, kept)`` keeps what
block L returned during the teacher's calls; ``replaying(model, L, kept)`` then makes blocks 0..L
hand their input straight on and block L return the recorded output, call by call, so the student
computes only the blocks that differ. Only the call over the rows' own tokens is replayed: a
shared prefix's cache pass runs in full (HF reads the cache's length from its first layer, which
a skipped block would leave empty). Exact: the student's blocks after L see the tensors they would
have computed (``tests/test_train.py`` checks losses and gradients against two full passes).

How, without per-architecture code: the bridge's block wrappers call each HF block's module;
its ``forward`` is swapped on the instance for the call and put back after (hooks of the bridge
itself, such as an injection at L, still fire as usual on what the block returns).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


class TrunkError(RuntimeError):
    """The trunk cannot be shared (an adapter below L, or the calls differ from the recording)."""


def _module(model: Any, i: int) -> torch.nn.Module:
    return model.blocks[i].original_component


def adapted_below(model: Any, layer: int) -> bool:
    """Whether any block 0..``layer`` carries a LoRA map (then the trunk is not the teacher's)."""
    return any("lora_" in n for i in range(layer + 1) for n, _ in _module(model, i).named_parameters())


@contextmanager
def recording(model: Any, layer: int, kept: list[Any]) -> Iterator[list[Any]]:
    """Append block ``layer``'s outputs (detached), one per forward call, to ``kept``."""
    if adapted_below(model, layer):
        raise TrunkError(f"a block at or below layer {layer} carries an adapter: its trunk differs between passes")

    def keep(_mod: Any, _args: Any, out: Any) -> None:
        kept.append(out.detach() if isinstance(out, torch.Tensor)
                    else tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in out))

    handle = _module(model, layer).register_forward_hook(keep)
    try:
        yield kept
    finally:
        handle.remove()


def _hidden(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


@contextmanager
def replaying(model: Any, layer: int, trunk: list[Any]) -> Iterator[None]:
    """Blocks 0..``layer`` skipped: block ``layer`` returns ``trunk``'s outputs in call order, the
    blocks before it pass their input on (in the form the block returns: a tensor or a tuple)."""
    if not trunk:
        raise TrunkError("no recorded trunk to replay (record the teacher's pass first)")
    queue = list(trunk)
    tuple_form = not isinstance(trunk[0], torch.Tensor)

    def passthrough(*args: Any, **kwargs: Any) -> Any:
        h = _hidden(args, kwargs)
        return (h,) if tuple_form else h

    def recorded(*args: Any, **kwargs: Any) -> Any:
        if not queue:
            raise TrunkError("the student made more forward calls than the teacher's recording")
        out = queue.pop(0)
        if (out if isinstance(out, torch.Tensor) else out[0]).shape[:2] != _hidden(args, kwargs).shape[:2]:
            raise TrunkError("the student's tokens differ from the teacher's recording")
        return out

    mods = [_module(model, i) for i in range(layer + 1)]
    saved = [m.__dict__.get("forward") for m in mods]
    try:
        for i, m in enumerate(mods):
            m.forward = recorded if i == layer else passthrough
        yield
    finally:
        for m, f in zip(mods, saved):
            if f is None:
                m.__dict__.pop("forward", None)
            else:
                m.forward = f
