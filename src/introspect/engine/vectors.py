"""Concept vectors from the residual stream, extracted in batches and cached on disk.

Seed §4 protocol: prompt "Human: Tell me about {word}\n\nAssistant:", read
``blocks.L.hook_resid_post`` at the final token, v = act(word) − mean over baseline words,
unit-normalised. Every word and every requested layer comes out of one forward pass per batch
(hooks on only those layers, stopped after the deepest), not one pass per word per layer. The raw norm
and the layer's mean residual norm travel with the vector, so α can be stated in either unit.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from introspect.engine.load import devices
from introspect.engine.load.models import cache_root, model_info
from introspect.engine.run.chat import Conversation, Prompt, render
from introspect.engine.run.inject import RowSpecs, injecting, pad_left
from introspect.records.atomic import atomic_write, atomic_write_text

PLAIN_TEMPLATE = "Human: Tell me about {word}\n\nAssistant:"  # the seed's raw-text prompt
CHAT_TEMPLATE = "Tell me about {word}."  # the user turn when vectors use the model's chat template
DEFAULT_TEMPLATE = PLAIN_TEMPLATE  # kept for old imports: the plain template's text


def template_for(template: str | None, chat: bool) -> str:
    """The prompt text for vectors: the chat user turn by default (vectors are then extracted in
    the same format the tasks inject into), or the seed's plain "Human: … Assistant:" text."""
    return template if template is not None else (CHAT_TEMPLATE if chat else PLAIN_TEMPLATE)


class VectorCacheError(OSError):
    """A cache file that exists but cannot be read back."""


def vectors_root() -> Path:
    """Vector cache folder (``INTROSPECT_CACHE_VECTORS`` overrides; default under the model cache)."""
    env = os.environ.get("INTROSPECT_CACHE_VECTORS")
    return Path(env) if env else cache_root() / "vectors"


def resid_name(layer: int) -> str:
    return f"blocks.{layer}.hook_resid_post"


def check_layers(model: Any, layers: Iterable[int]) -> list[int]:
    n = model.cfg.n_layers
    layers = list(layers)
    if not layers:
        raise ValueError("no layers given; pass at least one layer index")
    bad = [layer for layer in layers if not 0 <= int(layer) < n]
    if bad:
        raise ValueError(f"layers {bad} out of range; this model has layers 0..{n - 1}")
    return [int(x) for x in layers]


class _Gathered(Exception):
    """Raised by the deepest needed layer's hook: later blocks and the unembedding never run."""


def _gather(model: Any, toks: Tensor, mask: Tensor, where: tuple[Tensor, Tensor],
            layers: Sequence[int]) -> dict[int, Float[Tensor, "n d_model"]]:
    """One forward pass; each layer's residual at (row, position) pairs ``where``, float32 CPU."""
    got: dict[int, Tensor] = {}

    def grab(layer: int):
        def hook(act: Tensor, hook: Any) -> Tensor:
            picked = act[where[0].to(act.device), where[1].to(act.device)]  # on this layer's device
            got[layer] = picked.detach().to("cpu", torch.float32)  # one device for all layers
            if len(got) == len(layers):
                raise _Gathered
            return act
        return hook

    dev = model.cfg.device
    with model.hooks(fwd_hooks=[(resid_name(la), grab(la)) for la in layers]), torch.no_grad():
        try:
            model(toks.to(dev), attention_mask=mask.to(dev), use_cache=False)
        except _Gathered:
            pass
    return got


