"""Task D (intentional control of internal states) as an Inspect eval: no generation, a readout.

``internal_control`` plans what ``tasks.injection.task_d.plan`` plans (variants ``plain``: think
vs don't think, and ``incentive``: rewarded vs punished; per concept and trial one sentence):
one Inspect sample per toolkit trial, its prompt the toolkit's (the sentence teacher-forced as
the assistant's prefill), its request a ``readout`` (``request.py``): the provider reads the
residual after every layer over the prefilled sentence's tokens and returns, per layer, the mean
cosine with the concept's vector (raw and centred) and with the unrelated control words' vectors
(task D's ``_control_words``: target words not among the run's concepts), floats only. The
records (``records_bcd``) are the toolkit's task D records, so ``summarize`` runs
``summarize_d`` on them (Δcos per layer, the control band, the peak). Epochs add nothing (the
activations are teacher-forced): only epoch 1 makes records.
"""

from __future__ import annotations

from types import SimpleNamespace

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import TaskState

from introspect.integrations.inspect.provider import METADATA_KEY
from introspect.integrations.inspect.tasks_bc import INJ_KEY, ask_parts, config_for, messages_of
from introspect.tasks import prompts as P
from introspect.tasks.injection import task_d


@scorer(metrics=[mean()])
def concept_specific_cosine():
    """The readout's mean over layers of the centred cosine with the concept minus the control
    words' mean (a progress figure: its sign should follow think / don't think); the per-layer
    grade is in the metadata (``choices``)."""

    async def score(state: TaskState, target: Target) -> Score:
        ro = ((state.output.metadata or {}).get(METADATA_KEY) or {}).get("readout")
        if not ro:
            return Score(value=0.0, explanation="no readout")
        g = ro["grade"]
        diff = [a - b for a, b in zip(g["cos_centred"], g["cos_ctrl_centred"])]
        return Score(value=sum(diff) / len(diff), metadata={"choices": [g]})

    return score


@task
def internal_control(n_concepts: int = 5, n_trials: int = 1, variant: str | None = None, seed: int = 0,
                     words_file: str | None = None, n_control_words: int = 20) -> Task:
    """Task D as the toolkit plans it: both variants by default (``-T variant=plain`` or
    ``incentive``), one sample per (variant, concept, trial, condition), each a readout of the
    teacher-forced sentence at every layer against the concept and ``n_control_words``
    unrelated concepts."""
    cfg = config_for(n_concepts=n_concepts, n_trials=n_trials, seed=seed, words_file=words_file,
                     variant=variant).with_options(n_control_words=n_control_words)
    ctx = SimpleNamespace(cfg=cfg)
    controls = task_d._control_words(ctx)  # type: ignore[arg-type]
    sentences = P.load_sentences()
    out = []
    for t in task_d.plan(ctx):  # type: ignore[arg-type]
        sentence = sentences[t.param("sentence")]
        conv = task_d._conv(t, sentence)
        P.check_no_leak(conv, t.word, allow_in=("user",))
        request = {"readout": {"kind": "concept_cosine", "concept": t.word, "positions": {"text": sentence},
                               "control_words": controls},
                   "stream_key": f"{seed}:D:{t.variant}:{t.word}:{t.index}:{t.condition}",
                   "trial": {"task": "D", "variant": t.variant, "index": t.index, "word": t.word, "seed": seed,
                             "params": dict(t.params)}}
        meta = {"task": "D", "variant": t.variant, "word": t.word, "index": t.index, "condition": t.condition,
                "sentence": sentence, "alpha_units": cfg.alpha_units}
        out.append(Sample(id=f"{t.variant}-{t.word}-{t.index}-{t.condition}", input=sentence, target=t.word or "",
                          metadata={"introspect_parts": [{"messages": messages_of(conv), "request": request}],
                                    INJ_KEY: meta}))
    return Task(dataset=MemoryDataset(out, name="internal_control"), solver=ask_parts(),
                scorer=concept_specific_cosine(), config=GenerateConfig(max_tokens=1, num_choices=1),
                name="internal_control")
