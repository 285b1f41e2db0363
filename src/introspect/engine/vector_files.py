"""Concept vectors in and out: a safetensors file a run reads in place of building its vectors.

Why a file format of our own on top of safetensors: a bare tensor does not say which model, layer
and hook point it belongs to, nor how large that layer's residual stream is, so an α in "resid"
units would mean something else on the reader's side. The file holds one float32 tensor per concept
and layer, named ``blocks.{layer}.hook_resid_post/{word}``, holding the vector at its raw size
(what steering tools add); its metadata holds, per tensor, the raw norm, the layer's mean residual
norm and a sha256, and for the file the model id and fingerprint, d_model, how the vectors were
built, and a hash over all of them. ``read`` refuses a file for another model, layer or width in one
line. From Python, ``from_tensors`` turns a mapping of concept → tensor (a repeng or steering-vectors
direction, an SAE decoder row) into vectors with the model's own residual norm, so every α unit means
the same as for built vectors.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from introspect.engine.tensor_hash import tensor_sha256
from introspect.engine.vectors import ConceptVector, resid_name
from introspect.records.atomic import atomic_write

FORMAT = "introspect-vectors/1"


class VectorFileError(ValueError):
    """A vectors file or mapping that cannot serve this model (reported in one line by the CLIs)."""


def tensor_key(word: str, layer: int) -> str:
    """The tensor's name in the file: the hook point it is added at, then the concept."""
    return f"{resid_name(layer)}/{word}"


def _raw(cv: ConceptVector) -> Tensor:
    """The vector at its raw size, float32: what the file stores and what its hashes cover."""
    return (cv.vector * cv.raw_norm).to("cpu", torch.float32).contiguous()


def _set_hash(entries: Sequence[tuple[str, int, float, str]]) -> str:
    h = hashlib.sha256()
    for word, layer, resid, sha in sorted(entries, key=lambda e: (e[1], e[0])):
        h.update(json.dumps([word, layer, round(resid, 6), sha]).encode())
    return h.hexdigest()


def vectors_hash(vectors: Mapping[tuple[str, int], ConceptVector]) -> str:
    """One sha256 over every (word, layer, raw-size vector, resid norm): equal for equal vectors."""
    return _set_hash([(w, la, cv.mean_resid_norm, tensor_sha256(_raw(cv))) for (w, la), cv in vectors.items()])


@dataclass(frozen=True)
class VectorSet:
    """Vectors that did not come from the run's own builder, with where they came from."""

    vectors: Mapping[tuple[str, int], ConceptVector]
    source: str  # "file" or "python"
    sha256: str
    d_model: int
    model_id: str = ""  # the model the file was made for ("" for a Python mapping)
    fingerprint: str = ""
    path: str = ""
    built: Mapping[str, Any] = field(default_factory=dict)  # how they were made, as the file says

    @property
    def words(self) -> list[str]:
        return list(dict.fromkeys(w for w, _ in self.vectors))

    @property
    def layers(self) -> list[int]:
        return sorted({la for _, la in self.vectors})

    def record(self) -> dict[str, Any]:
        """What a run header says about these vectors."""
        out: dict[str, Any] = {"source": self.source, "sha256": self.sha256, "n_vectors": len(self.vectors),
                               "words": self.words, "layers": self.layers}
        if self.path:
            out["path"] = self.path
        if self.model_id:
            out["made_for"] = {"model_id": self.model_id, "fingerprint": self.fingerprint}
        if self.built:
            out["built"] = dict(self.built)
        return out

    def check(self, model: Any, fingerprint: str) -> None:
        """Refuse vectors for another width or (a file's) another model."""
        d = int(model.cfg.d_model)
        if self.d_model != d:
            where = f"{self.path} holds" if self.path else "the vectors are"
            raise VectorFileError(f"{where} d_model={self.d_model} vectors, this model's residual stream is "
                                  f"{d} wide: export vectors from this model (introspect vectors --export FILE)")
        if self.fingerprint and self.fingerprint != fingerprint:
            raise VectorFileError(f"{self.path} was made for {self.model_id} (fingerprint {self.fingerprint}), this "
                                  f"model is {fingerprint}: export vectors from this model, or pass them from "
                                  "Python as a mapping of concept to tensor")
        bad = [la for la in self.layers if not 0 <= la < int(model.cfg.n_layers)]
        if bad:
            raise VectorFileError(f"vectors at layers {bad} but this model has layers 0..{model.cfg.n_layers - 1}")

    def get(self, word: str, layer: int) -> ConceptVector:
        try:
            return self.vectors[(word, layer)]
        except KeyError:
            raise VectorFileError(self.missing([word], [layer])) from None

    def require(self, words: Sequence[str], layers: Sequence[int]) -> None:
        """Refuse (one line) when any (word, layer) pair is missing."""
        if any((w, la) not in self.vectors for w in words for la in layers):
            raise VectorFileError(self.missing(words, layers))

    def gone(self, words: Sequence[str], layers: Sequence[int]) -> list[tuple[str, int]]:
        """The (word, layer) pairs of ``words`` × ``layers`` these vectors lack, each once."""
        return [(w, la) for w in dict.fromkeys(words) for la in layers if (w, la) not in self.vectors]

    def missing(self, words: Sequence[str], layers: Sequence[int], source: str = "", hint: str = "") -> str:
        """The one-line message for (word, layer) pairs a run needs and these vectors lack:
        ``source`` names the file as the caller's user gave it, ``hint`` what to do instead."""
        gone = self.gone(words, layers)
        shown = ", ".join(f"{w!r}@L{la}" for w, la in gone[:4]) + (" …" if len(gone) > 4 else "")
        have = ", ".join(self.words[:6]) + (" …" if len(self.words) > 6 else "")
        src = source or self.path or "the vectors given"
        hint = hint or ("run at those layers with a --words-file whose targets it covers (task D and mismatch "
                        "trials also inject other target words)")
        return (f"{src} has no vector for {shown} ({len(gone)} missing); it holds {len(self.words)} words "
                f"({have}) at layers {self.layers}: {hint}")


