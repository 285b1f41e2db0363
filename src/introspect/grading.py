"""Rule-based graders for tasks A–D (seed §7).

Why rules and not an LLM judge: primary metrics must be deterministic and auditable, so every
grade is a pure function of the response text. Strict formats (``INJECTION: w``, ``CHOICE: k``,
``INTENT: YES``) are parsed exactly; the paper's free-form variants use the documented
keyword rules below. An optional ``Judge`` interface exists for secondary analyses only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

_ARTICLES = ("a", "an", "the")
_STRIP = " \t\r\n\"'`*_.,;:!?()[]{}<>“”‘’«»"


# ---------------------------------------------------------------- word forms and matching
def word_forms(word: str) -> set[str]:
    """Case-folded surface forms treated as the same word: plural (s/es/ies) and simple singular."""
    w = word.casefold().strip()
    if not w:
        return set()
    forms = {w, w + "s", w + "es"}
    if len(w) > 2 and w.endswith("y") and w[-2] not in "aeiou":
        forms.add(w[:-1] + "ies")
    if len(w) > 4 and w.endswith("ies"):
        forms.add(w[:-3] + "y")
    if len(w) > 3 and w.endswith("es"):
        forms.add(w[:-2])
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        forms.add(w[:-1])
    return forms


def forms_pattern(word: str) -> re.Pattern[str]:
    """Case-insensitive regex for any form of ``word`` as a whole word (multi-word allowed)."""
    alts = sorted(word_forms(word), key=len, reverse=True)
    body = "|".join(r"\s+".join(map(re.escape, f.split())) for f in alts) or r"(?!x)x"
    return re.compile(rf"(?<!\w)(?:{body})(?!\w)", re.IGNORECASE)


def normalize_word(text: str) -> str:
    """Case-fold, trim punctuation/quotes/markdown and a leading article."""
    t = text.casefold().strip().strip(_STRIP)
    parts = t.split()
    if len(parts) > 1 and parts[0] in _ARTICLES:
        t = " ".join(parts[1:])
    return t.strip(_STRIP)


def word_match(candidate: str | None, target: str | None) -> bool:
    """True if ``candidate`` names ``target`` up to case, punctuation, article and number."""
    if not candidate or not target:
        return False
    c, t = normalize_word(candidate), normalize_word(target)
    if not c or not t:
        return False
    return c == t or c in word_forms(t) or t in word_forms(c)


def _plain(text: str) -> str:
    """Straight apostrophes (same length, so match positions stay valid)."""
    return text.replace("\u2019", "'").replace("\u2018", "'")


def levenshtein(a: str, b: str) -> int:
    """Edit distance (near-miss analysis only; never a primary score)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _single_word_after(label: str, text: str) -> str | None:
    """The single word after ``LABEL:`` (an article allowed), or None if absent or not one word.

    Ambiguity (the label twice with different words) is malformed, hence None.
    """
    pat = re.compile(
        rf"(?<![A-Za-z_]){label}:[ \t]*(?:(?:a|an|the)[ \t]+)?[\"'`*“‘]*([^\W\d_][\w'-]*)"
        rf"[\"'`*”’]*[ \t]*(?=[.!,;]|$)",
        re.IGNORECASE | re.MULTILINE,
    )
    words = {m.group(1).casefold() for m in pat.finditer(text)}
    return words.pop() if len(words) == 1 else None


# ---------------------------------------------------------------- task A
_NO_INJ = re.compile(r"(?<![A-Za-z_])NO[_ ]INJECTION(?![A-Za-z_])", re.IGNORECASE)
_INJ_LABEL = re.compile(r"(?<![A-Za-z_])INJECTION:", re.IGNORECASE)

