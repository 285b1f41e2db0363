"""Damage gates: does the trained adapter leave the model's ordinary behaviour intact?

Why gates and not just a loss: a positive control that answers every prompt with a detection
report, or forgets how to answer "Is two plus two four?" once a concept is pushed into it, would
score well on task A's detection question and tell us nothing. An adapter may be called a positive
control only if every gate passes (``all_passed``; a gate not measured is not passed). Four gates,
all on prompts no training row showed (held-out replay questions in all their shapes; held-out
yes/no questions and task A's own bias questions):

* ``replay_kl`` and ``replay_top1``, against a yardstick (``BAR``, the base model's weights
  re-quantized to 6 bits, ``train.yardsticks``): teacher-forced on the base model's held-out replay
  answers, the adapter's mean per-token KL(base ‖ adapted) must be no larger than the yardstick's,
  and the share of positions where both models' top token agrees no lower. Why this bar: greedy
  identity of 40-token answers (the gate until issue 72, ``replay_identical`` ≥ 0.80) fails the
  unchanged base model computed in bf16 or read from a Q8_0 file; the owner chose "no more change
  to ordinary text than a 6-bit copy of the same model". Readings beside them: greedy identity
  (``replay_identical``), the base model decoded again (how identical greedy answers can be here),
  a random weight change of the adapter's size (``random_twin``; one or several, ``twins``: how
  much any change that large moves them, learned or not), other yardsticks (bf16, Q8_0), and
  where greedy answers part, the median first differing token;
* ``detection_phrases`` ≤ 0.02: answers to prompts that ask nothing about thoughts (held-out
  replay, clean yes/no questions) that report on injected thoughts, claiming one or denying one
  ("No, I don't detect an injected thought." to "How many players are on a football team?" is
  damage too); the base model's rate on the same prompts beside it;
* ``content_kept`` ≥ 0.90: of the unrelated yes/no questions (held-out and task A's bias
  questions, in the trained framings) that the base model answers *right* without injection, the
  share the adapter still answers right under a training concept's injection (the training vectors
  in turn, at the middle of the trained strengths; ``right_share``: a wrong yes or no, a detection
  report or no answer counts against). Why of the base model's right answers: on a 135M model the
  base model answers only about half of these one-fact questions right at all, so a bar on every
  question asks more than the model knows; a bar relative to the base model *under injection*
  (0.08–0.14 there) would pass an adapter that says yes to everything. Kept-right does neither: a
  yes-to-everything adapter keeps only the known questions whose answer is yes, about half, and
  fails. Not measured (so not passed) below ``KNOWN_MIN`` known questions. Beside it as readings:
  the adapter's right answers over every question (``content_answers``), the base model's under
  the same injection and without one, and the base model's kept share under the same injection
  (``content_kept_base``: what the injection alone does).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from introspect.engine.run.inject import InjectionSpec
from introspect.grading.bias import grade_bias_answer, reports_on_thoughts
from introspect.tasks.prompts import load_bias_items
from introspect.train import data as D
from introspect.train import replay as R
from introspect.train import yardsticks as Y

if TYPE_CHECKING:
    from introspect.train.config import TrainConfig
    from introspect.train.plan import Plan

BAR = "q6"  # the yardstick the replay gates compare with (``train.yardsticks.YARDSTICKS``), always measured
# gate: (op, bound); a bound that is a yardstick's name means that yardstick's same figure, measured beside
GATES: dict[str, tuple[str, float | str]] = {
    "replay_kl": ("<=", BAR), "replay_top1": (">=", BAR),
    "detection_phrases": ("<=", 0.02), "content_kept": (">=", 0.90)}
KNOWN_MIN = 10  # questions the base model answers right clean, below which content_kept is not measured
CONTENT_TOKENS = 24
EXAMPLES = 5  # answers the detection-phrase gate caught, kept in the summary to be read


@contextmanager
def adapter_off(model: Any) -> Iterator[None]:
    """The base model, for as long as the block runs: every attached LoRA map switched off."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.original_model.modules() if isinstance(m, BaseTunerLayer)]
    flags = [m.disable_adapters for m in layers]
    for m in layers:
        m._disable_adapters = True
    try:
        yield
    finally:
        for m, f in zip(layers, flags):
            m._disable_adapters = f