def _meta_entry(cv: ConceptVector) -> dict[str, Any]:
    raw = _raw(cv)
    return {"key": tensor_key(cv.word, cv.layer), "word": cv.word, "layer": cv.layer,
            "hook": resid_name(cv.layer), "raw_norm": cv.raw_norm, "mean_resid_norm": cv.mean_resid_norm,
            "sha256": tensor_sha256(raw)}


def save(path: Path | str, vectors: Mapping[tuple[str, int], ConceptVector] | Sequence[ConceptVector], *,
         model_id: str, fingerprint: str, d_model: int, built: Mapping[str, Any] | None = None) -> str:
    """Write ``vectors`` to a safetensors file atomically; returns the set's sha256.

    ``built``: how the vectors were made (recipe, template, baseline words…), kept as JSON."""
    from safetensors.torch import save_file

    from introspect.records.jsonl import git_commit, utc_now, versions

    items = list(vectors.values()) if isinstance(vectors, Mapping) else list(vectors)
    if not items:
        raise VectorFileError("no vectors to write")
    by_key = {(cv.word, cv.layer): cv for cv in items}
    tensors = {tensor_key(cv.word, cv.layer): _raw(cv) for cv in by_key.values()}
    sha = vectors_hash(by_key)
    meta = {"format": FORMAT, "model_id": model_id, "fingerprint": fingerprint, "d_model": str(int(d_model)),
            "sha256": sha, "vectors": json.dumps([_meta_entry(cv) for cv in by_key.values()]),
            "built": json.dumps(dict(built or {})),
            "provenance": json.dumps({"written": utc_now(), "git_commit": git_commit(), "versions": versions()})}
    atomic_write(Path(path), lambda tmp: save_file(tensors, tmp, metadata=meta))
    return sha


