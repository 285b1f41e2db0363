"""Loaders for third-party evaluation data, and generated arithmetic with known answers.

Why here and strict: the self-knowledge tasks read datasets the project never ships (users give
a path), so each loader checks the layout it expects and fails with one line naming the file and
that layout (``DataError``; the CLIs turn it into exit status 2) instead of a KeyError later.
Arithmetic is generated because its answers come from integer maths, not from a label file, and
its difficulty (digits, terms, operators) can be turned up and down.
"""

from __future__ import annotations

import ast
import csv
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from introspect.grading import word_match

LETTERS = "ABCDEFGH"
GPQA_URL = "https://github.com/idavidrein/gpqa (dataset.zip, password in its README)"
SIMPLEQA_URL = "https://openaipublic.blob.core.windows.net/simple-evals/simple_qa_test_set.csv"


class DataError(ValueError):
    """A data file that is missing, empty or not in the expected format (one-line message)."""


@dataclass(frozen=True)
class TabooItem:
    """A target word and words associated with it (BIG-bench taboo / Kovah Taboo-Data)."""

    target: str
    related: tuple[str, ...]


@dataclass(frozen=True)
class SafetyPrompt:
    """One XSTest (or own) request; ``label`` is "safe" or "unsafe"."""

    id: str
    prompt: str
    type: str
    label: str
    focus: str = ""
    note: str = ""


@dataclass(frozen=True)
class MCQuestion:
    """A multiple-choice question; ``answer`` is the letter of the right option."""

    id: str
    question: str
    options: tuple[str, ...]
    answer: str
    topic: str = ""

    @property
    def answer_text(self) -> str:
        return self.options[LETTERS.index(self.answer)]

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


@dataclass(frozen=True)
class ArithmeticQuestion:
    """``question`` like "What is 23 + 58 - 7?" with its integer ``answer`` and difficulty."""

    id: str
    question: str
    expression: str
    answer: int
    digits: int
    terms: int


# ---------------------------------------------------------------- helpers
def _read_text(path: Path | str, expected: str) -> tuple[Path, str]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: file not found; expected {expected}")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{p}: cannot read ({type(e).__name__}); expected {expected}") from e
    if not text.strip():
        raise DataError(f"{p}: file is empty; expected {expected}")
    return p, text


def _read_json(path: Path | str, expected: str) -> tuple[Path, Any]:
    p, text = _read_text(path, expected)
    try:
        return p, json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{p}: not valid JSON (line {e.lineno}); expected {expected}") from e


def _csv_rows(path: Path | str, expected: str, required: Sequence[str]) -> tuple[Path, list[dict]]:
    p, text = _read_text(path, expected)
    reader = csv.DictReader(text.splitlines())
    cols = set(reader.fieldnames or ())
    missing = [c for c in required if c not in cols]
    if missing:
        raise DataError(f"{p}: missing columns {missing}; expected {expected}")
    rows = list(reader)
    if not rows:
        raise DataError(f"{p}: no data rows; expected {expected}")
    return p, rows


def _words(items: Any) -> tuple[str, ...]:
    """Non-empty strings, stripped, first occurrence kept (case-insensitive)."""
    out: dict[str, str] = {}
    for w in items:
        if isinstance(w, str) and w.strip():
            out.setdefault(w.strip().casefold(), w.strip())
    return tuple(out.values())


# ---------------------------------------------------------------- association data
_BB_FMT = 'BIG-bench taboo JSON: {"examples": [{"target": str, "taboos": [str, ...]}, ...]}'


def load_bigbench_taboo(path: Path | str) -> list[TabooItem]:
    """BIG-bench ``taboo`` task JSON (``examples`` of target + taboos; the canary is ignored)."""
    p, data = _read_json(path, _BB_FMT)
    ex = data.get("examples") if isinstance(data, dict) else None
    if not isinstance(ex, list):
        raise DataError(f"{p}: no 'examples' list; expected {_BB_FMT}")
    out = []
    for e in ex:
        if not (isinstance(e, dict) and isinstance(e.get("target"), str)
                and isinstance(e.get("taboos"), list)):
            raise DataError(f"{p}: example {e!r:.60} lacks target/taboos; expected {_BB_FMT}")
        related = tuple(w for w in _words(e["taboos"]) if not word_match(w, e["target"]))
        out.append(TabooItem(e["target"].strip(), related))
    if not out:
        raise DataError(f"{p}: 'examples' is empty; expected {_BB_FMT}")
    return out


_KOVAH_FMT = ('Kovah Taboo-Data category JSON: {"word": ["taboo", ...], ...} '
              'or [{"word": str, "taboo": [str, ...]}, ...]')