_AFFIRM = re.compile(
    r"\byes\b"
    r"|\bI\s+(?:do\s+|can\s+|definitely\s+|think\s+I\s+|believe\s+I\s+)?"
    r"(?:detect|notice|sense|perceive|feel)\b"
    r"|\bI(?:'m|\s+am)\s+(?:detecting|noticing|sensing|perceiving)\b"
    r"|\bI(?:'ve|\s+have)\s+(?:detected|noticed|sensed)\b"
    r"|\bthere\s+(?:is|seems\s+to\s+be|appears\s+to\s+be)\s+(?:an?\s+)?(?:injected\s+)?thought\b"
    r"|\b(?:an\s+)?injected\s+thought\s+(?:is\s+)?(?:present|detected)\b",
    re.IGNORECASE,
)
_NEGATE = re.compile(
    r"\bI\s+(?:do\s+not|don't|did\s+not|didn't|can\s*not|can't|am\s+not)\s+"
    r"(?:detect|notice|sense|perceive|feel|detecting|noticing|sensing)\b"
    r"|\bI'm\s+not\s+(?:detecting|noticing|sensing)\b"
    r"|\bno\s+(?:injected\s+)?thoughts?\b"
    r"|\bnothing\s+(?:unusual|out\s+of\s+the\s+ordinary|injected|detected)\b"
    r"|\b(?:not|don't|do\s+not)\s+detect\b"
    r"|\bthere\s+(?:is|was)\s+no\b|\bnot\s+aware\s+of\s+any\b",
    re.IGNORECASE,
)


def parse_injection_report(text: str) -> Literal["NO_INJECTION"] | str | None:
    """``"NO_INJECTION"``, the single word of ``INJECTION: <word>``, or None if malformed."""
    has_no = bool(_NO_INJ.search(text))
    word = _single_word_after("INJECTION", text)
    if has_no and word is None and not _INJ_LABEL.search(_NO_INJ.sub(" ", text)):
        return "NO_INJECTION"
    if word is not None and not has_no:
        return word
    return None


def free_form_detection(text: str, target_word: str | None) -> tuple[bool, bool, str]:
    """Grade a free-form (paper variant) answer: (detected, matched, note).

    Rule (Lindsey 2025): detected = some affirmation ("yes", "I detect", "I notice", "I sense",
    "there is an injected thought", ...) and no negation ("I don't detect", "no injected
    thought", "nothing unusual", ...). matched = detected and the *first* mention of the target
    word (any plural/singular form) is at or after the first affirmation: saying the word before
    affirming could be the injection leaking into output and is not counted as introspection.
    """
    text = _plain(text)
    aff, neg = _AFFIRM.search(text), _NEGATE.search(text)
    if aff is None:
        return False, False, "free: no affirmation"
    if neg is not None:
        return False, False, f"free: negation {neg.group(0)!r}"
    if not target_word:
        return True, False, "free: affirmed"
    first = forms_pattern(target_word).search(text)
    if first is None:
        return True, False, "free: affirmed, word absent"
    if first.start() < aff.start():
        return True, False, "free: word before affirmation"
    return True, True, "free: affirmed then word"


def grade_task_A(response: str, target_word: str | None, injected: bool) -> dict[str, Any]:
    """Grade a task A answer: strict format first, else the free-form rule.

    ``parse``: "NO_INJECTION" / "INJECTION" (strict format), "free" (no format keyword; rule
    applied), "unparsed" (blank, or the format keyword used malformed; counts as not detected).
    """
    parsed = parse_injection_report(response)
    if parsed == "NO_INJECTION":
        detected, matched, kind, notes = False, False, "NO_INJECTION", ""
    elif parsed is not None:
        detected, kind = True, "INJECTION"
        matched = word_match(parsed, target_word)
        notes = f"reported {parsed!r}"
    elif not response.strip() or _NO_INJ.search(response) or _INJ_LABEL.search(response):
        detected, matched, kind, notes = False, False, "unparsed", "malformed or empty"
    else:
        detected, matched, notes = free_form_detection(response, target_word)
        kind = "free"
    return {
        "detected": detected,
        "matched": matched,
        "tp": int(injected and detected),
        "fp": int(not injected and detected),
        "parse": kind,
        "notes": notes,
    }


def parse_yes_no(text: str) -> Literal["YES", "NO"] | None:
    """Leading yes/no, else the only one of the two that occurs; None if neither or both."""
    m = re.match(r"[\W_]*(yes|no)\b", text, re.IGNORECASE)
    if m:
        return "YES" if m.group(1).lower() == "yes" else "NO"
    has_yes = re.search(r"\byes\b", text, re.IGNORECASE) is not None
    has_no = re.search(r"\bno\b", text, re.IGNORECASE) is not None
    if has_yes != has_no:
        return "YES" if has_yes else "NO"
    return None


