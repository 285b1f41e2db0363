"""Tasks B and C as Inspect evals, planned by the toolkit's own ``plan()`` functions.

``thoughts_vs_text`` (task B: name the concept injected on a sentence's tokens, and repeat the
sentence intact) and ``prefill_intent`` (task C: the earlier assistant turn says an out-of-place
word; was it meant? the concept, or another one, retro-injected on the sentence's tokens).

Both call ``tasks.injection.task_b.plan`` / ``task_c.plan`` (the chat format) and turn each
toolkit trial group (a concept's control and its injected trials: one prompt, one stream) into
one Inspect sample: one request per prompt of the trial (task B's paper and seed forms ask two,
the thought and the repeat question; MC and task C one), whose conditions are the group's trials
(control, then per (layer, α) cell ``injected`` and, for C, ``mismatch``: the next concept's own
vector), injected on the sentence's tokens as the toolkit does. Each request names its toolkit
trial (and ``part``, which prompt), so sample k draws from the stream a direct run gives that
trial, and the answers equal a direct run's. The scorer grades each (condition, sample) with
the toolkit's graders (``grade_task_B`` over both answers, ``grade_task_C``), and
``records_bcd.inj_records`` gives the toolkit's task B / C records, read by its summarisers.
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
from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver

from introspect.grading import (
    NEXT_TURN_STOPS,
    coherence,
    cut_at_next_turn,
    grade_task_B,
    grade_task_C,
    parse_choice,
    parse_intent,
    parse_task_B,
    parse_thought_free,
)
from introspect.integrations.inspect.provider import METADATA_KEY
from introspect.integrations.inspect.request import parse_request
from introspect.integrations.inspect.tasks import layers_of
from introspect.tasks import prompts as P
from introspect.tasks.base import UNMATCHED_PARAMS, TaskConfig, Trial
from introspect.tasks.injection import common, task_b, task_c

INJ_KEY = "introspect_inj"  # sample metadata: the toolkit task, trial coordinates, what grading needs
ROLES = {"user": ChatMessageUser, "assistant": ChatMessageAssistant, "system": ChatMessageSystem}


def messages_of(conv: Any) -> list[dict[str, str]]:
    """A toolkit conversation as JSON messages; its prefill as a trailing assistant message."""
    out = [{"role": m["role"], "content": m["content"]} for m in conv.messages]
    if conv.prefill is not None:
        out.append({"role": "assistant", "content": conv.prefill})
    return out


def config_for(**kw: Any) -> TaskConfig:
    """The toolkit config these task arguments give (the chat format: plans need no model)."""
    return TaskConfig(**kw).with_options(format="chat")


def groups(trials: list[Trial]) -> list[list[Trial]]:
    """Sample-0 trials grouped as they share a prompt and stream (control first), in plan order."""
    out: dict[tuple, list[Trial]] = {}
    for t in trials:
        if t.sample == 0:
            key = (t.variant, t.word, t.index, tuple((k, v) for k, v in t.params if k not in UNMATCHED_PARAMS))
            out.setdefault(key, []).append(t)
    return list(out.values())


def condition_of(t: Trial) -> dict[str, Any]:
    """A toolkit trial as a request condition (labelled ``<condition>@<layer>:<α>``)."""
    if t.layer is None:
        return {"direction": "none", "label": t.condition}
    return {"direction": "concept", "concept": t.param("other", t.word), "layer": int(t.layer),
            "alpha": float(t.alpha), "label": f"{t.condition}@{t.layer}:{t.alpha:g}"}


def trial_request(cfg: TaskConfig, group: list[Trial], sentence: str, part: int) -> dict[str, Any]:
    t = group[0]
    params = {k: v for k, v in t.params if k not in UNMATCHED_PARAMS}
    return {"concept": t.word, "alpha_units": cfg.alpha_units, "positions": {"text": sentence},
            "stream_key": f"{cfg.seed}:{t.task}:{t.variant}:{t.word}:{t.index}:{part}",
            "trial": {"task": t.task, "variant": t.variant, "index": t.index, "word": t.word, "seed": cfg.seed,
                      "params": params, "part": part},
            "conditions": [condition_of(x) for x in group]}


def sample_of(cfg: TaskConfig, group: list[Trial], convs: list[Any], info: dict[str, Any]) -> Sample:
    """One Inspect sample: one request per prompt of the trial group."""
    t = group[0]
    sentence = P.load_sentences()[t.param("sentence")]
    parts = [{"messages": messages_of(c), "request": trial_request(cfg, group, sentence, j)} for j, c in enumerate(convs)]
    meta = {"task": t.task, "variant": t.variant, "word": t.word, "index": t.index, "sentence": sentence,
            "alpha_units": cfg.alpha_units, "max_new_tokens": cfg.max_new_tokens, **info}
    return Sample(id=f"{t.variant}-{t.word}-{t.index}", input=parts[0]["messages"][0]["content"], target=t.word or "",
                  metadata={"introspect_parts": parts, INJ_KEY: meta})


@solver
def ask_parts() -> Solver:
    """Send each of the sample's prompts (``metadata["introspect_parts"]``) with its request, one
    model call each, in order; the answers' texts go to the store (``introspect_texts``).
    Epochs after the first draw from their own streams (the trial's ``epoch``)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        texts = []
        for part in state.metadata["introspect_parts"]:
            spec = dict(part["request"])
            if state.epoch > 1:
                spec["stream_key"] = f"{spec['stream_key']}:epoch{state.epoch}"
                if isinstance(spec.get("trial"), dict):
                    spec["trial"] = {**spec["trial"], "epoch": state.epoch}
            body = {"introspect": spec}
            parse_request(body)
            state.messages = [ROLES[m["role"]](content=m["content"]) for m in part["messages"]]
            state = await generate(state, extra_body=body, **(part.get("generate") or {}))
            texts.append([c.message.text for c in state.output.choices])
        state.store.set("introspect_texts", texts)
        return state

    return solve


def grade_b(info: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """Task B's grade of one (condition, sample): both answers (or the MC choice), as
    ``task_b.execute`` grades them."""
    texts = [cut_at_next_turn(x) for x in texts]
    word, sentence, v = info["word"], info["sentence"], common.base_variant(info["variant"])
    if v == "mc":
        grade = grade_task_B(None, None, word, sentence, parse_choice(texts[0]), info["mc_answer"], asked=())
    elif v == "seed":
        grade = grade_task_B(parse_task_B(texts[0])[0], parse_task_B(texts[1])[1], word, sentence,
                             asked=("thought", "repeat"))
    else:
        grade = grade_task_B(parse_thought_free(texts[0]), texts[1].strip(), word, sentence, asked=("thought", "repeat"))
    grade["coherent"] = all(coherence(x).coherent for x in texts)
    return grade


def grade_c(info: dict[str, Any], text: str) -> dict[str, Any]:
    """Task C's grade of one answer, as ``task_c.execute`` grades it."""
    cut = cut_at_next_turn(text)
    return {**grade_task_C(parse_intent(cut, info["word"])), "coherent": coherence(cut).coherent}


@scorer(metrics=[mean()])
def injection_grader():
    """Every (condition, sample) of a B or C sample graded by the toolkit's grader; per-choice
    grades in ``metadata["choices"]`` (the records keep them). Value: task B's share of strict
    successes (MC: right choices), task C's share of answers calling the word intentional."""

    async def score(state: TaskState, target: Target) -> Score:
        info = state.metadata[INJ_KEY]
        texts = state.store.get("introspect_texts") or []
        if not texts or not (state.output.metadata or {}).get(METADATA_KEY):
            return Score(value=0.0, explanation="no introspect output to grade")
        if info["task"] == "B":
            grades = [grade_b(info, list(per)) for per in zip(*texts)]
            key = "mc_correct" if common.base_variant(info["variant"]) == "mc" else "success"
        else:
            grades = [grade_c(info, x) for x in texts[0]]
            key = "intentional"
        return Score(value=sum(bool(g.get(key)) for g in grades) / len(grades), metadata={"choices": grades})

    return score


def _listed(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _cfg(layer, alpha, alpha_units, n_concepts, n_trials, variant, samples, seed, words_file, max_tokens,
         temperature, top_p, top_k) -> TaskConfig:
    return config_for(layers=layers_of(layer), alphas=tuple(float(a) for a in _listed(alpha)),
                      alpha_units=alpha_units, n_concepts=n_concepts, n_trials=n_trials, seed=seed,
                      words_file=words_file, variant=variant, n_samples=int(samples), max_new_tokens=max_tokens,
                      temperature=temperature, top_p=top_p, top_k=top_k)


def _task(name: str, cfg: TaskConfig, samples: list[Sample]) -> Task:
    config = GenerateConfig(max_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                            top_k=cfg.top_k or None, num_choices=len(cfg.samples), stop_seqs=list(NEXT_TURN_STOPS))
    return Task(dataset=MemoryDataset(samples, name=name), solver=ask_parts(), scorer=injection_grader(),
                config=config, name=name)


@task
def thoughts_vs_text(layer: int | list[int] | None = None, alpha: float | list[float] = 4.0, alpha_units: str = "raw",
                     n_concepts: int = 5, n_trials: int = 1, variant: str | None = None, samples: int = 1,
                     seed: int = 0, words_file: str | None = None, max_tokens: int = 40, temperature: float = 1.0,
                     top_p: float = 1.0, top_k: int = 0) -> Task:
    """Task B as the toolkit plans it (``task_b.plan``): variants ``paper`` and ``mc`` by default
    (``-T variant=paper,seed,mc`` or ``all``), per (variant, concept, trial) one sample asking
    the trial's prompts, each with the control and the concept injected on the sentence per
    (layer, α) cell (``layer`` not given: the command line's default layers for the model,
    ``tasks.layers_of``), K = ``samples`` answers each."""
    cfg = _cfg(layer, alpha, alpha_units, n_concepts, n_trials, variant, samples, seed, words_file, max_tokens,
               temperature, top_p, top_k)
    ctx = SimpleNamespace(cfg=cfg)
    sentences = P.load_sentences()
    out = []
    for g in groups(task_b.plan(ctx)):  # type: ignore[arg-type]
        sentence = sentences[g[0].param("sentence")]
        convs, _, answer = task_b._convs(ctx, g[0], sentence)  # type: ignore[arg-type]
        for c in convs:  # the leak check a direct run makes (MC lists the target among its options)
            P.check_no_leak(c, g[0].word, allow_in=("user",) if answer else ())
        out.append(sample_of(cfg, g, convs, {"mc_answer": answer} if answer else {}))
    return _task("thoughts_vs_text", cfg, out)


@task
def prefill_intent(layer: int | list[int] | None = None, alpha: float | list[float] = 4.0, alpha_units: str = "raw",
                   n_concepts: int = 5, n_trials: int = 1, variant: str | None = None, samples: int = 1,
                   seed: int = 0, words_file: str | None = None, max_tokens: int = 40, temperature: float = 1.0,
                   top_p: float = 1.0, top_k: int = 0) -> Task:
    """Task C as the toolkit plans it (``task_c.plan``): variant ``paper`` by default (``-T
    variant=seed`` or ``all``), per (variant, concept, trial) one sample: the earlier turn says
    the concept; the control, and per (layer, α) cell the concept (``injected``) and the next
    concept (``mismatch``) retro-injected on the sentence (``layer`` not given: the command
    line's default layers for the model, ``tasks.layers_of``), K = ``samples`` answers each."""
    cfg = _cfg(layer, alpha, alpha_units, n_concepts, n_trials, variant, samples, seed, words_file, max_tokens,
               temperature, top_p, top_k)
    sentences = P.load_sentences()
    out = []
    for g in groups(task_c.plan(SimpleNamespace(cfg=cfg))):  # type: ignore[arg-type]
        sentence = sentences[g[0].param("sentence")]
        conv = P.task_c(sentence, g[0].word, form=common.base_variant(g[0]))
        P.check_no_leak(conv, g[0].word, allow_in=("assistant",))
        other = next((t.param("other") for t in g if t.condition == "mismatch"), None)
        out.append(sample_of(cfg, g, [conv], {"other": other}))
    return _task("prefill_intent", cfg, out)
