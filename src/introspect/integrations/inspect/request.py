"""The per-request injection schema: JSON under ``GenerateConfig.extra_body["introspect"]``.

Why JSON only: an Inspect log records every request's config, so a request must say *what* to
inject (a concept word, a direction kind, a layer, a strength and its units, where) and never
carry a tensor; the provider builds the vector from the toolkit's concept-vector cache.

One request, one condition::

    {"concept": "bread", "direction": "concept", "layer": 2, "alpha": 4, "alpha_units": "raw",
     "positions": "all", "stream_key": "trial-0"}

or a group of conditions decoded together from one prompt and one stream (one output choice per
condition, in order), so a zero injection reproduces its control bitwise::

    {"concept": "bread", "layer": 2, "alpha": 4, "stream_key": "trial-0",
     "conditions": [{"direction": "none"}, {"direction": "concept"}, {"direction": "zero"}]}

Fields of a condition (top-level values are the defaults every condition inherits):

- ``direction``: ``none`` (the control: no injection), ``concept`` (+v), ``negative`` (−v),
  ``random`` (a Gaussian direction carrying v's norm), ``other_concept`` (``vector_concept``'s
  direction at this concept's norm) or ``zero`` (alias ``placebo``: a zero vector at the same
  positions and α). Default: ``concept`` when a concept is given, else ``none``.
- ``concept``: the concept word; ``layer`` (int); ``alpha`` (number) in ``alpha_units``
  (``raw``: × the raw mean-difference norm, Lindsey's strengths; ``unit``: × the unit vector;
  ``resid``: × the mean residual norm at the injected positions of this prompt).
- ``positions``: ``"all"`` (every prompt token but the first, and every generated token),
  ``"prompt"``, ``"generated"``, a list of prompt token indices, ``{"from": i}`` (prompt index i
  onwards, through every generated token), ``{"from_text": s}`` (from the first token of the
  last occurrence of ``s`` in the rendered prompt onwards) or ``{"text": s}`` (that substring's
  tokens only).
- ``random_seed`` (``random`` only; default: derived from the stream key), ``vector_concept``
  (``other_concept`` only), ``label`` (a name for the condition in the output).

Top level only: ``stream_key`` (every row of the request samples from the stream of this key;
without it, ``GenerateConfig.seed`` and the prompt's tokens name the stream), ``conditions`` and
``trial``: the toolkit trial this request is, as its coordinates (no model identity)::

    "trial": {"task": "A", "variant": "paper", "index": 0, "word": "bread", "seed": 0}

(optional ``params``, an object of the trial's params; ``epoch``, > 1 for Inspect's repeats;
``part``, which of the trial's prompts this is: task B asks two, the toolkit's streams
``<key>:0`` and ``<key>:1``).
With it, sample k of every condition draws from the stream a toolkit run gives that trial's
k-th sample (``Trial.stream_key`` over the model's fingerprint, the key ``stream_key`` would
name is not used) and a ``random`` direction without ``random_seed`` gets the seed a toolkit
run gives its ``random`` trial (per sample): a direct run of the same trials decodes the same
answers. ``epoch`` N > 1 appends ``:epoch<N>`` to those keys (new draws).

Top level only, instead of a generation: ``readout``, a scalar readout of one uninjected forward
pass (task D's; floats come back, never tensors)::

    "readout": {"kind": "concept_cosine", "concept": "bread", "positions": {"text": "The sentence."},
                "control_words": ["ocean", "justice"], "layers": "all"}

the mean cosine, per layer, of the residual (``hook_resid_post``) over those prompt positions
with the concept's vector, raw and centred by the baseline prompts' mean, and the same against
each control word's vector (``readout.concept_cosines``).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

DIRECTIONS = ("none", "concept", "negative", "random", "other_concept", "zero")
ALIASES = {"placebo": "zero", "control": "none"}
UNITS = ("raw", "unit", "resid")
# the records' condition of each direction (introspect.records.jsonl.CONDITIONS)
RECORD_CONDITION = {"none": "control", "concept": "injected", "negative": "negative", "random": "random",
                    "other_concept": "concept_random", "zero": "injected"}
DEFAULT_LABEL = {"none": "control", "concept": "injected", "negative": "negative", "random": "random",
                 "other_concept": "concept_random", "zero": "placebo"}
CONDITION_KEYS = {"direction", "concept", "layer", "alpha", "alpha_units", "positions", "random_seed",
                  "vector_concept", "label"}
TOP_KEYS = CONDITION_KEYS | {"stream_key", "conditions", "trial", "readout"}
READOUT_KEYS = {"kind", "concept", "positions", "control_words", "layers"}
READOUTS = ("concept_cosine",)
TRIAL_KEYS = {"task", "variant", "index", "word", "seed", "params", "epoch", "part"}


class RequestError(ValueError):
    """An ``extra_body["introspect"]`` request that does not follow the schema."""


@dataclass(frozen=True)
class Condition:
    """One row of a request: what to inject (nothing, for the control) and where."""

    direction: str = "none"
    concept: str | None = None
    layer: int | None = None
    alpha: float = 0.0
    alpha_units: str = "raw"
    positions: Any = "all"  # JSON form, resolved against the rendered prompt by the provider
    random_seed: int | None = None
    vector_concept: str | None = None
    label: str = "control"

    @property
    def injected(self) -> bool:
        return self.direction != "none"

    @property
    def record_condition(self) -> str:
        return RECORD_CONDITION[self.direction]

    def marks(self) -> dict[str, str]:
        """Substrings of the prompt whose token spans this condition's positions need."""
        p = self.positions
        if isinstance(p, dict) and ("from_text" in p or "text" in p):
            return {self.mark_name: p.get("from_text", p.get("text"))}
        return {}

    @property
    def mark_name(self) -> str:
        p = self.positions
        return "from_text" if isinstance(p, dict) and "from_text" in p else "text"

    def to_json(self) -> dict[str, Any]:
        return {"direction": self.direction, "concept": self.concept, "layer": self.layer,
                "alpha": self.alpha, "alpha_units": self.alpha_units, "positions": self.positions,
                "random_seed": self.random_seed, "vector_concept": self.vector_concept, "label": self.label}


