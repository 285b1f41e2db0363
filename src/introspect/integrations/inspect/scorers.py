"""Scorers that grade every choice of an ``introspect`` output with the toolkit's graders."""

from __future__ import annotations

from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import TaskState

from introspect.grading import coherence, cut_at_next_turn, grade_bias_answer, grade_task_A
from introspect.integrations.inspect.provider import METADATA_KEY


@scorer(metrics=[mean()])
def detection():
    """Task A's grader (``grading.grade_task_A``: strict INJECTION / NO_INJECTION format, else
    the free-form rule) on every choice, with the choice's concept and whether a real vector was
    added (a zero injection is not one), graded as task A grades it: ``identified`` (names the
    concept), under another concept's direction ``names_vector_word``, and with the sample's
    ``mismatch_word`` (metadata) ``identified_mismatch``. A sample with ``bias`` metadata (a bias
    question and its right answer) is graded by content instead (``grade_bias_answer`` and
    coherence on the answer cut at a made-up next turn; the value: the share answered right). The value is the share of choices whose report is right
    (detected exactly when injected); each choice's grade dict is in ``metadata["choices"]``,
    which ``records_from_log`` turns into the records' grades."""

    async def score(state: TaskState, target: Target) -> Score:
        meta = (state.output.metadata or {}).get(METADATA_KEY)
        if not meta:
            return Score(value=0.0, explanation="no introspect output to grade")
        mismatch = (state.metadata or {}).get("mismatch_word")
        bias = (state.metadata or {}).get("bias")
        grades = []
        for row, choice in zip(meta["choices"], state.output.choices):
            real = row["direction"] not in ("none", "zero")
            text = choice.message.text
            if bias:  # an unrelated yes/no question: graded by content, as task A grades it
                cut = cut_at_next_turn(text)
                grades.append({**grade_bias_answer(cut, bias["correct"]), "coherent": coherence(cut).coherent})
                continue
            g = grade_task_A(text, row.get("concept"), real)
            g["identified"] = bool(g.get("matched"))
            if row["direction"] == "other_concept" and row.get("vector_concept"):
                g["names_vector_word"] = bool(grade_task_A(text, row["vector_concept"], True).get("matched"))
            if mismatch and row.get("concept"):
                g["identified_mismatch"] = bool(grade_task_A(text, mismatch, True).get("matched"))
            grades.append({**g, "right": bool(g["detected"]) == real})
        if bias:
            right = [g["wrong"] is False for g in grades]
            return Score(value=sum(right) / len(right), metadata={"choices": grades})
        value = sum(g["right"] for g in grades) / len(grades)
        return Score(value=value, metadata={"choices": grades})

    return score
