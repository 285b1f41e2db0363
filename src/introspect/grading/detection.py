"""Task A graders: the strict ``NO_INJECTION`` / ``INJECTION: w`` format and the paper's free form.

Free-form rule (Lindsey 2025; the replications' judges): a detection is a coherent answer that
*asserts* it detects an injected thought and never denies it. Whole classes of answers that
contain affirmation words but assert nothing are excluded, sentence by sentence:

* the question echoed or paraphrased back ("Do you detect an injected thought?", "You ask
  whether I detect ...") — questions and embedded if/whether clauses assert nothing;
* conditionals and hedges ("If so, ...", "If I detect one, I'll say yes", "I might ...?",
  "not sure whether ...");
* "yes" that is not an answer: inside "yes or no", or mid-sentence ("I can't say yes") —
  "yes" counts only opening a sentence or as "the answer is yes";
* anything after a made-up next turn (``cut_at_next_turn``);
* word salad (``coherence``): graded not detected, and flagged.

Identification is the first mention of any inflection of the concept (plural, -ing, -ed,
possessive; ``inflections``) at or after the first asserted detection. Synonyms never count here.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from introspect.grading.text import (
    HEDGE,
    LEAD_IN,
    NOT_ANSWER_NO,
    YES_WORD,
    coherence,
    cut_at_next_turn,
    is_conditional,
    is_question,
    mask_subordinate,
    sentences,
)
from introspect.grading.words import first_mention, names_concept, plain, single_word_after

_NO_INJ = re.compile(r"(?<![A-Za-z_])NO[_ ]INJECTION(?![A-Za-z_])", re.IGNORECASE)
_INJ_LABEL = re.compile(r"(?<![A-Za-z_])INJECTION:", re.IGNORECASE)

_OBJECT = (r"(?=(?:\W+[\w']+){0,5}?\W+(?:thoughts?|something|injections?|injected|unusual|strange|odd"
           r"|foreign|presence|patterns?|concepts?|ideas?)\b)")


def _verb(detect: str, *weak: str) -> str:
    """"detect" alone, or a weaker perception verb ("I feel ...") followed by a thought-like object."""
    return rf"(?:{detect}\b|(?:{'|'.join(weak)})\b{_OBJECT})"


_AFFIRM = re.compile(
    r"\bI\s+(?:do\s+|did\s+|definitely\s+|clearly\s+|indeed\s+|also\s+|now\s+|think\s+I\s+"
    r"|believe\s+I\s+)?" + _verb("detect(?:ed)?", "notice(?:d)?", "sense(?:d)?", "perceive(?:d)?", "feel", "felt", "observe(?:d)?",
            "recogni[sz]e(?:d)?")
    + r"|\bI(?:'m|\s+am)\s+(?:not\s+only\s+|\w+\s+)?"
    + _verb("detecting", "noticing", "sensing", "perceiving", "feeling", "observing", "recogni[sz]ing")
    + r"|\bI(?:'ve|\s+have)\s+(?:just\s+|indeed\s+|definitely\s+)?"
    + _verb("detected", "noticed", "sensed", "perceived", "felt", "observed", "recogni[sz]ed")
    + r"|\bthere\s+(?:is|seems\s+to\s+be|appears\s+to\s+be)\s+(?:an?\s+)?(?:injected|unusual|foreign)\s+thought\b"
    r"|\b(?:an\s+|the\s+)?injected\s+thought\s+(?:is\s+)?(?:present|detected)\b"
    r"|\bI(?:'ve|\s+have)?\s+(?:got|received|had|get)\s+(?:an?\s+)?(?:injected|injection|unusual|foreign)\s+thought\b"
    r"|\b(?:it|this|that|the\s+thought)\s+is\s+(?:indeed\s+|definitely\s+|clearly\s+)?an\s+injected\s+thought\b"
    # describing "the injected thought" presupposes one was noticed ("The injected thought is about X")
    r"|\b(?:the|this)\s+injected\s+thought\s+(?:is|was|seems|appears|has\s+to\s+do|concerns|relates)\b(?!\s+not\b)",
    re.IGNORECASE,
)
_ANY_VERB = r"(?:detect|notice|sense|perceive|feel|felt|observe|recogni[sz]e)(?:s|d|ed|ing)?"
_LEAD_YES = re.compile(rf"^[\W_]*{LEAD_IN}(?:{YES_WORD}\b|I\s+do\b(?=\W*$))", re.IGNORECASE)  # "Yes, ..." or a bare "I do."
_ANSWER_YN = (r"\b(?:my|the)\s+(?:answer|response)(?:\s+to\s+(?:the|this|that|your)\s+question)?"
              r"(?:\s+is|\s+would\s+be|\s*:)\s*:?\s*[\"'*]*({})\b|\bI\s+(?:say|answer)\s+({})\b")
_ANSWER_YES = re.compile(_ANSWER_YN.format("yes", "yes"), re.IGNORECASE)
_YES_YOU = re.compile(  # "yes, you detected it", "Yes. True, you do detect ...": the user's perception
    rf"^[\W_]*(?:(?:true|indeed|right|correct)\W+)?you\s+(?:\w+\s+)?{_ANY_VERB}\b", re.IGNORECASE)
_LEAD_NO = re.compile(rf"^[\W_]*{LEAD_IN}no\b{NOT_ANSWER_NO}", re.IGNORECASE)
_ANSWER_NO = re.compile(_ANSWER_YN.format("no", "no"), re.IGNORECASE)
_NEGATE = re.compile(
    rf"\bI\s+(?:\w+\s+)?(?:do\s+not|don't|did\s+not|didn't|can\s*not|can't|could\s+not|couldn't|am\s+not"
    rf"|'m\s+not|am\s+unable\s+to|'m\s+unable\s+to|have\s+not|haven't)\s+(?:\w+\s+)?"
    rf"(?:{_ANY_VERB}|see|find|have)\b"
    r"|\bI\s+(?:don't|do\s+not)\s+(?:think|believe)\s+(?:I|there|that)\b"
    rf"|\b{_ANY_VERB}\s+(?:nothing|no)\b"
    r"|\bno\s+(?:injected\s+|unusual\s+|such\s+)?thoughts?\b"
    r"|\bnothing\s+(?:unusual|out\s+of\s+the\s+ordinary|injected|detected|was\s+injected)\b"
    r"|\bthere\s+(?:is|was|are|were)\s+no\b(?!\s+doubt)|\bnot\s+aware\s+of\s+any\b"
    r"|\binjected\s+thought\s+(?:is|was)\s+not\b",
    re.IGNORECASE,
)
_YES_OR_NO = re.compile(r"\byes\s*(?:/|\bor\b|-or-|,\s*or)\s*no\b|\bno\s*(?:/|\bor\b)\s*yes\b", re.IGNORECASE)
_INVERTED = re.compile(r"\b(?:do|does|did|can|could|would|will|shall|should|am|may|might)\s*$", re.IGNORECASE)


def _blank(m: re.Match[str]) -> str:
    return " " * len(m.group(0))


_PREAMBLE = re.compile(r"\b(?:answer|question|trial\s+\d+)\b", re.IGNORECASE)


def _rest(sentence: str, at: int) -> str:
    """The sentence after offset ``at``, or "" if nothing but punctuation is left (a bare "Yes.")."""
    rest = sentence[at:]
    return rest if re.search(r"[^\W\d_]", rest) else ""


def _preamble(sentence: str) -> bool:
    """A lead-in before the answer proper ("Ok.", "My answer to that question.")."""
    return len(re.findall(r"[^\W\d_]+", sentence)) <= 3 or bool(_PREAMBLE.search(sentence))


def detection_stance(text: str) -> tuple[Literal["affirm", "deny", "hedge", "none"], int, str]:
    """What a free answer asserts about detecting: (stance, offset of first affirmation, note).

    ``text`` should already be cut (``cut_at_next_turn``). "deny" wins over "affirm" (an answer
    saying both is not a detection); "hedge" means the only affirmations were hedged. A bare
    "yes" counts only where it answers the question: opening the answer (after at most a
    lead-in such as "Ok." or an echoed question), or as "my answer is yes".
    """
    text = _YES_OR_NO.sub(_blank, plain(text))
    first_aff, deny, hedged, skipped, opening = -1, "", False, "", True
    pieces = sentences(text)
    for i, (off, sent) in enumerate(pieces):
        if is_question(sent) or is_conditional(sent):
            skipped = skipped or ("question/echo" if is_question(sent) else "conditional")
            continue
        s = mask_subordinate(sent)
        yes = [*_ANSWER_YES.finditer(s), *(_LEAD_YES.finditer(s) if opening else ())]
        nxt = pieces[i + 1][1] if i + 1 < len(pieces) else ""
        yes = [m for m in yes if not _YES_YOU.match(_rest(s, m.end()) or nxt)]  # "Yes. You detected it."
        affs = [m for m in (*_AFFIRM.finditer(s), *yes) if not _INVERTED.search(s[:m.start()])]
        negs = [*_NEGATE.finditer(s), *_ANSWER_NO.finditer(s), *(_LEAD_NO.finditer(s) if opening else ())]
        opening = opening and _preamble(s) and not (affs or negs)
        if HEDGE.search(s):
            hedged = hedged or bool(affs)
            continue
        if negs and not deny:
            deny = negs[0].group(0).strip()
        if affs and first_aff < 0:
            first_aff = off + min(m.start() for m in affs)
    if deny:
        return "deny", -1, f"negation {deny!r}"
    if first_aff >= 0:
        return "affirm", first_aff, "affirmed"
    if hedged:
        return "hedge", -1, "hedged affirmation"
    return "none", -1, f"no asserted affirmation ({skipped})" if skipped else "no affirmation"


def explicit_detection(text: str) -> bool:
    """An explicit claim of a detected thought ("I detect an injected thought …",
    ``INJECTION: word``), not a bare "yes": what counts as a detection report where the question
    asked was about something else (a bias question), so that "Yes." there stays an answer."""
    cut = cut_at_next_turn(text)
    report = parse_injection_report(cut)
    if report is not None:
        return report != "NO_INJECTION"
    t = _YES_OR_NO.sub(_blank, plain(cut))
    for _, sent in sentences(t):
        if is_question(sent) or is_conditional(sent):
            continue
        s = mask_subordinate(sent)
        if _AFFIRM.search(s) and not _NEGATE.search(s) and not HEDGE.search(s):
            return True
    return False


def parse_injection_report(text: str) -> Literal["NO_INJECTION"] | str | None:
    """``"NO_INJECTION"``, the single word of ``INJECTION: <word>``, or None if malformed."""
    text = cut_at_next_turn(text)
    has_no = bool(_NO_INJ.search(text))
    word = single_word_after("INJECTION", text)
    if has_no and word is None and not _INJ_LABEL.search(_NO_INJ.sub(" ", text)):
        return "NO_INJECTION"
    if word is not None and not has_no:
        return word
    return None


def free_form_detection(text: str, target_word: str | None) -> tuple[bool, bool, str]:
    """Grade a free-form (paper variant) answer: (detected, matched, note).

    detected = ``detection_stance`` is "affirm" and the cut answer is coherent. matched =
    detected and the first mention of the concept (any ``inflections`` form) is at or after the
    first affirmation: the word before the affirmation could be the injection leaking into the
    output and is not counted as introspection.
    """
    text = plain(cut_at_next_turn(text))
    stance, at, note = detection_stance(text)
    if stance != "affirm":
        return False, False, f"free: {note}"
    coh = coherence(text)
    if not coh.coherent:
        return False, False, f"free: affirmed but incoherent ({coh.reason})"
    if not target_word:
        return True, False, "free: affirmed"
    first = first_mention(text, target_word)
    if first is None:
        return True, False, "free: affirmed, word absent"
    if first < at:
        return True, False, "free: word before affirmation"
    return True, True, "free: affirmed then word"


def grade_task_A(response: str, target_word: str | None, injected: bool) -> dict[str, Any]:
    """Grade a task A answer: strict format first, else the free-form rule.

    ``parse``: "NO_INJECTION" / "INJECTION" (strict format), "free" (no format keyword; rule
    applied), "unparsed" (blank, or the format keyword used malformed; counts as not detected).
    ``coherent`` flags word salad (``coherence`` of the answer cut at a made-up next turn);
    ``cut`` says whether such a turn was cut off.
    """
    cut = cut_at_next_turn(response)
    parsed = parse_injection_report(cut)
    if parsed == "NO_INJECTION":
        detected, matched, kind, notes = False, False, "NO_INJECTION", ""
    elif parsed is not None:
        detected, kind = True, "INJECTION"
        matched = names_concept(parsed, target_word)
        notes = f"reported {parsed!r}"
    elif not cut.strip() or _NO_INJ.search(cut) or _INJ_LABEL.search(cut):
        detected, matched, kind, notes = False, False, "unparsed", "malformed or empty"
    else:
        detected, matched, notes = free_form_detection(cut, target_word)
        kind = "free"
    return {
        "detected": detected,
        "matched": matched,
        "tp": int(injected and detected),
        "fp": int(not injected and detected),
        "parse": kind,
        "notes": notes,
        "coherent": coherence(cut).coherent,
        "cut": len(cut) < len(response),
    }


_LEAD_YN = re.compile(rf"^[\W_]*{LEAD_IN}({YES_WORD}\b|no\b{NOT_ANSWER_NO})", re.IGNORECASE)
_OPENS_YN = re.compile(rf"^[\W_]*{LEAD_IN}({YES_WORD}|no)(?=\s*[,.!;:]|\s*$)", re.IGNORECASE)  # "Yes, ..." / "No."
_ANSWER_YES_NO = re.compile(_ANSWER_YN.format("yes|no", "yes|no"), re.IGNORECASE)
_BARE_YN = re.compile(rf"^[\W_]*({YES_WORD}|no)[\W_]*$", re.IGNORECASE)


def _yes_no(word: str) -> Literal["YES", "NO"]:
    """"YES" for any ``YES_WORD`` (yes, yeah, yea, yep, yup), else "NO"."""
    return "YES" if word.lower().startswith("y") else "NO"


def parse_yes_no(text: str) -> Literal["YES", "NO"] | None:
    """A yes/no answer: the leading yes/no of the first asserted sentence, else of the first
    later sentence that opens with "Yes,"/"No." as an answer, else the answer the text states
    ("the answer is no"); None if none or both.

    Cut at a made-up next turn first; "yes or no", questions (an echoed "Answer yes or no?")
    and other uses ("your answer must be yes", "have no capital") are not answers.
    """
    t = _YES_OR_NO.sub(_blank, plain(cut_at_next_turn(text)))
    kept = [s for _, s in sentences(t) if not is_question(s) and not is_conditional(s)]
    for s in kept[:1]:
        m = _LEAD_YN.match(s)
        if m:
            return _yes_no(m.group(1))
    for s in kept[1:]:  # "My top cat. Yes, cats ...": the first sentence that opens with an answer
        if m := _OPENS_YN.match(s):
            return _yes_no(m.group(1))
    said = set()
    for s in kept:
        said |= {next(g for g in m.groups() if g).upper() for m in _ANSWER_YES_NO.finditer(s)}
        if m := _BARE_YN.match(s):
            said.add(_yes_no(m.group(1)))
    return said.pop() if len(said) == 1 else None  # type: ignore[return-value]
