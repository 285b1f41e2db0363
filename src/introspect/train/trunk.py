"""The distillation teacher's trunk, computed once for teacher and student.

Why: a replay row's loss needs two passes over the same tokens, the base model's (the teacher,
adapter off, no gradient) and the adapted model's (the student). LoRA sits only on the blocks
after layer L, so blocks 0..L compute exactly the same thing in both passes; on the default
model that is 25 of 30 blocks run twice for nothing. ``recording(model, L, kept)`` keeps what
block L returned during the teacher's calls; ``replaying(model, L, kept)`` then makes blocks 0..L
hand their input straight on and block L return the recorded output, call by call, so the student
computes only the blocks that differ. Exact: the student's blocks after L see the tensors they
would have computed (``tests/test_train.py`` checks losses and gradients against two full passes).

A shared prefix (the preamble before any injection, run once per group without gradient, its KV
cache copied to every row) goes further: below the adapter it is the same at every step, so
``Prefixes`` keeps, per distinct prefix, block L's output and layers 0..L's keys and values; a
prefix seen before runs blocks after L only, and layers 0..L's cache is written back after the
call (HF reads the cache's length from its first layer, so those entries must be there).

How, without per-architecture code: the bridge's block wrappers call each HF block's module;
its ``forward`` is swapped on the instance for the call and put back after (hooks of the bridge
itself, such as an injection at L, still fire as usual on what the block returns).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from introspect.train import lora


class TrunkError(RuntimeError):
    """The trunk cannot be shared (an adapter below L, or the calls differ from the recording)."""


def _module(model: Any, i: int) -> torch.nn.Module:
    return model.blocks[i].original_component


def check(model: Any, layer: int) -> None:
    """Refuse a trunk through ``layer`` when an attached adapter starts at or below it (then the
    blocks differ between teacher and student, and from one step to the next)."""
    first = lora.first_adapted(model)
    if first is not None and first <= layer:
        raise TrunkError(f"block {first}, at or below layer {layer}, carries an adapter: its trunk differs "
                         f"between passes; share blocks 0..{first - 1} at most")


@contextmanager
def recording(model: Any, layer: int, kept: list[Any]) -> Iterator[None]:
    """Append block ``layer``'s outputs (detached), one per forward call, to ``kept``."""
    check(model, layer)

    def keep(_mod: Any, _args: Any, out: Any) -> None:
        kept.append(out.detach() if isinstance(out, torch.Tensor)
                    else tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in out))

    handle = _module(model, layer).register_forward_hook(keep)
    try:
        yield
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


@dataclass
class Prefixes:
    """Blocks 0..``layer`` over each shared prefix, computed once for a training run.

    Why: one phrasing per step makes every step's detection rows share the same preamble (five
    distinct ones, ~100 tokens on average on the default model), and a prefix carries no
    injection and no gradient; below the adapter it computes the same thing at every step. Keyed
    by the prefix's token ids; valid while blocks 0..``layer`` keep their weights (one run).
    """

    layer: int
    size: int = 32
    kept: OrderedDict[tuple[int, ...], tuple[Any, list[tuple[torch.Tensor, torch.Tensor]]]] = \
        field(default_factory=OrderedDict)
    hits: int = 0
    misses: int = 0

    @contextmanager
    def around(self, model: Any, ids: tuple[int, ...], cache: Any) -> Iterator[None]:
        """Around the prefix's one forward call into ``cache``: the first time in full, keeping
        block ``layer``'s output and layers 0..``layer``'s keys and values; after that with those
        blocks skipped and their keys and values written into ``cache`` once the call returns."""
        check(model, self.layer)
        entry = self.kept.get(ids)
        if entry is not None:
            self.hits += 1
            self.kept.move_to_end(ids)
            with replaying(model, self.layer, [entry[0]]):
                yield
            for i, (k, v) in enumerate(entry[1]):
                cache.update(k, v, i)
            return
        out: list[Any] = []
        kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        update = cache.update

        def keep(k: torch.Tensor, v: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
            if layer_idx <= self.layer:
                kv[layer_idx] = (k.detach().clone(), v.detach().clone())
            return update(k, v, layer_idx, *args, **kwargs)

        cache.update = keep
        try:
            with recording(model, self.layer, out):
                yield
        finally:
            del cache.update  # the class's method again
        self.misses += 1
        if len(out) == 1 and sorted(kv) == list(range(self.layer + 1)):  # anything else: not kept, run in full again
            self.kept[ids] = (out[0], [kv[i] for i in range(self.layer + 1)])
            while len(self.kept) > self.size:
                self.kept.popitem(last=False)
