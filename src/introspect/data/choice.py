"""Question sets (MMLU, hendrycks MMLU, GPQA, SimpleQA): multiple-choice and short-answer items, each checked against its layout."""

from __future__ import annotations

import ast
import csv
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from introspect.data.files import LETTERS, DataError, csv_rows, read_text

GPQA_URL = "https://github.com/idavidrein/gpqa (dataset.zip, password in its README)"
SIMPLEQA_URL = "https://openaipublic.blob.core.windows.net/simple-evals/simple_qa_test_set.csv"


@dataclass(frozen=True)
class MCQuestion:
    """A multiple-choice question; ``answer`` is the letter of the right option."""

    id: str
    question: str
    options: tuple[str, ...]
    answer: str
    topic: str = ""
    difficulty: str = ""  # human-rated difficulty where the data has it (GPQA's writer estimate)

    @property
    def answer_text(self) -> str:
        return self.options[LETTERS.index(self.answer)]

    def rotated(self, r: int) -> MCQuestion:
        """The same question with its options cyclically shifted by ``r`` letters (option i
        moves to letter (i + r) mod n, the key with it); ``rotated(0)`` is the question itself."""
        n = len(self.options)
        r %= n
        opts = tuple(self.options[(i - r) % n] for i in range(n))
        return MCQuestion(self.id, self.question, opts, LETTERS[(LETTERS.index(self.answer) + r) % n],
                          self.topic, self.difficulty)

    def format(self) -> str:
        """Stem and lettered options, one per line (the layout every prompt uses)."""
        opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(self.options))
        return f"{self.question}\n{opts}"


@dataclass(frozen=True)
class ShortQuestion:
    """A short-answer question (SimpleQA, or arithmetic asked without options)."""

    id: str
    question: str
    answer: str
    topic: str = ""
    answer_type: str = ""


_MMLU_FMT = ('MMLU JSONL: one object per line with "topic", "question" (options inline as '
             '"\\nA. ...\\nB. ...") and "answer" (a letter)')
_INLINE_OPT = re.compile(r"^\s*([A-H])[.)]\s+(.*)$")


def split_inline_options(text: str) -> tuple[str, tuple[str, ...]] | None:
    """("stem", options) from a question whose last lines are "A. ..", "B. ..", ("Answer:")."""
    lines = text.rstrip().splitlines()
    if lines and lines[-1].strip().lower().rstrip(":") == "answer":
        lines = lines[:-1]
    opts: list[tuple[str, str]] = []
    while lines and (m := _INLINE_OPT.match(lines[-1])):
        opts.insert(0, (m.group(1), m.group(2).strip()))
        lines.pop()
        if m.group(1) == "A":
            break
    letters = "".join(k for k, _ in opts)
    if len(opts) < 2 or letters != LETTERS[:len(opts)] or not lines:
        return None
    return "\n".join(lines).strip(), tuple(o for _, o in opts)


def load_mmlu_jsonl(path: Path | str) -> list[MCQuestion]:
    """MMLU items in the openai/evals ``sandbagging`` layout (choices inline in the question)."""
    p, text = read_text(path, _MMLU_FMT)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{p}:{n}: not valid JSON; expected {_MMLU_FMT}") from e
        if not isinstance(obj, dict) or not {"question", "answer"} <= obj.keys():
            raise DataError(f"{p}:{n}: lacks question/answer; expected {_MMLU_FMT}")
        split = split_inline_options(str(obj["question"]))
        ans = str(obj["answer"]).strip().upper()
        if split is None or ans not in LETTERS[:len(split[1])]:
            raise DataError(f"{p}:{n}: options or answer letter unreadable; expected {_MMLU_FMT}")
        out.append(MCQuestion(f"{p.stem}-{n}", split[0], split[1], ans, str(obj.get("topic", ""))))
    return out


_HEND_FMT = "hendrycks MMLU CSV without header: question,A,B,C,D,answer (answer a letter A-D)"