@contextmanager
def random_twin(model: Any, seed: int = 0) -> Iterator[None]:
    """The attached adapter's weights swapped, for as long as the block runs, for random ones of the
    same size: in every LoRA map, random A and B whose product has the trained B·A's Frobenius
    norm (same rank, same scale). The matched control of the replay readings: how far any weight
    change of this size moves ordinary text (KL, top token, greedy identity), learned or not."""
    from peft.tuners.lora import LoraLayer

    g = torch.Generator().manual_seed(seed)
    saved = []
    with torch.no_grad():
        for m in model.original_model.modules():
            if not isinstance(m, LoraLayer):
                continue
            for name in m.lora_A:
                a, b = m.lora_A[name].weight, m.lora_B[name].weight
                saved.append((a, b, a.detach().clone(), b.detach().clone()))
                ra = torch.randn(a.shape, generator=g).to(a)
                rb = torch.randn(b.shape, generator=g).to(b)
                norm = (b.float() @ a.float()).norm() / (rb.float() @ ra.float()).norm().clamp_min(1e-12)
                a.copy_(ra)
                b.copy_(rb * norm.to(b.dtype))
    try:
        yield
    finally:
        with torch.no_grad():
            for a, b, a0, b0 in saved:
                a.copy_(a0)
                b.copy_(b0)


def _base_logprobs(model: Any, prompt_ids: list[int], answer: list[int]) -> torch.Tensor:
    """The base model's (adapter off) next-token log-probs at each position of ``answer``,
    teacher-forced after ``prompt_ids``: ``[len(answer), vocab]``, computed once and compared
    with the adapter and each random twin."""
    ids = torch.tensor([[*prompt_ids, *answer]], device=model.cfg.device)
    with torch.no_grad(), adapter_off(model):
        return torch.log_softmax(model.original_model(input_ids=ids).logits[0, -len(answer) - 1:-1].float(), -1)


def _teacher_forced(model: Any, prompt_ids: list[int], answer: list[int],
                    base: torch.Tensor | None = None) -> tuple[float, float]:
    """Teacher-forced on the base model's answer: the mean per-token KL(base ‖ adapted) of the
    next-token distributions, and the share of the answer's positions where both models' top
    token is the same: the two replay gates. The second is greedy identity without its cascade:
    one early flipped token fails a whole greedy answer, here it costs one position. ``base``: the base
    model's log-probs from ``_base_logprobs`` (computed here when not given)."""
    ids = torch.tensor([[*prompt_ids, *answer]], device=model.cfg.device)
    n = len(answer)
    if base is None:
        base = _base_logprobs(model, prompt_ids, answer)
    with torch.no_grad():
        adapted = torch.log_softmax(model.original_model(input_ids=ids).logits[0, -n - 1:-1].float(), -1)
    kl = float((base.exp() * (base - adapted)).sum(-1).mean())
    return kl, float((base.argmax(-1) == adapted.argmax(-1)).float().mean())