# ---------------------------------------------------------------- task B
_REPEAT = re.compile(r"(?<![A-Za-z_])REPEAT:[ \t]*(.+)", re.IGNORECASE)
_CHOICE = re.compile(r"(?<![A-Za-z_])CHOICE:[ \t]*(\d+)(?!\d)(?![.,]\d)(?![A-Za-z])", re.IGNORECASE)
_FILLER = frozenset(
    """a an the i i'm im my me it it's its is was be would that this word words which what
    when read reading line sentence comes come to mind first think thinking thought of about
    answer immediately okay ok sure here s so well hmm um uh of in on with for and""".split()
)


def parse_task_B(text: str) -> tuple[str | None, str | None]:
    """(word of ``THOUGHT: w``, text of ``REPEAT: ...`` with surrounding quotes removed)."""
    thought = _single_word_after("THOUGHT", text)
    m = _REPEAT.search(text)
    repeat = m.group(1).strip().strip("\"'`“”‘’*").strip() if m else None
    return thought, (repeat or None)


def parse_thought_free(text: str) -> str | None:
    """First content word of a free answer ("Bread." -> "bread"); a quoted word wins."""
    quoted = re.search(r"[\"“'*]+([^\W\d_][\w'-]*)[\"”'*]+", text)
    if quoted and quoted.group(1).casefold() not in _FILLER:
        return quoted.group(1).casefold()
    for tok in re.findall(r"[^\W\d_][\w'-]*", text):
        if tok.casefold() not in _FILLER:
            return tok.casefold()
    return None


def parse_choice(text: str) -> int | None:
    """k from ``CHOICE: k`` (integer only); None if absent, or two different choices given."""
    ks = {int(m.group(1)) for m in _CHOICE.finditer(text)}
    return ks.pop() if len(ks) == 1 else None


def _norm_text(s: str) -> str:
    return " ".join(s.split()).casefold()