def load_hendrycks_csv(path: Path | str) -> list[MCQuestion]:
    """One subject file of the original MMLU release (``data/test/<subject>_test.csv``)."""
    p, text = read_text(path, _HEND_FMT)
    topic = re.sub(r"_(test|dev|val)$", "", p.stem).replace("_", " ")
    out = []
    for n, row in enumerate(csv.reader(text.splitlines()), 1):
        if not row:
            continue
        if len(row) != 6 or row[5].strip().upper() not in ("A", "B", "C", "D"):
            raise DataError(f"{p}:{n}: {len(row)} fields / answer {row[-1]!r:.10}; expected {_HEND_FMT}")
        out.append(MCQuestion(f"{p.stem}-{n}", row[0].strip(), tuple(c.strip() for c in row[1:5]),
                              row[5].strip().upper(), topic))
    if not out:
        raise DataError(f"{p}: no rows; expected {_HEND_FMT}")
    return out


_GPQA_COLS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
              "Incorrect Answer 3")
_GPQA_FMT = f"GPQA CSV with columns {', '.join(_GPQA_COLS)} (get gpqa_main.csv from {GPQA_URL})"


def load_gpqa_csv(path: Path | str, seed: int = 0) -> list[MCQuestion]:
    """GPQA (Rein et al. 2024) rows as 4-option questions; never shipped (gated data).

    The release stores the right answer in its own column, so option order is shuffled here,
    deterministically from ``seed`` and the record id, so the letter carries no signal.
    """
    p, rows = csv_rows(path, _GPQA_FMT, _GPQA_COLS)
    out = []
    for n, r in enumerate(rows, 1):
        rid = (r.get("Record ID") or f"{p.stem}-{n}").strip()
        opts = [(r[c] or "").strip() for c in _GPQA_COLS[1:]]
        rng = random.Random(f"{seed}:{rid}")
        order = list(range(4))
        rng.shuffle(order)
        out.append(MCQuestion(rid, (r["Question"] or "").strip(), tuple(opts[i] for i in order),
                              LETTERS[order.index(0)], (r.get("High-level domain") or "").strip(),
                              (r.get("Writer's Difficulty Estimate") or "").strip()))
    return out


_SQA_FMT = f"SimpleQA CSV with columns metadata,problem,answer (get it from {SIMPLEQA_URL})"


def load_simpleqa_csv(path: Path | str) -> list[ShortQuestion]:
    """SimpleQA (Wei et al. 2024) short-answer questions; topic/answer type from ``metadata``.
    An optional ``id`` column keeps items' own ids (a file written by ``introspect.train.selfknow``:
    held-out items keep the ids their truth was recorded under)."""
    p, rows = csv_rows(path, _SQA_FMT, ("metadata", "problem", "answer"))
    out = []
    for n, r in enumerate(rows, 1):
        try:
            meta = ast.literal_eval(r["metadata"]) if (r["metadata"] or "").strip() else {}
        except (ValueError, SyntaxError):
            meta = {}
        meta = meta if isinstance(meta, dict) else {}
        out.append(ShortQuestion((r.get("id") or "").strip() or f"simpleqa-{n}", (r["problem"] or "").strip(),
                                 (r["answer"] or "").strip(), str(meta.get("topic", "")),
                                 str(meta.get("answer_type", ""))))
    return out


def load_questions(path: Path | str, seed: int = 0) -> list[MCQuestion] | list[ShortQuestion]:
    """Any supported question file by its layout: .jsonl (MMLU), or a CSV sniffed by header."""
    p = Path(path)
    if p.suffix == ".jsonl":
        return load_mmlu_jsonl(p)
    if p.suffix != ".csv":
        raise DataError(f"{p}: unknown question file type; expected .jsonl (MMLU) or .csv "
                        "(hendrycks, GPQA, SimpleQA)")
    _, text = read_text(p, "a question CSV (hendrycks, GPQA or SimpleQA)")
    header = next(csv.reader(text.splitlines()), [])
    if "Correct Answer" in header:
        return load_gpqa_csv(p, seed)
    if {"problem", "answer"} <= set(header):
        return load_simpleqa_csv(p)
    return load_hendrycks_csv(p)