@dataclass(frozen=True)
class Request:
    conditions: tuple[Condition, ...]
    stream_key: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    trial: dict[str, Any] | None = None  # the toolkit trial's coordinates (``trial`` above)
    readout: dict[str, Any] | None = None  # a forward pass's scalar readout instead of a generation


def _readout(r: Any) -> dict[str, Any]:
    """The ``readout`` object, checked, with its defaults filled in."""
    if not isinstance(r, dict):
        raise RequestError(f"introspect.readout must be an object, got {type(r).__name__}")
    unknown = set(r) - READOUT_KEYS
    if unknown:
        raise RequestError(f"introspect.readout: unknown keys {sorted(unknown)}; a readout takes {sorted(READOUT_KEYS)}")
    kind = r.get("kind", "concept_cosine")
    if kind not in READOUTS:
        raise RequestError(f"introspect.readout.kind must be one of {READOUTS}, got {kind!r}")
    if not isinstance(r.get("concept"), str) or not r["concept"].strip():
        raise RequestError(f"introspect.readout.concept must be a word, got {r.get('concept')!r}")
    pos = _positions(r.get("positions"), "introspect.readout")
    if not isinstance(pos, list) and not (isinstance(pos, dict) and "text" in pos):
        raise RequestError("introspect.readout.positions must be prompt token indices or {'text': s}")
    words = r.get("control_words", [])
    if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
        raise RequestError(f"introspect.readout.control_words must be a list of words, got {words!r}")
    layers = r.get("layers", "all")
    if layers != "all" and not (isinstance(layers, list) and layers and all(_int(x) and x >= 0 for x in layers)):
        raise RequestError(f"introspect.readout.layers must be 'all' or a list of layer indices, got {layers!r}")
    return {"kind": kind, "concept": r["concept"], "positions": pos, "control_words": list(words), "layers": layers}


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _trial(t: Any) -> dict[str, Any]:
    """The ``trial`` object, checked, with its defaults filled in."""
    if not isinstance(t, dict):
        raise RequestError(f"introspect.trial must be an object, got {type(t).__name__}")
    unknown = set(t) - TRIAL_KEYS
    if unknown:
        raise RequestError(f"introspect.trial: unknown keys {sorted(unknown)}; a trial takes {sorted(TRIAL_KEYS)}")
    if not isinstance(t.get("task"), str) or not t["task"]:
        raise RequestError(f"introspect.trial.task must be a task name, got {t.get('task')!r}")
    for k, default in (("index", 0), ("seed", 0), ("epoch", 1), ("part", 0)):
        if not _int(t.get(k, default)):
            raise RequestError(f"introspect.trial.{k} must be an integer, got {t.get(k)!r}")
    if int(t.get("epoch", 1)) < 1 or int(t.get("index", 0)) < 0 or int(t.get("part", 0)) < 0:
        raise RequestError("introspect.trial: index and part must be >= 0 and epoch >= 1")
    for k in ("variant", "word"):
        if t.get(k) is not None and not isinstance(t[k], str):
            raise RequestError(f"introspect.trial.{k} must be a string, got {t[k]!r}")
    if not isinstance(t.get("params", {}), dict):
        raise RequestError(f"introspect.trial.params must be an object, got {t.get('params')!r}")
    return {"task": t["task"], "variant": t.get("variant") or "default", "index": int(t.get("index", 0)),
            "word": t.get("word"), "seed": int(t.get("seed", 0)), "params": dict(t.get("params", {})),
            "epoch": int(t.get("epoch", 1)), "part": int(t.get("part", 0))}