def read(path: Path | str) -> VectorSet:
    """A vectors file written by ``save`` (or ``introspect vectors --export``), every hash checked."""
    from safetensors import SafetensorError, safe_open

    p = Path(path)
    if not p.is_file():
        raise VectorFileError(f"vectors file {p} does not exist; write one with introspect vectors --export FILE")
    try:
        with safe_open(str(p), framework="pt") as fh:
            meta = fh.metadata() or {}
            if meta.get("format") != FORMAT:
                raise VectorFileError(f"{p} is not an introspect vectors file (metadata format "
                                      f"{meta.get('format')!r}, expected {FORMAT!r}); pass foreign vectors "
                                      "from Python as a mapping of concept to tensor (engine.vector_files.from_tensors)")
            entries = json.loads(meta["vectors"])
            tensors = {e["key"]: fh.get_tensor(e["key"]) for e in entries}
            d_model, built = int(meta["d_model"]), json.loads(meta.get("built") or "{}")
    except (SafetensorError, OSError, KeyError, ValueError, TypeError) as e:
        if isinstance(e, VectorFileError):
            raise
        raise VectorFileError(f"cannot read vectors file {p} ({type(e).__name__}: {e}); "
                              "write it again with introspect vectors --export FILE") from e
    out: dict[tuple[str, int], ConceptVector] = {}
    for e in entries:
        t = tensors[e["key"]].to(torch.float32)
        if tuple(t.shape) != (d_model,):
            raise VectorFileError(f"{p}: tensor {e['key']} has shape {tuple(t.shape)}, the file says d_model={d_model}")
        if tensor_sha256(t) != e["sha256"]:
            raise VectorFileError(f"{p}: tensor {e['key']} does not match its sha256 (the file was changed or is damaged)")
        raw = float(t.norm())
        if not math.isclose(raw, float(e["raw_norm"]), rel_tol=1e-4):
            raise VectorFileError(f"{p}: tensor {e['key']} has norm {raw:.4g}, its raw_norm says {e['raw_norm']:.4g}")
        out[(e["word"], int(e["layer"]))] = ConceptVector(e["word"], int(e["layer"]), t / raw, raw,
                                                          float(e["mean_resid_norm"]))
    sha = _set_hash([(e["word"], int(e["layer"]), float(e["mean_resid_norm"]), e["sha256"]) for e in entries])
    if sha != meta["sha256"]:
        raise VectorFileError(f"{p}: the set's sha256 {sha[:12]} differs from the file's {meta['sha256'][:12]}")
    return VectorSet(out, "file", sha, d_model, meta.get("model_id", ""), meta.get("fingerprint", ""), str(p), built)


def from_tensors(tensors: Mapping[Any, Tensor | ConceptVector], layers: Sequence[int], d_model: int,
                 resid_norms: Mapping[int, float]) -> VectorSet:
    """Vectors from a Python mapping: ``{word: tensor}`` (the same direction at every run layer) or
    ``{(word, layer): tensor}``. Each tensor is taken at its raw size (α = 1 in raw units adds it as
    given); ``resid_norms`` is the model's mean residual norm per layer, measured on the baseline
    prompts, so "resid" units mean what they mean for built vectors."""
    out: dict[tuple[str, int], ConceptVector] = {}
    for key, value in tensors.items():
        word, keyed = (key[0], [int(key[1])]) if isinstance(key, tuple) else (key, list(layers))
        if not isinstance(word, str) or not word:
            raise VectorFileError(f"vector keys must be a word or (word, layer), got {key!r}")
        t = value.vector * value.raw_norm if isinstance(value, ConceptVector) else value
        if not isinstance(t, Tensor):
            raise VectorFileError(f"vector for {word!r} is a {type(t).__name__}; pass a torch tensor of shape [{d_model}]")
        t = t.detach().to("cpu", torch.float32)
        if t.dim() == 2 and t.shape[0] == 1:  # a [1, d] row (an SAE decoder row as sliced)
            t = t.flatten()
        if tuple(t.shape) != (d_model,):
            raise VectorFileError(f"vector for {word!r} has shape {tuple(t.shape)}, this model's residual stream "
                                  f"needs [{d_model}]")
        raw = float(t.norm())
        if not math.isfinite(raw) or raw == 0.0:
            raise VectorFileError(f"vector for {word!r} has norm {raw}: need a finite, non-zero vector")
        for layer in keyed:
            if layer not in resid_norms:
                raise VectorFileError(f"vector for {word!r} at layer {layer}, outside the run's layers {sorted(resid_norms)}")
            out[(word, layer)] = ConceptVector(word, layer, t / raw, raw, float(resid_norms[layer]))
    if not out:
        raise VectorFileError("the vector mapping is empty")
    return VectorSet(out, "python", vectors_hash(out), d_model, built={"from": "a Python mapping of concept to tensor"})