def residuals(
    model: Any,
    prompts: Sequence[Prompt],
    layers: Sequence[int],
    *,
    positions: Literal["last"] | Sequence[Sequence[int]] = "last",
    injections: Sequence[RowSpecs] | None = None,
    batch_size: int = 16,
) -> list[Float[Tensor, "layer pos d_model"]]:
    """Residual-stream activations after each listed layer, per prompt, at chosen positions.

    ``positions`` are unpadded prompt indices per prompt (``"last"`` = the final token). Returns
    one float32 CPU tensor per prompt of shape ``[len(layers), n_positions, d_model]``.

    Why hooks of our own rather than a full ``run_with_cache``: each listed layer's hook picks
    the asked positions on the device that layer lives on and copies only those to the CPU (a
    model spread over GPUs leaves each layer's activations on its own GPU, and stacking them
    there fails), and the deepest listed layer stops the pass, so no later block and no
    ``[batch, seq, vocab]`` unembedding is ever computed.
    """
    layers = check_layers(model, layers)
    wanted = sorted(set(layers))
    out: list[Tensor] = []
    size, lo = max(1, min(batch_size, getattr(model, "introspect_batch_cap", batch_size))), 0
    while lo < len(prompts):
        try:
            got_chunk = _residual_chunk(model, prompts, lo, size, layers, wanted, positions, injections)
        except Exception as e:  # out of memory: halve and redo this chunk; finished chunks stay
            size = devices.halve_after_oom(model, e, size)
            continue
        out.extend(got_chunk)
        lo += size
    return out


def _residual_chunk(model: Any, prompts: Sequence[Prompt], lo: int, size: int, layers: list[int],
                    wanted: list[int], positions: Any, injections: Sequence[RowSpecs] | None) -> list[Tensor]:
    """``residuals`` of ``prompts[lo:lo + size]``."""
    chunk = prompts[lo:lo + size]
    specs = (injections or [None] * len(prompts))[lo:lo + size]
    toks, mask, offsets = pad_left(chunk, model.tokenizer.pad_token_id)
    rows: list[int] = []
    cols: list[int] = []
    counts: list[int] = []
    for i, p in enumerate(chunk):
        idx = [len(p) - 1] if positions == "last" else [int(j) for j in positions[lo + i]]
        rows += [i] * len(idx)
        cols += [offsets[i] + j for j in idx]
        counts.append(len(idx))
    where = (torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long))
    with injecting(model, specs, chunk, offsets):
        got = _gather(model, toks, mask, where, wanted)
    stacked = torch.stack([got[la] for la in layers])  # [layers, positions of the chunk, d]
    return list(stacked.split(counts, dim=1))


@dataclass(frozen=True)
class ConceptVector:
    word: str
    layer: int
    vector: Float[Tensor, " d_model"]  # unit norm, float32, CPU
    raw_norm: float  # ||act(word) − baseline mean|| before normalisation
    mean_resid_norm: float  # mean ||resid|| at this layer over the baseline prompts' final token

    def alpha_effective(self, alpha: float, units: str) -> float:
        """The scalar multiplied into the unit vector: α itself, or α × the layer's resid norm."""
        if units == "unit":
            return float(alpha)
        if units == "resid":
            return float(alpha) * self.mean_resid_norm
        if units == "raw":
            return float(alpha) * self.raw_norm
        raise ValueError(f"unknown alpha units {units!r}; use raw, unit or resid")


def _key(fingerprint: str, layer: int, word: str, template: str, baseline: Sequence[str], chat: bool) -> str:
    blob = json.dumps([fingerprint, layer, word, template, sorted(baseline), chat])
    return hashlib.sha1(blob.encode()).hexdigest()[:20]


def _save_npy(tmp: str, array: np.ndarray) -> None:
    with open(tmp, "wb") as fh:  # by handle: np.save would add ".npy" to the temp file's name
        np.save(fh, array)


def save_vector(path: Path, cv: ConceptVector) -> None:
    """Vector as ``.npy`` plus a ``.json`` sidecar; sidecar first, so the .npy marks completeness.
    A non-finite vector is never written (a cached NaN would fail every rerun)."""
    if not (torch.isfinite(cv.vector).all() and math.isfinite(cv.raw_norm) and math.isfinite(cv.mean_resid_norm)):
        raise VectorCacheError(f"refusing to cache a non-finite vector for {cv.word!r} at layer {cv.layer}")
    meta = {"word": cv.word, "layer": cv.layer, "raw_norm": cv.raw_norm, "mean_resid_norm": cv.mean_resid_norm}
    atomic_write_text(path.with_suffix(".json"), json.dumps(meta))
    atomic_write(path, lambda tmp: _save_npy(tmp, cv.vector.numpy().astype(np.float32)))


