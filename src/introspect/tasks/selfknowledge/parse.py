"""Text readings of the self-knowledge replies: option letters, delegation, word lists, final answers.

Why its own module: every benchmark keeps its parsed-text reading beside the logit reading, and
a parse failure must stay visible (None), never turn silently into "kept and wrong". The rules
are written for what small chat models actually reply: markdown (" **B**"), quotes ('"B"'), a
letter then an explanation ("B\\n\\nExplanation…", "B is correct"), a lead-in ("The answer is
(C) because option D"), and filler ("Sure! Here you go:"), while "A pet…", "T cells" and
"T-Mobile" are not answers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from introspect.grading import forms_pattern, normalize_word

# a choice letter standing alone at the start: end, newline, punctuation, "(delegate)", "is ..."
_AFTER = (r"(?=\s*$|\s*\n|\s*[.:;,)\]*\"'!?`]|\s+\(|\s+(?:(?:is|was)(?!\s+(?:not|wrong|incorrect|false)\b)"
          r"|would(?!\s+(?:not|be\s+(?:wrong|incorrect)))|will|because|since|as)\b|\s+[-–—]\s)")
# ... but "Option A is wrong", "B would be incorrect" reject the letter they start with
_LEAD = r"^[\s\"'*`(\[]*(?:(?i:option|answer|choice)\s*(?:is)?\s*[:=]?\s*[\s\"'*`(\[]*)?"
_I = r"\bi(?:\s+(?:will|would|shall)|\s*['’](?:ll|d))?\s+"  # "I", "I will", "I'll", "I’d"
# a stated answer: "the answer is C", "the correct option is B" (not "... is not B"), "I'd go with D"
_STATED = (r"(?i:\b(?:answer|choice|option)\s*(?:is|would\s+be|will\s+be|:|=)(?!\s*not\b)"
           r"|" + _I + r"(?:choose|pick|select|go\s+with|say)|\bgo(?:ing)?\s+with)"
           r"\s*(?:option\s+)?[\s\"'*`(\[]*")


def parse_letter(text: str, letters: str = "AB") -> str | None:
    """The chosen option letter (upper case only, so the article "a" never counts), or None.

    In order: a letter standing alone at the start (" **B**", '"B"', "B is correct",
    "B\\n\\nExplanation", "T (delegate)", "Option B,"; not "A pet", "T cells", "T-Mobile");
    else the first stated answer ("The answer is (C) because option D" -> C, "I choose B");
    else the only letter written as an option label ("(B)", "B:", "option B"). Ambiguous or
    absent -> None.
    """
    cls = f"[{re.escape(letters)}]"
    m = re.match(_LEAD + rf"({cls})" + _AFTER, text)
    if m:
        return m.group(1)
    m = re.search(_STATED + rf"({cls})(?![A-Za-z0-9'-])", text)
    if m:
        return m.group(1)
    found = set(re.findall(rf"(?<![A-Za-z0-9'-])\(({cls})\)", text))
    found |= set(re.findall(rf"(?<![A-Za-z0-9'-])({cls})[:.)](?!\w)", text))
    found |= set(re.findall(rf"(?i:\boption)\s+\(?({cls})(?![A-Za-z0-9'-])", text))
    found -= rejected(text, cls)
    return found.pop() if len(found) == 1 else None


def rejected(text: str, cls: str) -> set[str]:
    """Letters the reply rules out ("A is wrong", "option B would be incorrect", "not C")."""
    out = set(re.findall(rf"(?<![A-Za-z0-9'-])\(?({cls})\)?\s+(?i:(?:is|was|would\s+be)\s+(?:not|wrong|"
                         rf"incorrect|false))\b", text))
    return out | set(re.findall(rf"(?i:\bnot)\s+(?i:option\s+)?\(?({cls})(?![A-Za-z0-9'-])", text))


_DELEGATE = re.compile(
    r"^[\s\"'*`(\[]*(?:(?i:answer|choice)\s*(?:is)?\s*[:=]?\s*[\s\"'*`(\[]*)?T" + _AFTER
    + r"|(?i:" + _I + r"(?:(?:would\s+)?(?:like|prefer|rather|choose|want)\s+(?:to\s+)?)?"
    r"(?:delegate|pass\b|hand\s+(?:it|this|the\s+question)|let\s+(?:my|the)\s+teammate))"
    r"|(?i:(?:^|\W)delegat(?:e|ing)\s+(?:it|this|to))"
    r"|^\W*(?i:delegate)\b")


_NEGATED = re.compile(r"(?i:\b(?:not|never|won['’]t|don['’]t|wouldn['’]t|shouldn['’]t|no\s+need\s+to)\s+(?:\w+\s+)?)$")


def is_delegation(text: str) -> bool:
    """A game reply that hands the question to the teammate: a standalone "T" ("T", " T.",
    "T (delegate)") or the hand-over said outright, contractions included ("I'd delegate",
    "I'll let my teammate answer", "I’d rather pass"); "T cells", "T-Mobile", "Mr. T" as an
    answer do not count, nor does a hand-over refused ("I won't delegate this one")."""
    return any(not _NEGATED.search(text[max(0, m.start() - 24):m.start() + (m.group(0)[:1].isspace())])
               for m in _DELEGATE.finditer(text))


# ---------------------------------------------------------------- word lists (SEB association)
FILLER = frozenset({
    "sure", "okay", "ok", "certainly", "of course", "absolutely", "here you go", "here you are",
    "here it is", "here they are", "great", "alright", "all right", "yes", "no", "none", "hello",
    "hi", "thanks", "thank you", "words", "list", "etc", "and", "or",
})


def listed_words(text: str, k: int = 5) -> list[str]:
    """The first ``k`` words of a comma / line / numbered list, normalised.

    A lead-in up to a colon ("Sure! Here are five words: a, b") and numbering are dropped;
    filler ("Sure", "here you go", "Okay") and sentence-like items (more than 3 words) are
    never listed words.
    """
    out: list[str] = []
    for item in re.split(r"[,;\n]|\s\d+[.)]\s", text):
        item = item.strip()
        if ":" in item:
            item = item.rsplit(":", 1)[1]
        item = re.sub(r"^\s*(?:\d+[.)]|[-*•])\s*", "", item)
        item = re.sub(r"\s*[(\[].*$|\s+[-–—=]\s.*$", "", item)  # "water (fresh)", "sun - hot"
        item = re.sub(r"^(?:and|or)\s+", "", item.strip(), flags=re.I)
        w = normalize_word(item)
        w = re.sub(r"[.!?]+$", "", w).strip()
        if not w or len(w.split()) > 3 or w in FILLER or re.match(r"^(?:here|sure|okay)\b", w):
            continue
        if w not in out:
            out.append(w)
    return out[:k]


_NONE = re.compile(r"^\W*(?:none|no words?|nothing|neither)\b|\bnone of (?:them|the|these)\b", re.I)
_NEG_BEFORE = re.compile(r"(?:\bnot|\bnor|\bexcept|\bexcluding|\bwithout|\bbut not|\bno)\s+(?:the\s+)?"
                         r"(?:words?\s+)?['\"]?$", re.I)
_NEG_AFTER = re.compile(r"^['\"]?\s*(?:was|were|is|are|did|does)?\s*(?:not|n't|never)\b", re.I)


def association_reply(reply: str, options: Sequence[str]) -> list[bool | None]:
    """Per option word, did the reply say it was on the list: True (named), False (not named,
    or named negated: "…but not salt", "salt was not"), all False for "none"; all None when the
    reply neither names an option nor says none (unparsed, never read as "no")."""
    said: list[bool | None] = []
    for o in options:
        hits = list(forms_pattern(o).finditer(reply))
        pos = [h for h in hits if not (_NEG_BEFORE.search(reply[max(0, h.start() - 24):h.start()])
                                       or _NEG_AFTER.match(reply[h.end():h.end() + 16]))]
        said.append(bool(pos) if hits else None)
    if any(s is not None for s in said):
        return [bool(s) for s in said]
    if _NONE.search(reply):
        return [False] * len(options)
    return [None] * len(options)


# ---------------------------------------------------------------- final answers and rankings
ANSWER_STATEMENT = re.compile(r"(?i:\banswer\b)\s*(?:is)?\s*[:=]?\s*[*_`$\"'“”]*\s*(-?\d[\d,]*)(?![\d.]\d)")
_INT = re.compile(r"(?<![\d.])-?\d[\d,]*(?![\d])")
_EQ_INT = re.compile(r"=\s*[*_`$]*\s*(-?\d[\d,]*)(?![\d.]\d)")
_BOXED = re.compile(r"\\boxed\{\s*(-?\d[\d,]*)\s*\}")  # LaTeX "\boxed{128}" (Qwen's math replies)


def final_answer(text: str) -> int | None:
    """The integer of the first "Answer: N" statement (the format the prompts ask for). A
    statement written as working ("The answer is 25 + 27 = 52") gives the result on its own
    line. Working that continues after the statement ("… so 81 + 3 = 84") is never
    read, nor is any "=" before it. Without the statement, the first LaTeX ``\\boxed{N}`` is the
    stated answer ("The final answer is \\(\\boxed{128}\\)"); a reply with neither is unparsed."""
    m = ANSWER_STATEMENT.search(text)
    if not m:
        box = _BOXED.search(text)
        return int(box.group(1).replace(",", "")) if box else None
    line = text[m.end(1):].split("\n", 1)[0]
    if re.match(r"\s*[-+*/x×]\s*\d", line):  # an expression: its result after "="
        eq = _EQ_INT.search(line)
        return int(eq.group(1).replace(",", "")) if eq else None
    return int(m.group(1).replace(",", ""))


_RESULT_END = re.compile(r"(?:=|\bequals|\bis)\s*[*_`$\"'“”]*\s*(-?\d[\d,]*)\s*[*_`$\"'“”]*\s*[.!]?\s*[\"'”]?\s*$",
                         re.I)


def stated_result(text: str) -> int | None:
    """The result a reply states at the end of its last sentence ("122 - 891 = -769.",
    "2 - 4 equals -2", "... is 33."), else None. A second reading, recorded as such: a model
    that answers in prose but not as "Answer: N" still states its answer, while a reply that
    trails off in working does not end on a result (no last-integer guess)."""
    sentences = [x for x in re.split(r"(?<=[.!?])\s+|\n+", text.strip()) if x.strip()]
    if not sentences:
        return None
    m = _RESULT_END.search(sentences[-1])
    return int(m.group(1).replace(",", "")) if m else None


def last_integer(text: str) -> int | None:
    """A lenient secondary reading: the last integer anywhere (the old grader's fallback)."""
    nums = _INT.findall(text)
    return int(nums[-1].replace(",", "")) if nums else None


def parse_ranking(text: str, k: int = 4) -> list[int] | None:
    """0-based indices easiest→hardest from "Q3, Q1, Q4, Q2" (or "3, 1, 4, 2"); None if the
    reply is not a permutation of 1..k."""
    nums = re.findall(r"\bQ\s*(\d+)\b", text, re.I) or re.findall(r"(?<![\d.])(\d+)(?![\d.])", text)
    seen: list[int] = []
    for x in nums:
        if int(x) not in seen:
            seen.append(int(x))
    return [x - 1 for x in seen] if sorted(seen) == list(range(1, k + 1)) else None