def _check_json(value: Any, where: str) -> None:
    """Only JSON values (no tensors, arrays or objects): what a log can hold and replay."""
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise RequestError(f"{where}: {value} is not a finite number")
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_json(v, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise RequestError(f"{where}: keys must be strings, got {k!r}")
            _check_json(v, f"{where}.{k}")
        return
    raise RequestError(f"{where}: {type(value).__name__} is not a JSON value; requests carry words and "
                       "numbers, never tensors (the provider builds vectors itself)")


def _positions(p: Any, where: str) -> Any:
    if isinstance(p, str):
        if p not in ("all", "prompt", "generated"):
            raise RequestError(f"{where}.positions: unknown mode {p!r}; use all, prompt, generated, a list of "
                               "indices, {'from': i}, {'from_text': s} or {'text': s}")
        return p
    if isinstance(p, list):
        if not p or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in p):
            raise RequestError(f"{where}.positions: a list must hold prompt token indices >= 0, got {p!r}")
        return p
    if isinstance(p, dict) and len(p) == 1:
        (k, v), = p.items()
        if k == "from" and isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return p
        if k in ("from_text", "text") and isinstance(v, str) and v:
            return p
    raise RequestError(f"{where}.positions: {p!r} is not a position spec; use all, prompt, generated, a list "
                       "of indices, {'from': i}, {'from_text': s} or {'text': s}")