def load_kovah_taboo(path: Path | str) -> list[TabooItem]:
    """A Kovah Taboo-Data category file (e.g. ``src/data/en/animals.json``).

    Accepts the repository's shape, an object mapping each target word to its taboo words, and
    a list of objects with a target under ``word`` (or ``target``) and words under ``taboo``
    (or ``taboos`` / ``related``). Empty strings and repeated or self-referencing words are
    dropped; targets left with no related word are skipped.
    """
    p, data = _read_json(path, _KOVAH_FMT)
    pairs: list[tuple[Any, Any]] = []
    if isinstance(data, dict):
        pairs = list(data.items())
    elif isinstance(data, list):
        for e in data:
            if not isinstance(e, dict):
                raise DataError(f"{p}: list entry {e!r:.40} is not an object; expected {_KOVAH_FMT}")
            word = e.get("word", e.get("target"))
            taboo = e.get("taboo", e.get("taboos", e.get("related")))
            pairs.append((word, taboo))
    else:
        raise DataError(f"{p}: top level is {type(data).__name__}; expected {_KOVAH_FMT}")
    out = []
    for word, taboo in pairs:
        if not isinstance(word, str) or not isinstance(taboo, list):
            raise DataError(f"{p}: entry {word!r:.40} has no word list; expected {_KOVAH_FMT}")
        related = tuple(w for w in _words(taboo) if not word_match(w, word))
        if word.strip() and related:
            out.append(TabooItem(word.strip(), related))
    if not out:
        raise DataError(f"{p}: no target words; expected {_KOVAH_FMT}")
    return out


# ---------------------------------------------------------------- restriction data
_XS_FMT = "XSTest CSV with columns id,prompt,type,label[,focus,note] (label safe|unsafe)"


def load_xstest(path: Path | str) -> list[SafetyPrompt]:
    """XSTest v2 prompts (Röttger et al. 2024): 250 safe and 200 unsafe requests."""
    p, rows = _csv_rows(path, _XS_FMT, ("id", "prompt", "type", "label"))
    out = []
    for r in rows:
        label = (r["label"] or "").strip().lower()
        if label not in ("safe", "unsafe") or not (r["prompt"] or "").strip():
            raise DataError(f"{p}: row id={r['id']!r} has label {label!r} or no prompt; "
                            f"expected {_XS_FMT}")
        out.append(SafetyPrompt(str(r["id"]).strip(), r["prompt"].strip(), (r["type"] or "").strip(),
                                label, (r.get("focus") or "").strip(), (r.get("note") or "").strip()))
    return out


# ---------------------------------------------------------------- multiple choice
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
    p, text = _read_text(path, _MMLU_FMT)
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
    p, text = _read_text(path, _HEND_FMT)
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
    p, rows = _csv_rows(path, _GPQA_FMT, _GPQA_COLS)
    out = []
    for n, r in enumerate(rows, 1):
        rid = (r.get("Record ID") or f"{p.stem}-{n}").strip()
        opts = [(r[c] or "").strip() for c in _GPQA_COLS[1:]]
        rng = random.Random(f"{seed}:{rid}")
        order = list(range(4))
        rng.shuffle(order)
        out.append(MCQuestion(rid, (r["Question"] or "").strip(), tuple(opts[i] for i in order),
                              LETTERS[order.index(0)], (r.get("High-level domain") or "").strip()))
    return out


_SQA_FMT = f"SimpleQA CSV with columns metadata,problem,answer (get it from {SIMPLEQA_URL})"


def load_simpleqa_csv(path: Path | str) -> list[ShortQuestion]:
    """SimpleQA (Wei et al. 2024) short-answer questions; topic/answer type from ``metadata``."""
    p, rows = _csv_rows(path, _SQA_FMT, ("metadata", "problem", "answer"))
    out = []
    for n, r in enumerate(rows, 1):
        try:
            meta = ast.literal_eval(r["metadata"]) if (r["metadata"] or "").strip() else {}
        except (ValueError, SyntaxError):
            meta = {}
        meta = meta if isinstance(meta, dict) else {}
        out.append(ShortQuestion(f"simpleqa-{n}", (r["problem"] or "").strip(),
                                 (r["answer"] or "").strip(), str(meta.get("topic", "")),
                                 str(meta.get("answer_type", ""))))
    return out


# ---------------------------------------------------------------- arithmetic
def _evaluate(nums: Sequence[int], ops: Sequence[str]) -> int:
    """Integer value with the usual precedence (* before + and -)."""
    acc, prod = 0, nums[0]
    sign = 1
    for op, x in zip(ops, nums[1:]):
        if op == "*":
            prod *= x
        else:
            acc += sign * prod
            sign, prod = (1 if op == "+" else -1), x
    return acc + sign * prod


def _draw(rng: random.Random, knob: int | tuple[int, int]) -> int:
    return rng.randint(*knob) if isinstance(knob, tuple) else int(knob)


