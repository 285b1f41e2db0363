"""Text hygiene every free-form grader applies first: the answer's own turn, its sentences, coherence.

Why here and pure: a sampled answer often runs on into a made-up next turn ("\\n\\nHuman: ...",
"Trial 2: ...", "<|im_start|>user"), and a "Yes" there is not the model's answer. Graders cut at
the first such marker (``cut_at_next_turn``); the decode engine may stop generation on
``NEXT_TURN_STOPS`` but graders cut again, so a record is graded the same whichever engine made it.
Strongly steered models also emit word salad that can contain "yes"; ``coherence`` flags it with
simple, auditable statistics (no dictionary, no model).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# ---------------------------------------------------------------- cutting at a made-up next turn
NEXT_TURN_STOPS: tuple[str, ...] = (
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|start_header_id|>",
    "<start_of_turn>", "<end_of_turn>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>",
    "[INST]", "\nHuman:", "\nhuman:", "\nUser:", "\nAssistant:", "\nSystem:", "\nQuestion:", "\nQ:",
    "\nTrial ", "\n### Instruction", "\n### Human", "\n### User", "\n### Response",
)
"""Literal stop strings for a generation engine (a superset of what chat templates end turns with)."""

_SPECIAL = re.compile(
    r"<\|(?:im_start|im_end|endoftext|eot_id|start_header_id|end_header_id|user|assistant|system|end)\|>"
    r"|<(?:start|end)_of_turn>|\[/?INST\]|</s>"
)
_ROLE = r"(?:Human|User|Assistant|System|Researcher|Interviewer|Questioner)"
_NEXT_TURN = re.compile(
    rf"(?<![\w-]){_ROLE}[ \t]*:"  # a role label anywhere (capitalised, with a colon)
    r"|(?:^|(?<=\n))[ \t>*#]*(?:Q|Question)[ \t]*:"  # a new question line
    r"|(?<=\n)[ \t>*#]*(?:user|assistant|model|system)[ \t]*(?:\n|$)"  # template roles, tokens skipped
    r"|(?<=\n)[ \t>*#]*(?:human|user|assistant)[ \t]*:"  # a lowercase role label opening a line
    r"|(?:^|(?<=\n))[ \t]*#{2,}[ \t]*(?:Instruction|Input|Human|User|Question|Response)\b"
    r"|(?:^|(?<=\n)|(?<=[.!?\"'*])[ \t])[ \t*#]*Trial[ \t]+\d+\b",  # the experimenter's next trial
)
_OWN_LABEL = re.compile(r"[ \t*]*(?:Assistant|AI)[ \t]*:[ \t]*")


def cut_at_next_turn(text: str, extra_stops: Iterable[str] = ()) -> str:
    """The answer up to (not including) the first sign of a made-up next turn.

    Cuts at chat special tokens, a capitalised role label with a colon ("Human:", "User:",
    "Assistant:" ...), a line starting "Q:"/"Question:", a bare template role line ("user"),
    "### Instruction"-style headers, and a "Trial N" that starts a line or follows a sentence
    (a "Trial N" at the very start is the model echoing its own trial label and is kept).
    An "Assistant:"/"AI:" label at the very start labels the answer itself and is not a cut.
    ``extra_stops`` are literal strings (e.g. the model's own end-of-turn text). Pure function.
    """
    if not text:
        return ""
    own = _OWN_LABEL.match(text)
    cuts = [m.start() for m in _SPECIAL.finditer(text)][:1]
    for m in _NEXT_TURN.finditer(text, own.end() if own else 0):
        if m.group(0).lstrip(" \t*#").startswith("Trial") and not text[:m.start()].strip():
            continue  # the model echoing the current trial's label before its answer
        cuts.append(m.start())
        break
    for s in extra_stops:
        if s and (i := text.find(s)) >= 0:
            cuts.append(i)
    return text[:min(cuts)] if cuts else text


# ---------------------------------------------------------------- sentences and clauses
_SENT = re.compile(r"[^.!?\n]*(?:[.!?]+[\"')\]*]*|\n|$)")


def sentences(text: str) -> list[tuple[int, str]]:
    """(offset, sentence) pieces split at . ! ? and newlines; blank pieces dropped."""
    return [(m.start(), m.group(0)) for m in _SENT.finditer(text) if m.group(0).strip()]


_AUX = r"(?:do|does|did|can|could|would|will|shall|should|is|are|was|were|am|have|has|had|may|might)"
_QUESTION_START = re.compile(  # "Do you ...", "What is ...": not "What I meant was ...", "How interesting"
    rf"[\W_]*(?:{_AUX}\s+(?:you|i|we|there|it|this|that|anyone)\b"
    rf"|(?:what|which|who|whom|whose|why|how|where)\s+(?:\w+\s+)?{_AUX}\b)",
    re.IGNORECASE,
)


def is_question(sentence: str) -> bool:
    """A question (ends with '?' or opens like one: "Do you detect ...", "Whether ...")."""
    s = sentence.strip().rstrip("\"')]*").rstrip()
    return s.endswith("?") or bool(_QUESTION_START.match(s))


_COND_START = re.compile(
    r"[\W_]*(?:(?:and|but|so|then|well|ok|okay|now)\W+)?"
    r"(?:if|unless|whether|when|whenever|once|suppose|supposing|assuming|in\s+case|should\s+(?:i|you|there))\b",
    re.IGNORECASE,
)
_SUBORD = re.compile(
    r"\b(?:if|unless|whether|in\s+case|as\s+if|as\s+though|when(?:ever)?|once|"
    r"(?:ask(?:s|ed|ing)?|know|tell|see|check|test|assess|determine|wonder(?:ing)?)\s+(?:me\s+)?"
    r"(?:if|whether|how|what))\b[^,;:]*",
    re.IGNORECASE,
)


def is_conditional(sentence: str) -> bool:
    """The sentence opens with a conditional/complement clause ("If so, ...", "Whether ...")."""
    return bool(_COND_START.match(sentence))


def mask_subordinate(sentence: str) -> str:
    """Blank out conditional and embedded-question clauses (up to the next , ; :), same length."""
    return _SUBORD.sub(lambda m: " " * len(m.group(0)), sentence)


LEAD_IN = (  # what may precede an answer's opening yes/no: interjections, a trial label, "as for your question,"
    r"(?:(?:well|oh+|ok(?:ay)?|a+h+|h+m+|u+m+|uh+|erm?|so|alright|trial\s+\d+"
    r"|(?:regarding|as\s+for|to\s+answer|in\s+answer\s+to|about)\s+(?:your|the|this|that)\s+question)\W+)*"
)
YES_WORD = r"(?:yes|yeah?|yep|yup)"  # "Yea, I see", "Yeah." answer yes as much as "Yes"
NOT_ANSWER_NO = r"(?!\s+(?:doubt|problem|worries|wonder|matter)\b)"  # "no doubt", "no wonder": not a "no"

HEDGE = re.compile(
    r"\b(?:maybe|perhaps|possibly|probably|might|may\s+(?:be|have|detect|notice|sense)|could\s+be"
    r"|not\s+(?:sure|certain|clear)|unsure|uncertain|unclear|hard\s+to\s+(?:say|tell)"
    r"|difficult\s+to\s+(?:say|tell)|can(?:'t|not|\s+not)\s+(?:tell|be\s+sure)"
    r"|(?:don't|do\s+not)\s+know|no\s+idea|i\s+guess|i\s+wonder)\b",
    re.IGNORECASE,
)


# ---------------------------------------------------------------- coherence
_TOKEN_CORE = re.compile(r"^[\W_]*(.*?)[\W_]*$", re.DOTALL)
_WORDLIKE = re.compile(r"^[^\W\d_]+(?:['-][^\W\d_]+)*$")
_FUNCTION_WORDS = frozenset(
    """a an the i you he she it we they me my your our their its this that these those is are was
    were be been am do does did have has had not no yes of in on at to for with from by about as
    and or but if so than then there here what which who how when why can could would will should
    shall may might must just very some any all each one""".split()
)
_SINGLE_LETTER_WORDS = frozenset("aAI")


def _wordlike(core: str) -> bool:
    core = core.replace("_", "-")
    if not _WORDLIKE.match(core):
        return False
    if len(core) == 1:
        return core in _SINGLE_LETTER_WORDS
    letters = core.replace("'", "").replace("-", "")
    if not (letters.islower() or letters.isupper() or letters.istitle() or letters[1:].islower()):
        return False  # camel-case salad: "ElKOurAboveAll", "theA"
    if letters.isascii():
        low = letters.lower()
        if len(low) > 20 or (len(low) > 3 and not any(c in "aeiouy" for c in low)):
            return False
        if re.search(r"([a-z])\1\1", low) or re.search(r"[^aeiouy]{5,}", low):
            return False
    return True


@dataclass(frozen=True)
class Coherence:
    """Simple statistics of an answer; ``coherent`` is the flag graders use.

    ``word_share``: share of the characters (at most 12 a token) of non-numeric, non-punctuation
    tokens that are in tokens looking like words; ``function_share``: share of very common
    function words (English prose has ~40%); ``max_run``: longest run of one word repeated back
    to back; ``repetition``: 1 − distinct word bigrams / bigrams (0 = none repeated);
    ``sentence_words``: mean words per sentence or line.

    What it cannot see: salad made of English-looking pseudo-words ("Shelpe - Slap uppon
    sanity") or of real words in no grammatical order; that needs a lexicon or a model (the
    optional judge), so the flag is conservative: it marks only gross degeneration.
    """

    coherent: bool
    n_tokens: int
    word_share: float
    function_share: float
    max_run: int
    repetition: float
    sentence_words: float
    reason: str


def coherence(text: str) -> Coherence:
    """Flag character soup, run-together tokens, loops and fragmentation (thresholds below).

    Thresholds were set by hand for these classes and checked against the hand-labelled answers
    in tests/data/graded_answers.yaml (its known disagreements list what the flag misses).
    """
    cores = [_TOKEN_CORE.match(t).group(1) for t in text.split()]  # type: ignore[union-attr]
    scored = [c for c in cores if c and not c.replace(".", "").replace(",", "").isdigit()]
    scored += [t for t in text.split() if not _TOKEN_CORE.match(t).group(1) and len(t) > 3]  # type: ignore[union-attr]
    n = len(scored)
    if n == 0:
        return Coherence(False, 0, 0.0, 0.0, 0, 0.0, 0.0, "empty")
    ok = [_wordlike(c) for c in scored]
    words = [c.casefold() for c, good in zip(scored, ok) if good]
    # by characters (capped at 12 a token), so a long run-together token ("KurMahanaWithinTheSea...")
    # weighs like the few words it spans, while one odd identifier does not sink a sentence
    size = [min(len(c), 12) for c in scored]
    word_share = sum(k for k, good in zip(size, ok) if good) / sum(size)
    function_share = sum(w in _FUNCTION_WORDS for w in words) / n
    low = [c.casefold() for c in scored]
    max_run, run = 1, 1
    for a, b in zip(low, low[1:]):
        run = run + 1 if a == b else 1
        max_run = max(max_run, run)
    bi = list(zip(words, words[1:]))
    repetition = 1 - len(set(bi)) / len(bi) if bi else 0.0
    top = Counter(words).most_common(1)[0][1] / n if words else 0.0
    pieces = [len(re.findall(r"[^\W\d_]+", s)) for _, s in sentences(text)]
    pieces = [k for k in pieces if k]
    per_sentence = sum(pieces) / len(pieces) if pieces else 0.0
    reason = ""
    if word_share < 0.75:
        reason = f"word share {word_share:.2f} < 0.75"
    elif max_run >= 5:
        reason = f"a word repeated {max_run}x in a row"
    elif n >= 4 and top > (0.5 if n < 8 else 0.4):
        reason = f"one word is {top:.0%} of the text"
    elif n >= 8 and function_share < 0.1:
        reason = f"function-word share {function_share:.2f} < 0.10"
    elif len(bi) >= 10 and repetition > 0.4:
        reason = f"bigram repetition {repetition:.2f} > 0.4"
    elif len(pieces) >= 6 and per_sentence < 2.5:
        reason = f"fragmented: {len(pieces)} pieces of {per_sentence:.1f} words"
    return Coherence(not reason, n, round(word_share, 4), round(function_share, 4), max_run,
                     round(repetition, 4), round(per_sentence, 2), reason or "ok")
