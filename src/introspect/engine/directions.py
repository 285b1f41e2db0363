"""A refusal direction, computed and chosen as Arditi et al. (2024) do.

Candidates: for every layer and each post-instruction position (the chat template's tokens after
the user's request), the mean residual over harmful requests minus the mean over harmless ones,
read at ``blocks.L.hook_resid_post`` on a training split. Selection, on a validation split: with
the candidate ablated from every layer (``engine.load.ablation``), the mean refusal score on
harmful requests (``bypass``, lower is better); added at its layer to harmless requests, the mean
refusal score (``induce``, must be > 0: the direction must cause refusal); the KL divergence of the
next-token distribution on harmless requests with the candidate ablated (``kl`` ≤ 0.1: ablation
must leave harmless behaviour alone); and the layer below 0.8 of the depth. Among the candidates
that pass, the lowest ``bypass`` wins. The refusal score is the log-odds of the refusal tokens
(the first tokens of "I cannot", "Sorry", ...) at the first answer position.

Two departures from the paper, each named and opt-in, for models where its ``induce`` bar keeps
no candidate (a model whose first answer token is spread over "To", "I", "As" never scores above
0 even where it refuses): ``refusal-relative`` sets the bar at the model's own mean refusal score
on the harmful validation requests (adding the direction must make harmless requests look as
refused as harmful ones); ``refusal-unfiltered`` drops the ``induce`` filter (the lowest bypass
within the KL and depth rules, whatever adding it does). The rule, the bar and the chosen
candidate's ``induce`` travel in the direction's header, so a direction that does not cause
refusal says so wherever its results go.

Why these rules: they are the paper's, so a direction here means what it means there; the figures
of the chosen candidate travel with it into every run header.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from introspect.engine import vector_files
from introspect.engine.load.ablation import (
    AblationError,
    Direction,
    ablation_hook,
    remove_direction,
    write_hooks,
)
from introspect.engine.run.chat import Conversation, Prompt, render
from introspect.engine.run.decode import next_token_logprobs
from introspect.engine.run.inject import InjectionSpec
from introspect.engine.vectors import ConceptVector, residuals

REFUSAL_STARTS = ("I cannot", "I can't", "I'm sorry", "I am sorry", "Sorry", "I apologize", "As an AI",
                  "I am unable", "I'm unable", "Unfortunately", "I won't")
MAX_POSITIONS = 5  # post-instruction positions tried (from the end of the prompt)
KL_MAX = 0.1
DEPTH_MAX = 0.8


@dataclass(frozen=True)
class Candidate:
    layer: int
    position: int  # from the end of the prompt (-1 = last)
    bypass: float
    induce: float
    kl: float

    def passes(self, n_layers: int, bar: float = 0.0) -> tuple[bool, str]:
        """Whether the selection keeps it, and why not (NaN: not measured after an earlier filter);
        ``bar``: the refusal score adding it must exceed (0: Arditi's)."""
        if self.layer >= DEPTH_MAX * n_layers:
            return False, f"layer {self.layer} at or past {DEPTH_MAX:g} of the depth"
        if not self.kl <= KL_MAX:
            return False, f"KL on harmless requests {self.kl:.3f} > {KL_MAX}"
        if not self.induce > bar:
            return False, f"adding it does not induce refusal (score {self.induce:.2f}, needs > {bar:.2f})"
        return True, ""


def request_prompt(tokenizer: Any, text: str) -> tuple[Prompt, int]:
    """The request in the chat template, and how many template tokens follow it."""
    p = render(tokenizer, Conversation.of(("user", text), request=text))
    return p, len(p) - p.spans["request"][1]


def refusal_token_ids(tokenizer: Any) -> list[int]:
    """First tokens of the usual refusal openings, with and without a leading space."""
    ids: dict[int, None] = {}
    for phrase in REFUSAL_STARTS:
        for text in (phrase, " " + phrase):
            got = tokenizer(text, add_special_tokens=False)["input_ids"]
            if got:
                ids[int(got[0])] = None
    return list(ids)


def refusal_scores(model: Any, prompts: Sequence[Prompt], *, hooks: Sequence = (),
                   injections: Sequence | None = None) -> Float[Tensor, " n"]:
    """Log-odds of a refusal token at the first answer position, per prompt."""
    ids = refusal_token_ids(model.tokenizer)
    with model.hooks(fwd_hooks=list(hooks)):
        lp = next_token_logprobs(model, prompts, injections)
    p = torch.logsumexp(lp[:, ids], dim=-1).clamp(max=-1e-6)
    return p - torch.log1p(-p.exp())


def split(items: Sequence[str], seed: int, frac: float = 0.6) -> tuple[list[str], list[str]]:
    """A seeded train/validation split."""
    xs = list(items)
    random.Random(seed).shuffle(xs)
    k = max(1, min(len(xs) - 1, round(frac * len(xs))))
    return xs[:k], xs[k:]


def candidate_directions(model: Any, harmful: Sequence[str], harmless: Sequence[str],
                         layers: Sequence[int] | None = None
                         ) -> tuple[Float[Tensor, "layer pos d_model"], list[int], Float[Tensor, "layer pos"]]:
    """Mean(harmful) − mean(harmless) residuals at each layer and post-instruction position, the
    positions (from the end), and the requests' mean residual norm there."""
    layers = list(range(int(model.cfg.n_layers))) if layers is None else list(layers)
    hp = [request_prompt(model.tokenizer, t) for t in harmful]
    bp = [request_prompt(model.tokenizer, t) for t in harmless]
    k = min(MAX_POSITIONS, *(n for _, n in hp + bp))
    if k < 1:
        raise ValueError("the chat template adds no token after the request: no post-instruction position")
    prompts = [p for p, _ in hp + bp]
    acts = residuals(model, prompts, layers, positions=[list(range(len(p) - k, len(p))) for p in prompts])
    a = torch.stack(acts)  # n layer k d
    diff = a[: len(hp)].mean(0) - a[len(hp):].mean(0)
    return diff, [i - k for i in range(k)], a.norm(dim=-1).mean(0)


BARS = ("arditi", "relative", "unfiltered")


def _no_direction(out: list[Candidate], bar: str, floor: float, own: float) -> str:
    """The one-line reason no candidate passed ``bar``'s selection, naming the departure that
    would keep one: the unfiltered rule can only fail on KL or depth, the others also on induce."""
    nan = float("nan")
    kls = [c.kl for c in out if c.kl == c.kl]
    ind = [c.induce for c in out if c.induce == c.induce]
    head = "no refusal direction passes the selection: "
    if bar == "unfiltered":
        return (f"{head}none of the {len(out)} candidates below {DEPTH_MAX:g} of the depth keeps harmless "
                f"answers within KL {KL_MAX} (lowest {min(kls, default=nan):.3f})")
    if bar == "arditi" and max(ind, default=nan) > own:
        hint = "; refusal-relative (the bar at the harmful requests' own score) would keep one"
    else:
        hint = "; refusal-unfiltered drops the induce filter"
    who = "Arditi's" if bar == "arditi" else f"the {bar}"
    return (f"{head}of {len(out)} candidates {sum(k <= KL_MAX for k in kls)} keep harmless answers within KL "
            f"{KL_MAX} (lowest {min(kls, default=nan):.3f}) and none of those induces refusal (highest refusal "
            f"log-odds {max(ind, default=nan):.2f}, needs > {floor:.2f}; the harmful validation requests "
            f"themselves score {own:.2f}): {who} selection finds no refusal direction in this model on these "
            f"requests{hint}")


def choose(model: Any, harmful: Sequence[str], harmless: Sequence[str], *, seed: int = 0,
           layers: Sequence[int] | None = None, data: dict[str, Any] | None = None,
           bar: str = "arditi") -> tuple[Direction, list[Candidate]]:
    """Compute every candidate on a training split and choose one on the validation split;
    ``bar``: what ``induce`` must exceed (``BARS``: 0, the harmful requests' own score, nothing)."""
    if bar not in BARS:
        raise ValueError(f"bar {bar!r}: one of {', '.join(BARS)}")
    h_tr, h_va = split(harmful, seed)
    b_tr, b_va = split(harmless, seed + 1)
    layers = list(range(int(model.cfg.n_layers))) if layers is None else list(layers)
    diff, positions, norms = candidate_directions(model, h_tr, b_tr, layers)
    hv = [request_prompt(model.tokenizer, t)[0] for t in h_va]
    bv = [request_prompt(model.tokenizer, t)[0] for t in b_va]
    clean = next_token_logprobs(model, bv)
    own = float(refusal_scores(model, hv).mean())  # how far the model's own refusals reach on this scale
    floor = {"arditi": 0.0, "relative": own, "unfiltered": -math.inf}[bar]
    n_layers = int(model.cfg.n_layers)
    nan = float("nan")
    out: list[Candidate] = []
    best: tuple[float, int, int] | None = None
    for li, layer in enumerate(layers):
        for pi, pos in enumerate(positions):
            raw = diff[li, pi]
            if not float(raw.norm()) > 0:
                continue
            if layer >= DEPTH_MAX * n_layers:  # filtered by depth: nothing to measure
                out.append(Candidate(layer, pos, nan, nan, nan))
                continue
            # the cheapest filters first; a candidate that fails one is not scored further
            r = raw / raw.norm()
            hooks = [(name, ablation_hook(r)) for name in write_hooks(model)]
            with model.hooks(fwd_hooks=hooks):
                abl = next_token_logprobs(model, bv)
            kl = float((clean.exp() * (clean - abl)).sum(-1).mean())
            induce = bypass = nan
            if kl <= KL_MAX:
                spec = InjectionSpec(layer, 1.0, raw, "all")
                induce = float(refusal_scores(model, bv, injections=[spec] * len(bv)).mean())
            if induce > floor:
                bypass = float(refusal_scores(model, hv, hooks=hooks).mean())
            c = Candidate(layer, pos, bypass, induce, kl)
            out.append(c)
            if c.passes(n_layers, floor)[0] and (best is None or bypass < best[0]):
                best = (bypass, li, pi)
    if best is None:
        raise ValueError(_no_direction(out, bar, floor, own))
    _, li, pi = best
    raw = diff[li, pi]
    base_b = float(refusal_scores(model, bv).mean())
    chosen = next(c for c in out if c.layer == layers[li] and c.position == positions[pi])
    induced = {"arditi": "with induce > 0, ", "relative": "with induce > the harmful requests' own refusal score, ",
               "unfiltered": "(no induce filter) within "}[bar]
    selection = {"rule": f"lowest bypass among candidates {induced}KL <= {KL_MAX}, layer < {DEPTH_MAX:g} depth",
                 "bar": bar, "induce_bar": None if bar == "unfiltered" else round(floor, 4),
                 "induces_refusal": chosen.induce > 0,
                 "bypass": round(chosen.bypass, 4), "induce": round(chosen.induce, 4), "kl": round(chosen.kl, 5),
                 "refusal_score_harmful": round(own, 4), "refusal_score_harmless": round(base_b, 4),
                 "n_candidates": len(out), "n_passing": sum(c.passes(n_layers, floor)[0] for c in out),
                 "raw_norm": round(float(raw.norm()), 4), "mean_resid_norm": round(float(norms[li, pi]), 4),
                 "seed": seed}
    d = {**(data or {}), "n_harmful_train": len(h_tr), "n_harmless_train": len(b_tr),
         "n_harmful_val": len(h_va), "n_harmless_val": len(b_va)}
    name = "refusal" if bar == "arditi" else f"refusal-{bar}"
    return Direction(name, (raw / raw.norm()).float(), layers[li], positions[pi], d, selection), out


def refusal_direction(model: Any, requests: str | Path | None = None, *, seed: int = 0,
                      layers: Sequence[int] | None = None, cache: bool = True, bar: str = "arditi") -> Direction:
    """The chosen refusal direction for this model, from ``requests`` (the project's own set by
    default, a YAML of the same layout, or an XSTest CSV), cached per model, data, seed, layers and
    bar (``BARS``: see the module docstring)."""
    from introspect.data.refusal import load_refusal_requests
    from introspect.engine.load.models import cache_root, model_info

    harmful, harmless = load_refusal_requests(requests)
    fp = model_info(model).fingerprint
    blob = json.dumps([fp, harmful, harmless, seed, None if layers is None else list(layers)]
                      + ([] if bar == "arditi" else [bar]))
    sha = hashlib.sha256(json.dumps([harmful, harmless]).encode()).hexdigest()
    path = cache_root() / "directions" / fp.replace(":", "_").replace("/", "_") / \
        f"refusal-{hashlib.sha1(blob.encode()).hexdigest()[:20]}.safetensors"
    if cache and path.exists():
        return from_file(model, path)
    data = {"requests": str(requests) if requests is not None else "built-in refusal_requests.yaml",
            "requests_sha256": sha}
    d, _ = choose(model, harmful, harmless, seed=seed, layers=layers, data=data, bar=bar)
    if cache:  # read back, so the run that chose it and every later run remove the same stored vector
        path.parent.mkdir(parents=True, exist_ok=True)
        save(model, d, path)
        return from_file(model, path)
    return d


def save(model: Any, d: Direction, path: str | Path) -> str:
    """A direction as a one-vector vectors file (``engine.vector_files``) with its data and selection."""
    from introspect.engine.load.models import model_info

    info = model_info(model)
    cv = ConceptVector(d.name, d.layer, d.vector, float(d.selection.get("raw_norm", 1.0)),
                       float(d.selection.get("mean_resid_norm", 0.0)))
    return vector_files.save(path, [cv], model_id=info.name, fingerprint=info.fingerprint,
                             d_model=int(model.cfg.d_model),
                             built={"direction": True, "position": d.position, "data": d.data, "selection": d.selection})


def from_file(model: Any, path: str | Path) -> Direction:
    """The one direction a vectors file holds, checked against this model."""
    from introspect.engine.load.models import model_info

    vs = vector_files.read(path)
    vs.check(model, model_info(model).fingerprint)
    if len(vs.vectors) != 1:
        raise AblationError(f"{path} holds {len(vs.vectors)} vectors; a direction file holds one "
                            "(export one with introspect.engine.directions.save)")
    (cv,) = vs.vectors.values()
    built = dict(vs.built)
    data = {**built.get("data", {}), "file": str(path), "file_sha256": vs.sha256}
    return Direction(cv.word, cv.vector, cv.layer, int(built.get("position", -1)), data, dict(built.get("selection", {})))


def resolve(model: Any, spec: str | Path | Direction, *, requests: str | Path | None = None, seed: int = 0) -> Direction:
    """``refusal`` (chosen over every layer), ``refusal@L`` (chosen at layer L), either with
    ``-relative`` or ``-unfiltered`` (``refusal-relative@L``: the induce bar, module docstring),
    a direction file, or a Direction."""
    if isinstance(spec, Direction):
        return spec
    text = str(spec)
    name = text.partition("@")[0]
    if name in ("refusal", *(f"refusal-{b}" for b in BARS[1:])) and (text == name or text.startswith(name + "@")):
        layers = None
        if "@" in text:
            at = text.partition("@")[2]
            if not at.isdigit() or not 0 <= int(at) < int(model.cfg.n_layers):
                raise AblationError(f"--remove-direction {text}: the layer must be 0..{model.cfg.n_layers - 1}")
            layers = [int(at)]
        return refusal_direction(model, requests, seed=seed, layers=layers,
                                 bar=name.partition("-")[2] or "arditi")
    if not Path(text).is_file():
        raise AblationError(f"--remove-direction takes refusal[@L], refusal-relative[@L], refusal-unfiltered[@L] or a "
                            "direction file; "
                            f"{text!r} is none "
                            "of these (no such file)")
    return from_file(model, text)


def apply(model: Any, spec: str | Path | Direction | None, **kw: Any) -> Any:
    """``model`` with the direction ``spec`` names removed (unchanged for None)."""
    if spec is None:
        return model
    return remove_direction(model, resolve(model, spec, **kw))