def _condition(d: dict[str, Any], where: str) -> Condition:
    unknown = set(d) - CONDITION_KEYS
    if unknown:
        raise RequestError(f"{where}: unknown keys {sorted(unknown)}; a condition takes {sorted(CONDITION_KEYS)}")
    concept = d.get("concept")
    if concept is not None and (not isinstance(concept, str) or not concept.strip()):
        raise RequestError(f"{where}.concept must be a non-empty word, got {concept!r}")
    direction = d.get("direction", "concept" if concept else "none")
    direction = ALIASES.get(direction, direction)
    if direction not in DIRECTIONS:
        raise RequestError(f"{where}.direction {direction!r} unknown; use one of {DIRECTIONS} (or placebo)")
    label = d.get("label") or DEFAULT_LABEL[direction]
    if not isinstance(label, str):
        raise RequestError(f"{where}.label must be a string, got {label!r}")
    if direction == "none":
        return Condition("none", concept, None, 0.0, str(d.get("alpha_units", "raw")), "all", None, None, label)
    if not concept:
        raise RequestError(f"{where}: direction {direction!r} needs a concept word")
    layer = d.get("layer")
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise RequestError(f"{where}: direction {direction!r} needs an integer layer, got {layer!r}")
    alpha = d.get("alpha")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha):
        raise RequestError(f"{where}: direction {direction!r} needs a finite number alpha, got {alpha!r}")
    units = d.get("alpha_units", "raw")
    if units not in UNITS:
        raise RequestError(f"{where}.alpha_units must be one of {UNITS}, got {units!r}")
    seed = d.get("random_seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise RequestError(f"{where}.random_seed must be an integer, got {seed!r}")
    other = d.get("vector_concept")
    if direction == "other_concept" and (not isinstance(other, str) or not other or other == concept):
        raise RequestError(f"{where}: direction other_concept needs vector_concept, a word other than {concept!r}")
    return Condition(direction, concept, layer, float(alpha), units, _positions(d.get("positions", "all"), where),
                     seed, other if direction == "other_concept" else None, label)


def parse_request(body: dict[str, Any] | None) -> Request:
    """The request in ``extra_body`` (the whole dict; the ``introspect`` key is read), checked.
    No ``introspect`` key: one uninjected row (the provider then acts as a plain model)."""
    spec = (body or {}).get("introspect")
    if spec is None:
        return Request((Condition(),))
    if not isinstance(spec, dict):
        raise RequestError(f'extra_body["introspect"] must be an object, got {type(spec).__name__}')
    _check_json(spec, "introspect")
    unknown = set(spec) - TOP_KEYS
    if unknown:
        raise RequestError(f"introspect: unknown keys {sorted(unknown)}; a request takes {sorted(TOP_KEYS)}")
    trial = _trial(spec["trial"]) if "trial" in spec else None
    readout = _readout(spec["readout"]) if "readout" in spec else None
    key = spec.get("stream_key")
    if key is not None and not isinstance(key, (str, int)):
        raise RequestError(f"introspect.stream_key must be a string or integer, got {key!r}")
    base = {k: v for k, v in spec.items() if k in CONDITION_KEYS}
    groups = spec.get("conditions")
    if groups is None:
        conds = (_condition(base, "introspect"),)
    else:
        if not isinstance(groups, list) or not groups or not all(isinstance(c, dict) for c in groups):
            raise RequestError("introspect.conditions must be a non-empty list of objects")
        for i, c in enumerate(groups):
            if "stream_key" in c or "conditions" in c or "trial" in c:
                raise RequestError(f"introspect.conditions[{i}]: stream_key, conditions and trial belong to the top level "
                                   "(a group shares one stream)")
        conds = tuple(_condition({**base, **c}, f"introspect.conditions[{i}]") for i, c in enumerate(groups))
    if readout is not None and ("conditions" in spec or any(c.injected for c in conds)):
        raise RequestError("introspect.readout reads an uninjected forward pass; a readout request takes no conditions")
    labels = [c.label for c in conds]
    if len(set(labels)) != len(labels):
        raise RequestError(f"introspect.conditions: labels must differ, got {labels}; give each a label")
    return Request(conds, None if key is None else str(key), json.loads(json.dumps(spec)), trial, readout)


def derived_seed(stream_key: str | None, label: str) -> int:
    """A random direction's seed when none is given: stable per (stream key, condition label)."""
    return int.from_bytes(hashlib.sha256(f"{stream_key}:{label}:random".encode()).digest()[:4], "big") >> 1