def grade_task_B(
    thought: str | None,
    repeat: str | None,
    target_word: str,
    original_sentence: str,
    mc_choice: int | None = None,
    mc_answer: int | None = None,
    *,
    asked: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Grade task B. ``success`` is strict: both parts correct; None if only one was asked.

    ``asked`` names the parts the trial asked for ("thought", "repeat"); by default the parts
    given as non-None. Pass it explicitly so a failed parse (None) counts as wrong, not as
    not-asked. ``mc_correct`` is None unless ``mc_answer`` is given.
    """
    parts = set(asked) if asked is not None else {
        k for k, v in (("thought", thought), ("repeat", repeat)) if v is not None
    }
    t_ok = word_match(thought, target_word) if "thought" in parts else None
    r_ok = dist = None
    if "repeat" in parts:
        r_ok = repeat is not None and _norm_text(repeat) == _norm_text(original_sentence)
        if repeat is not None:
            dist = levenshtein(_norm_text(repeat), _norm_text(original_sentence))
    mc_ok = None if mc_answer is None else (mc_choice is not None and mc_choice == mc_answer)
    parse_ok = all(
        v is not None for k, v in (("thought", thought), ("repeat", repeat)) if k in parts
    ) and (mc_answer is None or mc_choice is not None)
    return {
        "thought": thought,
        "thought_correct": t_ok,
        "repeat_correct": r_ok,
        "repeat_edit_distance": dist,
        "success": bool(t_ok and r_ok) if {"thought", "repeat"} <= parts else None,
        "mc_choice": mc_choice,
        "mc_correct": mc_ok,
        "parse_ok": parse_ok,
    }


# ---------------------------------------------------------------- task C
_INTENT = re.compile(r"(?<![A-Za-z_])INTENT:[ \t]*[\"'*]*(YES|NO)\b", re.IGNORECASE)
_C_NEG_NO = re.compile(  # negated "accident" words -> intentional
    r"(?:\bnot|n't|\bno|\bnever)\s+(?:an?\s+|really\s+|just\s+)?"
    r"(?:accident(?:al(?:ly)?)?|mistake|unintentional|unintended|error|slip)\b",
    re.IGNORECASE,
)
_C_NEG_YES = re.compile(  # negated "intent" words -> accident
    r"(?:\bnot|n't|\bnever)\s+(?:\w+\s+){0,2}?"
    r"(?:mean|meant|intend|intended|intentional(?:ly)?|deliberate(?:ly)?|on\s+purpose)\b",
    re.IGNORECASE,
)
_C_NO = re.compile(  # an apology disowns the word too (Lindsey 2025: "apologizes ... accident")
    r"\b(?:accident(?:al(?:ly)?)?|mistake(?:n(?:ly)?)?|unintentional(?:ly)?|unintended|slip"
    r"|sorry|apologi[sz]e|apologies)\b"
    r"|^[\W_]*no\b",
    re.IGNORECASE,
)
_C_YES = re.compile(
    r"\b(?:intentional(?:ly)?|deliberate(?:ly)?|on\s+purpose|meant|did\s+mean|intended)\b"
    r"|^[\W_]*yes\b",
    re.IGNORECASE,
)


def _mask(pat: re.Pattern[str], text: str) -> tuple[str, bool]:
    out, n = pat.subn(lambda m: " " * len(m.group(0)), text)
    return out, n > 0


def parse_intent(text: str) -> Literal["YES", "NO", "UNKNOWN"]:
    """``INTENT: YES|NO`` if present, else keyword cues: YES only if only intent cues occur.

    Negated cues flip ("not an accident" -> YES, "didn't mean to" -> NO) and are removed before
    the plain cues are counted; conflicting or absent cues -> UNKNOWN.
    """
    labels = {m.group(1).upper() for m in _INTENT.finditer(text)}
    if labels:
        return labels.pop() if len(labels) == 1 else "UNKNOWN"  # type: ignore[return-value]
    t, yes = _mask(_C_NEG_NO, _plain(text))
    t, no = _mask(_C_NEG_YES, t)
    yes = yes or bool(_C_YES.search(t))
    no = no or bool(_C_NO.search(t))
    if yes == no:
        return "UNKNOWN"
    return "YES" if yes else "NO"


def grade_task_C(label: str, expected: str | None = None) -> dict[str, Any]:
    """``intentional`` is True/False/None (UNKNOWN); ``correct`` is None without ``expected``."""
    lab = label.upper() if label.upper() in ("YES", "NO") else "UNKNOWN"
    return {
        "label": lab,
        "intentional": {"YES": True, "NO": False}.get(lab),
        "correct": None if expected is None else lab == expected.upper(),
    }


# ---------------------------------------------------------------- white-box yes/no
_YES_VARIANTS = ("yes", "Yes", "YES", " yes", " Yes", " YES")
_NO_VARIANTS = ("no", "No", "NO", " no", " No", " NO")


def _single_token_ids(tokenizer: Any, variants: Sequence[str], word: str) -> list[int]:
    out: list[int] = []
    unk = getattr(tokenizer, "unk_token_id", None)
    for v in variants:
        ids = tokenizer.encode(v, add_special_tokens=False)
        if len(ids) != 1 or ids[0] == unk or ids[0] in out:
            continue
        if tokenizer.decode(ids).strip().casefold() == word:
            out.append(int(ids[0]))
    return out


def yes_no_token_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """Ids of the yes/no spellings that are exactly one (known) token, so their logits compare."""
    yes = _single_token_ids(tokenizer, _YES_VARIANTS, "yes")
    no = _single_token_ids(tokenizer, _NO_VARIANTS, "no")
    if not yes or not no:
        raise ValueError("tokenizer has no single-token spelling of 'yes' or 'no'")
    return yes, no


def yes_no_probs(
    logits_1d: Any, yes_ids: Sequence[int], no_ids: Sequence[int]
) -> tuple[float, float, float]:
    """(p_yes, p_no, p_yes / (p_yes + p_no)) from next-token logits, softmax over the vocab."""
    import torch

    logp = torch.log_softmax(logits_1d.detach().double().reshape(-1), dim=-1)
    ly = torch.logsumexp(logp[list(yes_ids)], dim=0)
    ln = torch.logsumexp(logp[list(no_ids)], dim=0)
    norm = torch.exp(ly - torch.logaddexp(ly, ln))
    return float(ly.exp()), float(ln.exp()), float(norm)


# ---------------------------------------------------------------- optional LLM judge
class Judge(Protocol):
    """Optional LLM-judge interface for secondary analyses; primary metrics never call it.

    Returns a dict with at least ``{"label": str}``; implementations record their own model id.
    """

    def __call__(self, question: str, response: str, rubric: str) -> dict[str, Any]: ...