def load_vector(path: Path) -> ConceptVector:
    try:
        vec = np.load(path, allow_pickle=False)
        meta = json.loads(path.with_suffix(".json").read_text())
        return ConceptVector(meta["word"], int(meta["layer"]), torch.from_numpy(np.asarray(vec, np.float32)),
                             float(meta["raw_norm"]), float(meta["mean_resid_norm"]))
    except (OSError, ValueError, KeyError) as e:
        raise VectorCacheError(f"unreadable vector cache file {path} ({e}); delete it to rebuild") from e


def concept_prompt(tokenizer: Any, word: str, template: str, chat: bool) -> Prompt:
    text = template.format(word=word)
    if chat:
        return render(tokenizer, Conversation.of(("user", text)))
    return Prompt(tuple(tokenizer(text)["input_ids"]), text)


def build_concept_vectors(
    model: Any,
    words: Sequence[str],
    layers: Sequence[int],
    baseline: Sequence[str],
    *,
    template: str | None = None,
    chat: bool = True,
    batch_size: int = 32,
    cache: bool = True,
) -> dict[tuple[str, int], ConceptVector]:
    """Unit concept vectors for every (word, layer), cached per (model, layer, word, template, baseline)."""
    layers = check_layers(model, layers)
    template = template_for(template, chat)
    if not words or not baseline:
        raise ValueError("need at least one target word and one baseline word")
    fp = model_info(model).fingerprint
    root = vectors_root() / fp.replace(":", "_").replace("/", "_")
    result: dict[tuple[str, int], ConceptVector] = {}
    todo: list[str] = []
    for w in dict.fromkeys(words):
        for layer in layers:
            path = root / f"{_key(fp, layer, w, template, baseline, chat)}.npy"
            if cache and path.exists():
                result[(w, layer)] = load_vector(path)
            elif w not in todo:
                todo.append(w)
    if not todo:
        return result
    texts = list(dict.fromkeys([*todo, *baseline]))
    acts = residuals(model, [concept_prompt(model.tokenizer, t, template, chat) for t in texts],
                     layers, batch_size=batch_size)
    by_text = {t: a[:, 0] for t, a in zip(texts, acts)}  # [layers, d]
    bad = [t for t, a in by_text.items() if not torch.isfinite(a).all()]
    if bad:  # one NaN in the baseline mean would poison every vector, and a cache keeps it
        raise VectorCacheError(f"non-finite activations for {len(bad)} of {len(texts)} texts ({', '.join(bad[:3])}"
                               f"{' …' if len(bad) > 3 else ''}) at layers {list(layers)}: nothing cached; "
                               "check the attention kernel and dtype (--dtype float32 to compare)")
    base = torch.stack([by_text[b] for b in baseline])  # [n_base, layers, d]
    base_mean, base_norm = base.mean(0), base.norm(dim=-1).mean(0)
    for w in todo:
        diff = by_text[w] - base_mean
        for li, layer in enumerate(layers):
            raw = float(diff[li].norm())
            cv = ConceptVector(w, layer, diff[li] / max(raw, 1e-12), raw, float(base_norm[li]))
            if cache:
                save_vector(root / f"{_key(fp, layer, w, template, baseline, chat)}.npy", cv)
            result[(w, layer)] = cv
    return result


def build_concept_vector(model: Any, layer_idx: int, word: str, baseline_words: Sequence[str], **kw: Any) -> Tensor:
    """Seed §4 single-vector API: the unit vector for one word at one layer."""
    return build_concept_vectors(model, [word], [layer_idx], baseline_words, **kw)[(word, layer_idx)].vector