def arithmetic_questions(
    n: int, seed: int, digits: int | tuple[int, int] = 2, terms: int | tuple[int, int] = 2,
    ops: str = "+-",
) -> list[ArithmeticQuestion]:
    """``n`` questions like "What is 23 + 58?"; harder with more digits, terms and ``*``.

    ``digits`` / ``terms`` may be a (lo, hi) range drawn per question. Operators from ``ops``
    (any of "+-*"). Deterministic given the arguments.
    """
    if not ops or set(ops) - set("+-*"):
        raise ValueError(f"ops must be a non-empty subset of '+-*', got {ops!r}")
    rng = random.Random(f"arith:{seed}:{digits}:{terms}:{ops}")
    out = []
    for i in range(n):
        d, t = max(1, _draw(rng, digits)), max(2, _draw(rng, terms))
        nums = [rng.randint(10 ** (d - 1) if d > 1 else 1, 10**d - 1) for _ in range(t)]
        opseq = [rng.choice(ops) for _ in range(t - 1)]
        expr = " ".join([str(nums[0])] + [f"{o} {x}" for o, x in zip(opseq, nums[1:])])
        out.append(ArithmeticQuestion(f"arith-{seed}-{i}", f"What is {expr}?", expr,
                                      _evaluate(nums, opseq), d, t))
    return out


def to_multiple_choice(q: ArithmeticQuestion, seed: int, n_options: int = 4) -> MCQuestion:
    """The question with ``n_options`` options: the answer and distinct nearby integers."""
    rng = random.Random(f"mc:{seed}:{q.id}")
    spread = max(5, abs(q.answer) // 10)
    cands = {q.answer + s for s in (-10, -2, -1, 1, 2, 10)}
    while len(cands) < n_options + 3:
        cands.add(q.answer + rng.randint(-spread, spread))
    cands.discard(q.answer)
    options = rng.sample(sorted(cands), n_options - 1) + [q.answer]
    rng.shuffle(options)
    return MCQuestion(q.id, q.question, tuple(str(x) for x in options),
                      LETTERS[options.index(q.answer)], f"arithmetic d{q.digits} t{q.terms}")


def arithmetic_mc(n: int, seed: int, **kw: Any) -> list[MCQuestion]:
    """4-option versions of ``arithmetic_questions(n, seed, **kw)``."""
    return [to_multiple_choice(q, seed) for q in arithmetic_questions(n, seed, **kw)]


def load_questions(path: Path | str, seed: int = 0) -> list[MCQuestion] | list[ShortQuestion]:
    """Any supported question file by its layout: .jsonl (MMLU), or a CSV sniffed by header."""
    p = Path(path)
    if p.suffix == ".jsonl":
        return load_mmlu_jsonl(p)
    if p.suffix != ".csv":
        raise DataError(f"{p}: unknown question file type; expected .jsonl (MMLU) or .csv "
                        "(hendrycks, GPQA, SimpleQA)")
    _, text = _read_text(p, "a question CSV (hendrycks, GPQA or SimpleQA)")
    header = next(csv.reader(text.splitlines()), [])
    if "Correct Answer" in header:
        return load_gpqa_csv(p, seed)
    if {"problem", "answer"} <= set(header):
        return load_simpleqa_csv(p)
    return load_hendrycks_csv(p)


# ---------------------------------------------------------------- the project's own lists
_SEBW_FMT = "YAML mapping 'targets:' of target word -> list of option words"
_RQ_FMT = ("YAML 'questions:' list of {id, text, category: benign|borderline|harmful}")


def _yaml(path: Path | str | None, default: str, expected: str) -> tuple[Path, Any]:
    import yaml

    from introspect.prompts import concepts_dir

    p, text = _read_text(path if path is not None else concepts_dir() / default, expected)
    try:
        return p, yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DataError(f"{p}: not valid YAML ({type(e).__name__}); expected {expected}") from e


def load_association_targets(path: Path | str | None = None) -> list[TabooItem]:
    """``concepts/seb_words.yaml`` (or a file in that layout): targets with option words."""
    p, data = _yaml(path, "seb_words.yaml", _SEBW_FMT)
    targets = data.get("targets") if isinstance(data, dict) else None
    if not isinstance(targets, dict) or not targets:
        raise DataError(f"{p}: no 'targets' mapping; expected {_SEBW_FMT}")
    out = []
    for word, opts in targets.items():
        if not isinstance(word, str) or not isinstance(opts, list) or not _words(opts):
            raise DataError(f"{p}: target {word!r} has no option words; expected {_SEBW_FMT}")
        out.append(TabooItem(word, tuple(w for w in _words(opts) if not word_match(w, word))))
    return out


def load_restriction_questions(path: Path | str | None = None) -> list[SafetyPrompt]:
    """``concepts/restriction_questions.yaml``: requests labelled by category (harmful=unsafe)."""
    p, data = _yaml(path, "restriction_questions.yaml", _RQ_FMT)
    qs = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(qs, list) or not qs:
        raise DataError(f"{p}: no 'questions' list; expected {_RQ_FMT}")
    out = []
    for q in qs:
        cat = q.get("category") if isinstance(q, dict) else None
        if cat not in ("benign", "borderline", "harmful") or not str(q.get("text", "")).strip():
            raise DataError(f"{p}: entry {q!r:.60} malformed; expected {_RQ_FMT}")
        out.append(SafetyPrompt(str(q.get("id", len(out))), str(q["text"]).strip(), cat,
                                "unsafe" if cat == "harmful" else "safe"))
    return out
