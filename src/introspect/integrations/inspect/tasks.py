"""Toolkit tasks as Inspect evals (first step: task A's detection question).

``inspect eval introspect/injected_thoughts --model introspect/smollm2-135m-instruct`` (the
task registered by name; ``-T layer=20`` for another layer than the command line's default ones)
asks task A's question (Lindsey's ``paper``
framing, ``explained``, or ``seed``: the strict NO_INJECTION / INJECTION: <word> format) as the
toolkit's task A plans it: one sample per (concept, trial), one request of conditions decoded
from one prompt: the control, then per (layer, α) cell the concept injected from the blank line
before "Trial N" through every generated token (task A's positions), and, with ``ablations``
(default, as task A), a Gaussian direction and another concept's direction at v's norm, and −v;
with ``placebo``, a zero vector there too. ``samples`` K answers per condition. Per concept,
task A's first ``n_bias`` bias questions (unrelated yes/no questions in the same framing: the
concept injected and not), graded by content (``grading.grade_bias_answer``).

Each request carries its toolkit trial's coordinates (``trial``: task A, framing, index, concept,
seed), so the provider draws sample k of every condition from the stream a toolkit run gives
that trial and the random direction from the seed it gives it: with the same settings, a direct
``introspect run --tasks A`` run's detection trials and these decode the same answers, and
``records.records_from_log`` makes task A records (task ``A``) that its summariser pairs as the
direct run's. Concepts are task A's seeded sample of the words file, the other concept and the
mismatch word task A's own draws. Graded per choice by task A's grader (``scorers.detection``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
)

from introspect.grading import NEXT_TURN_STOPS
from introspect.integrations.inspect.scorers import detection
from introspect.integrations.inspect.solvers import inject
from introspect.tasks import prompts as P
from introspect.tasks.base import TaskConfig
from introspect.tasks.injection import common
from introspect.tasks.injection.task_a import BIAS_TOKENS

FRAMINGS = {"paper": P.task_a_paper, "explained": P.task_a_explained, "seed": P.task_a_seed}
ROLES = {"user": ChatMessageUser, "assistant": ChatMessageAssistant, "system": ChatMessageSystem}


def _messages(conv) -> list[Any]:
    return [ROLES[m["role"]](content=m["content"]) for m in conv.messages]


def _listed(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def layers_of(layer: Any) -> tuple[int, ...]:
    """``layer`` (a number or a list) as layers; None: the command line's default layers for the
    model under evaluation (``tasks.runner.default_layers``: three around two thirds of its
    depth), read from the ``introspect/...`` model Inspect evaluates (loaded once per process)."""
    if layer is not None:
        return tuple(int(la) for la in _listed(layer))
    from inspect_ai.model import get_model

    from introspect.integrations.inspect.provider import IntrospectAPI
    from introspect.tasks.runner import default_layers

    try:
        api = get_model().api
    except Exception as e:  # no model to evaluate (the task made outside an eval)
        raise ValueError(f"layer not given and no model to read the default layers from ({e}); pass -T layer=L") from e
    if not isinstance(api, IntrospectAPI):
        raise ValueError(f"layer not given: the default layers come from an introspect/<model>'s depth, and "
                         f"{type(api).__name__} has none; pass -T layer=L")
    return default_layers(int(api.model().cfg.n_layers))


def cell_conditions(word: str, other: str | None, cells: list[tuple[int, float]], *, ablations: bool = True,
                    placebo: bool = True) -> list[dict[str, Any]]:
    """A trial's conditions in task A's order: the control, then per cell injected, random,
    concept_random (``other``'s direction), negative, and the placebo; labelled by cell when
    there are several. ``other`` None: no ablations (a bias question's trial)."""
    out: list[dict[str, Any]] = [{"direction": "none"}]
    for layer, alpha in cells:
        tag = f"@{layer}:{alpha:g}" if len(cells) > 1 else ""
        dirs: list[tuple[str, str, dict[str, Any]]] = [("concept", "injected", {})]
        if ablations and other is not None:
            dirs += [("random", "random", {}), ("other_concept", "concept_random", {"vector_concept": other}),
                     ("negative", "negative", {})]
        if placebo:
            dirs.append(("zero", "placebo", {}))
        out += [{"direction": d, "layer": layer, "alpha": alpha, "label": label + tag, **more}
                for d, label, more in dirs]
    return out


@task
def injected_thoughts(layer: int | list[int] | None = None, alpha: float | list[float] = 4.0, alpha_units: str = "raw",
                      n_concepts: int = 5, n_trials: int = 1, framing: str = "paper", ablations: bool = True,
                      placebo: bool = True, samples: int = 1, seed: int = 0, words_file: str | None = None,
                      max_tokens: int = 40, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                      n_bias: int = 5) -> Task:
    """Task A's detection question, one sample per (concept, trial), each a group of conditions
    (every (layer, α) cell of ``layer`` × ``alpha``, each a number or a list; ``layer`` not given:
    the command line's default layers for the model, ``layers_of``), K = ``samples``
    answers per condition; and, per concept, task A's first ``n_bias`` bias questions in the
    same framing (the control ``bias_control`` and the concept injected per cell: ``bias``),
    answered within min(16, ``max_tokens``) tokens; the toolkit's defaults (T = 1, 40 tokens,
    next-turn stop strings)."""
    if framing not in FRAMINGS:
        raise ValueError(f"framing must be one of {sorted(FRAMINGS)}, got {framing!r}")
    items = P.load_bias_items()
    if not 0 <= n_bias <= len(items):
        raise ValueError(f"n_bias must be between 0 and the {len(items)} bias questions, got {n_bias}")
    cfg = TaskConfig(layers=layers_of(layer), alphas=tuple(float(a) for a in _listed(alpha)),
                     alpha_units=alpha_units, n_concepts=n_concepts, n_trials=n_trials, seed=seed,
                     words_file=words_file, n_samples=int(samples))
    ctx = SimpleNamespace(cfg=cfg)  # what task A's draws read: the seed and the words file
    concepts = common.pick_concepts(cfg)
    cells = [(int(la), float(a)) for la in cfg.layers for a in cfg.alphas]
    out = []
    for word in concepts:
        mismatch = common.other_concept(ctx, concepts, word, "mismatch")
        for i in range(n_trials):
            conv = FRAMINGS[framing](i + 1)
            other = common.other_concept(ctx, [], word, f"concept_random:{i}")
            request = {"concept": word, "alpha_units": alpha_units, "positions": {"from_text": conv.marks[P.FROM_MARK]},
                       "stream_key": f"{seed}:{framing}:{word}:{i}",
                       "trial": {"task": "A", "variant": framing, "index": i, "word": word, "seed": seed},
                       "conditions": cell_conditions(word, other, cells, ablations=ablations, placebo=placebo)}
            out.append(Sample(id=f"{word}-{i}", input=_messages(conv), target=word,
                              metadata={"introspect": request, "word": word, "trial": i, "mismatch_word": mismatch}))
        for q in range(n_bias):
            question, correct = items[q]
            conv = P.task_a_bias(question, framing, 1)
            request = {"concept": word, "alpha_units": alpha_units, "positions": {"from_text": conv.marks[P.FROM_MARK]},
                       "stream_key": f"{seed}:{framing}:{word}:bias{q}",
                       "trial": {"task": "A", "variant": framing, "index": 0, "word": word, "seed": seed,
                                 "params": {"question": q}},
                       "conditions": cell_conditions(word, None, cells, placebo=placebo)}
            out.append(Sample(id=f"{word}-bias{q}", input=_messages(conv), target=correct,
                              metadata={"introspect": request, "word": word, "trial": 0,
                                        "bias": {"question": question, "correct": correct},
                                        "generate": {"max_tokens": min(BIAS_TOKENS, max_tokens)}}))
    config = GenerateConfig(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k or None,
                            num_choices=int(samples), stop_seqs=list(NEXT_TURN_STOPS))
    return Task(dataset=MemoryDataset(out, name=f"injected_thoughts-{framing}"), solver=inject(),
                scorer=detection(), config=config, name="injected_thoughts")