class VectorBank:
    """Per-run access to concept vectors: built lazily in batches, cached on disk and in memory."""

    def __init__(self, model: Any, baseline: Sequence[str], *, template: str | None = None,
                 chat: bool = True, cache: bool = True, supplied: Any = None):
        template = template_for(template, chat)
        self.model, self.baseline, self.template, self.chat, self.cache = model, list(baseline), template, chat, cache
        self.supplied = supplied  # a vector_files.VectorSet: serve only these, build nothing
        self._mem: dict[tuple[str, int], ConceptVector] = {}
        self._base_mean: dict[int, Tensor] = {}
        self._resid_norm: dict[int, float] = {}

    def ensure(self, words: Iterable[str], layers: Iterable[int]) -> None:
        layers = list(layers)
        need_w = [w for w in dict.fromkeys(words) if any((w, la) not in self._mem for la in layers)]
        if need_w and self.supplied is not None:
            self.supplied.require(need_w, layers)
            self._mem.update({(w, la): self.supplied.vectors[(w, la)] for w in need_w for la in layers})
        elif need_w:
            self._mem.update(build_concept_vectors(self.model, need_w, layers, self.baseline,
                                                   template=self.template, chat=self.chat, cache=self.cache))

    def get(self, word: str, layer: int) -> ConceptVector:
        if (word, layer) not in self._mem:
            self.ensure([word], [layer])
        return self._mem[(word, layer)]

    def record(self) -> dict[str, Any]:
        """Where this bank's vectors come from, for the run header."""
        if self.supplied is not None:
            return self.supplied.record()
        return {"source": "built", "recipe": "mean difference at the final token, unit-normalised",
                "hook": "blocks.{layer}.hook_resid_post", "template": self.template, "chat": self.chat,
                "baseline_sha256": hashlib.sha256(json.dumps(sorted(self.baseline)).encode()).hexdigest(),
                "n_baseline": len(self.baseline)}

    def _baseline_pass(self, layers: Sequence[int]) -> None:
        """One pass over the baseline prompts at the layers not yet seen: their mean residual and
        mean norm at the final token, kept together (both ``resid_norms`` and ``baseline_mean``
        read them, and a second pass would repeat the same forward)."""
        missing = [la for la in dict.fromkeys(layers) if la not in self._base_mean]
        if missing:
            prompts = [concept_prompt(self.model.tokenizer, b, self.template, self.chat) for b in self.baseline]
            acts = torch.stack([a[:, 0] for a in residuals(self.model, prompts, missing)])  # n l d
            self._base_mean.update(zip(missing, acts.mean(0)))
            self._resid_norm.update(zip(missing, acts.norm(dim=-1).mean(0).tolist()))

    def resid_norms(self, layers: Sequence[int]) -> dict[int, float]:
        """Mean ||resid|| at each layer over the baseline prompts' final token: what "resid" α units
        multiply (the same figure a built vector carries)."""
        layers = check_layers(self.model, layers)
        self._baseline_pass(layers)
        return {la: self._resid_norm[la] for la in layers}

    def baseline_mean(self, layers: Sequence[int]) -> Float[Tensor, "layer d_model"]:
        """Mean residual of the baseline prompts at each layer (what every concept vector subtracts)."""
        layers = list(layers)
        self._baseline_pass(layers)
        return torch.stack([self._base_mean[la] for la in layers])

    def random_like(self, cv: ConceptVector, seed: int) -> ConceptVector:
        """A random unit vector for ablations, same layer; it carries ``cv``'s raw norm, so in
        every α unit it is added with exactly the norm the concept vector would be."""
        g = torch.Generator().manual_seed(seed)
        v = torch.randn(self.model.cfg.d_model, generator=g)
        return ConceptVector(f"<random:{seed}>", cv.layer, v / v.norm(), cv.raw_norm, cv.mean_resid_norm)
