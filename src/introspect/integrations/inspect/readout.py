"""A request's scalar readout: one uninjected forward pass, floats back (task D's cosines).

``{"readout": {"kind": "concept_cosine", "concept": w, "positions": {"text": s}, "control_words":
[...]}}`` (``request.py``): the residual after every layer (``hook_resid_post``) over the
positions, and per layer the mean cosine with ``w``'s concept vector, on raw residuals and on
residuals centred by the baseline prompts' mean, and the same against each control word's
vector (their mean, sd and each word's), with ``tasks.injection.task_d.cosine_grade``, as task D computes
them (the same vector bank, the same operations), so a task D trial read here equals a direct
run's. The output has one empty choice; the grade goes to ``metadata["introspect"]["readout"]``.
"""

from __future__ import annotations

from typing import Any

import torch
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ModelOutput,
    ModelUsage,
)

from introspect.engine.load.models import model_info
from introspect.engine.vectors import residuals
from introspect.integrations.inspect.messages import METADATA_KEY, rendered, versions
from introspect.integrations.inspect.request import Request, RequestError
from introspect.tasks.injection.task_d import cosine_grade


def require_vectors(bank: Any, words: list[str], layers: list[int], what: str) -> None:
    """Refuse, in one line naming what is missing and what the file holds, a request that needs a
    (concept, layer) the provider's vectors file (``-M vectors``, ``bank.supplied``) lacks:
    checked before the request decodes or reads anything. Built vectors: nothing to check."""
    vs = getattr(bank, "supplied", None)
    if vs is None:
        return
    gone = vs.gone(words, layers)
    if gone:
        need = " ".join(str(la) for la in sorted({la for _, la in gone}))
        raise RequestError(f"{what}: " + vs.missing(
            words, layers, source=f"-M vectors={vs.path}", hint="ask for those, or export this model's vectors "
            f"there (introspect vectors --layers {need} --export FILE)"))


def concept_cosines(vectors: Any, acts: torch.Tensor, word: str, controls: list[str],
                    layers: list[int]) -> dict[str, Any]:
    """Task D's grade of one prompt: ``acts`` [layers, tokens, d] against ``word``'s vectors
    and the control words' (``task_d.execute``'s arithmetic)."""
    ctrl = torch.stack([torch.stack([vectors.get(w, la).vector for la in layers]) for w in controls])  # c l d
    v = torch.stack([vectors.get(word, la).vector for la in layers])  # l d
    return cosine_grade(acts, v, ctrl, vectors.baseline_mean(layers), layers)


def run_readout(model: Any, messages: list[ChatMessage], request: Request, *, bank: Any, batch_size: int = 16,
                model_name: str = "introspect", ident: dict[str, Any] | None = None) -> ModelOutput:
    """One readout request: render the prompt (a trailing assistant message is the teacher-forced
    prefill), read the residuals over the positions, return the grade as floats. ``bank``: the
    provider's vector bank for this model (``engine.vectors.VectorBank``); ``ident``: the
    metadata's model id, fingerprint and vectors provenance (``provider.identity``; default the
    model's own id and fingerprint)."""
    ro = request.readout or {}
    pos = ro["positions"]
    marks = {"text": pos["text"]} if isinstance(pos, dict) else {}
    prompt = rendered(model.tokenizer, messages, marks, "readout positions")
    span = prompt.positions("text") if marks else [int(i) for i in pos]
    if not span or max(span) >= len(prompt):
        raise RequestError(f"readout positions {span} are not inside the {len(prompt)}-token prompt")
    n = model.cfg.n_layers
    layers = list(range(n)) if ro["layers"] == "all" else [int(la) for la in ro["layers"]]
    if any(not 0 <= la < n for la in layers):
        raise RequestError(f"readout layers {layers} out of range; this model has layers 0..{n - 1}")
    if not ro["control_words"]:
        raise RequestError("a concept_cosine readout needs control_words (the unrelated concepts' band)")
    require_vectors(bank, [ro["concept"], *ro["control_words"]], layers, "readout")
    bank.ensure([ro["concept"], *ro["control_words"]], layers)  # one batch, not a word at a time
    acts = residuals(model, [prompt], layers, positions=[span], batch_size=batch_size)[0]
    grade = concept_cosines(bank, acts, ro["concept"], ro["control_words"], layers)
    info = model_info(model)
    who = ident if ident is not None else {"model_id": info.name, "fingerprint": info.fingerprint}
    meta = {**who, "versions": versions(),
            "stream_key": request.stream_key, "prompt": prompt.text, "prompt_tokens": len(prompt),
            "request": request.raw, "trial": request.trial, "choices": [],
            "readout": {**ro, "positions": span, "grade": grade}}
    return ModelOutput(model=model_name, metadata={METADATA_KEY: meta},
                       choices=[ChatCompletionChoice(message=ChatMessageAssistant(content="", model=model_name,
                                                                                  source="generate"),
                                                     stop_reason="stop")],
                       usage=ModelUsage(input_tokens=len(prompt), output_tokens=0, total_tokens=len(prompt)))