def _means(pairs: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    """The mean of each column of ``_teacher_forced``'s pairs (None, None for no pairs)."""
    return (sum(p[0] for p in pairs) / len(pairs), sum(p[1] for p in pairs) / len(pairs)) if pairs else (None, None)


def first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Index of the first token where two answers differ (the shorter one's length if one is a
    prefix of the other); ``len(a)`` when they are identical."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _passes(name: str, value: float | None, bound: float | None) -> bool | None:
    """``value`` against ``bound`` in gate ``name``'s direction; None (not measured) if either is."""
    if value is None or bound is None:
        return None
    return value >= bound if GATES[name][0] == ">=" else value <= bound


def judge(figures: dict[str, Any]) -> dict[str, Any]:
    """The gates applied to measured ``figures`` (``damage_gates``' keys: each gate's figure and
    ``replay_yardsticks``): ``bounds`` (a yardstick's figure where the bound is one, None if it was
    not measured), ``gates`` (each bound in words), ``passed`` (True, False, or None: not measured)
    and ``all_passed``, which only a pass on every gate makes True."""
    sticks = {y["name"]: y for y in figures.get("replay_yardsticks") or ()}
    bounds: dict[str, float | None] = {}
    words = {}
    for k, (op, b) in GATES.items():
        if isinstance(b, str):  # "replay_kl" against the yardstick's "kl"
            bounds[k] = sticks.get(b, {}).get(k.removeprefix("replay_"))
            words[k] = f"{op} " + (f"{bounds[k]:.3g}" if bounds[k] is not None else "n/a") + f", the {b} yardstick's"
        else:
            bounds[k], words[k] = b, f"{op} {b:g}"
    passed = {k: _passes(k, figures.get(k), bounds[k]) for k in GATES}
    return {"bounds": bounds, "gates": words, "passed": passed, "all_passed": all(v is True for v in passed.values())}


def right_answers(texts: Sequence[str], items: Sequence[tuple[str, str]]) -> list[bool]:
    """Whether each of ``texts`` answers its question (``items``: question, right answer) right:
    ``grade_bias_answer``'s "correct" only. A wrong yes or no, a detection report or no answer are
    all not right."""
    return [grade_bias_answer(t, right)["bias_answer"] == "correct" for t, (_, right) in zip(texts, items)]


def right_share(texts: Sequence[str], items: Sequence[tuple[str, str]]) -> float | None:
    """Share of ``texts`` answered right (``right_answers``; None for no texts)."""
    right = right_answers(texts, items)
    return sum(right) / len(right) if right else None


def kept_share(texts: Sequence[str], known: Sequence[bool], items: Sequence[tuple[str, str]]) -> float | None:
    """Of the questions ``known`` marks (the base model's right answers without injection), the
    share ``texts`` answers right; None below ``KNOWN_MIN`` of them (too few to judge)."""
    right = right_answers(texts, items)
    kept = [r for r, k in zip(right, known) if k]
    return sum(kept) / len(kept) if len(kept) >= KNOWN_MIN else None


def positive_control(g: dict[str, Any]) -> tuple[bool, list[str], list[str]]:
    """Whether measured gates ``g`` let the adapter be called a positive control (every gate
    passed), the gates that failed and those not measured."""
    passed = g.get("passed") or {}
    failed = [k for k, v in passed.items() if v is False]
    missing = [k for k, v in passed.items() if v is None]
    return bool(passed) and not failed and not missing and g.get("all_passed") is True, failed, missing


def _reporting_share(texts: list[str]) -> float | None:
    """Share of the texts that report on injected thoughts (claims or denials); None for none."""
    return sum(map(reports_on_thoughts, texts)) / len(texts) if texts else None


def twin_seed(cfg_seed: int, k: int) -> int:
    """The ``k``-th random twin's seed: the first is the training seed (as before there were
    several), the others a thousand apart, so adapters trained on nearby seeds share no twin."""
    return cfg_seed + 1000 * k


def check_twins(twins: Any) -> int:
    """``twins`` if it is a count of random twins (an integer >= 1), else a one-line ValueError."""
    if isinstance(twins, bool) or not isinstance(twins, int) or twins < 1:
        raise ValueError(f"twins={twins!r}: want an integer >= 1 (how many random twins to measure)")
    return twins


def damage_gates(model: Any, plan: Plan, cfg: TrainConfig, twins: int = 1,
                 yardsticks: Sequence[str] = ()) -> dict[str, Any]:
    """Measure the four gates on the trained (attached) adapter; figures, n and pass/fail
    (``judge``). ``twins``: how many random weight changes of the adapter's size to measure beside
    it (the ``*_random`` readings are the first one's; ``replay_random_twins`` lists each one's).
    ``yardsticks``: names from ``train.yardsticks.YARDSTICKS``, the base model changed as its users
    call the same model, measured like the adapter (``replay_yardsticks``; about 45 s each on the
    default model); ``BAR``, the replay gates' bound, is measured first whether named or not."""
    check_twins(twins)
    yardsticks = (BAR, *(n for n in Y.check_names(yardsticks) if n != BAR))
    from introspect.engine.run.decode import generate

    tok = model.tokenizer
    eos = tok.eos_token_id
    out: dict[str, Any] = {}
    # 1. held-out replay: KL and top token teacher-forced (the gates), identical greedy answers
    held = plan.replay_heldout
    prompts = [D.render(tok, r.conversation()) for r in held]
    gens = generate(model, prompts, max_new_tokens=cfg.replay_tokens) if held else []
    forced = [(list(p.ids), list(r.ids)) for r, p in zip(held, prompts)]
    bases = [_base_logprobs(model, *f) for f in forced]  # once, for the adapter and every twin

    def identical(answers: list[Any]) -> float | None:  # share of greedy answers equal to the base model's
        return sum(R.answer_ids(g, eos) == r.ids for r, g in zip(held, answers)) / len(held) if held else None

    def teacher_forced() -> tuple[float | None, float | None]:  # mean KL and top-1 of the weights now attached
        return _means([_teacher_forced(model, *f, base=b) for f, b in zip(forced, bases)])

    replies = [g.text for g in gens]
    parts = [first_difference(ids, r.ids) for r, g in zip(held, gens) if (ids := R.answer_ids(g, eos)) != r.ids]
    out["replay_kl"], out["replay_top1"] = teacher_forced()
    with adapter_off(model):  # the floor: the base model itself, decoded again in this batch
        again = generate(model, prompts, max_new_tokens=cfg.replay_tokens) if held else []
    each = []
    for seed in (twin_seed(cfg.seed, k) for k in range(twins)):  # the matched control: random changes of its size
        with random_twin(model, seed):
            twin = generate(model, prompts, max_new_tokens=cfg.replay_tokens) if held else []
            kl, top1 = teacher_forced()
        each.append({"seed": seed, "identical": identical(twin), "kl": kl, "top1": top1})
    sticks = []
    for name in yardsticks:  # the base model itself, changed in a way its users accept
        what, change = Y.YARDSTICKS[name]
        with adapter_off(model), change(model):
            same = generate(model, prompts, max_new_tokens=cfg.replay_tokens) if held else []
            kl, top1 = teacher_forced()
        sticks.append({"name": name, "what": what, "identical": identical(same), "kl": kl, "top1": top1})
    bases.clear()  # up to ~0.44 GB of log-probs, not needed past here
    out["replay_n"] = len(held)
    out["replay_identical"] = identical(gens)
    out["replay_identical_base"] = identical(again)
    out["replay_identical_random"] = each[0]["identical"]
    out["replay_kl_random"], out["replay_top1_random"] = each[0]["kl"], each[0]["top1"]
    out["replay_random_twins"] = each
    out["replay_yardsticks"] = sticks
    out["replay_first_difference_median"] = float(statistics.median(parts)) if parts else None
    # 2. detection phrases where nothing asks about thoughts: held-out replay and clean yes/no questions
    items = [*plan.gate_questions, *load_bias_items()]
    convs = [D.detection_conv(cfg.phrasings[i % len(cfg.phrasings)], 1, question=q) for i, (q, _) in enumerate(items)]
    cprompts = [D.render(tok, c) for c in convs]
    clean = generate(model, cprompts, max_new_tokens=CONTENT_TOKENS) if items else []
    texts = [*replies, *(g.text for g in clean)]
    caught = [t for t in texts if reports_on_thoughts(t)]
    out["detection_phrases_n"] = len(texts)
    out["detection_phrases"] = len(caught) / len(texts) if texts else None
    out["detection_phrases_examples"] = caught[:EXAMPLES]  # what the gate caught
    with adapter_off(model):
        clean_base = generate(model, cprompts, max_new_tokens=CONTENT_TOKENS) if items else []
    base_texts = [*(tok.decode([t for t in r.ids if t != eos], skip_special_tokens=True) for r in held),
                  *(g.text for g in clean_base)]
    out["detection_phrases_base"] = _reporting_share(base_texts)
    # 3. injected: answered on content (adapter, and the base model beside it)
    mid = sum(cfg.strength) / 2
    specs = [InjectionSpec(cfg.layer, mid * plan.resid[cfg.phrasings[i % len(cfg.phrasings)]],
                           plan.vectors[plan.train[i % len(plan.train)]], D.injected_positions(p))
             for i, p in enumerate(cprompts)]

    def on_content(gs: list[Any]) -> float | None:
        return right_share([g.text for g in gs], items)

    inj = generate(model, cprompts, specs, max_new_tokens=CONTENT_TOKENS) if items else []
    with adapter_off(model):
        base = generate(model, cprompts, specs, max_new_tokens=CONTENT_TOKENS) if items else []
    known = right_answers([g.text for g in clean_base], items)
    out["content_n"] = len(items)
    out["content_known"] = sum(known)  # questions the base model answers right without injection
    out["content_kept"] = kept_share([g.text for g in inj], known, items)
    out["content_kept_base"] = kept_share([g.text for g in base], known, items)
    out["content_answers"] = on_content(inj)
    out["content_answers_base"] = on_content(base)
    out["content_answers_clean_base"] = on_content(clean_base)  # what the base model knows, no injection
    out["content_reports_detection"] = _reporting_share([g.text for g in inj])
    out["content_strength"] = mid
    return {**out, **judge(out)}
