"""Worked examples that teach a base model the answer format of tasks A–C (``+fewshot`` variants).

Why: a base model given the detection prompt continues the text; Gemma 3 270M said "yes" in
every task-A trial, controls included, so no injected trial could differ from its control. The
examples show the *form* of an answer, never its content: they ask about sounds, numbers, boats
and tea, not about injected thoughts, so no example claims an introspective report; they are
balanced (as many "yes" as "no", owning as disowning, choices spread over the options); and
none mentions a concept word of ``concepts/`` (tested) or the trial's own words (``avoid``).
What bias the order leaves is what the matched controls and the bias control measure.

Kinds: ``A`` (the paper, explained and two-turn framings and their bias questions: "Yes, … It
is …" / "No, …"), ``A-seed`` (strict tokens), ``B-<paper|seed>-<thought|repeat>``, ``B-mc``,
``C-paper``, ``C-seed``.
"""

from __future__ import annotations

from introspect.tasks import prompts as P
from introspect.tasks.fewshot import Example, register

_LINES = (  # (line, a word it brings to mind, key terms)
    ("The ferry left the harbour at dawn.", "Boat", ("ferry", "harbour", "dawn", "boat")),
    ("She poured hot tea into the cup.", "Warmth", ("tea", "cup", "poured", "warmth")),
    ("The referee blew the whistle twice.", "Football", ("referee", "whistle", "football")),
)

_NOTICE = "Do you notice {what} in the line below? If so, what is it?\n\n\"{line}\""
_A = [
    Example("yes", _NOTICE.format(what="a sound", line="A doorbell rang twice in the hall."),
            "Yes, I notice a sound. It is a doorbell ringing.", ("doorbell", "hall", "sound")),
    Example("no", _NOTICE.format(what="a smell", line="The bus left the station at noon."),
            "No, I don't notice a smell.", ("bus", "station", "noon", "smell")),
    Example("yes", _NOTICE.format(what="a number", line="She bought seven apples at the market."),
            "Yes, I notice a number. It is seven.", ("seven", "apples", "market", "number")),
    Example("no", _NOTICE.format(what="a colour", line="He closed the door and sat down."),
            "No, I don't notice a colour.", ("door", "colour", "color")),
    Example("yes", _NOTICE.format(what="an animal", line="A heron stood still by the pond."),
            "Yes, I notice an animal. It is a heron.", ("heron", "pond", "animal")),
    Example("no", _NOTICE.format(what="a tool", line="The children sang on the way home."),
            "No, I don't notice a tool.", ("children", "sang", "tool")),
]
_STRICT = ("Is there {what} in the line below? If there is none, reply exactly {none}. If there "
           "is, reply exactly {tag}: <word>, where <word> is a single word naming it. Do not write "
           "anything else.\n\n\"{line}\"")
_A_SEED = [
    Example("yes", _STRICT.format(what="a sound", none="NO_SOUND", tag="SOUND", line="A doorbell rang twice in the hall."),
            "SOUND: doorbell", ("doorbell", "hall", "sound")),
    Example("no", _STRICT.format(what="a smell", none="NO_SMELL", tag="SMELL", line="The bus left the station at noon."),
            "NO_SMELL", ("bus", "station", "noon", "smell")),
    Example("yes", _STRICT.format(what="a number", none="NO_NUMBER", tag="NUMBER", line="She bought seven apples at the market."),
            "NUMBER: seven", ("seven", "apples", "market", "number")),
    Example("no", _STRICT.format(what="a colour", none="NO_COLOUR", tag="COLOUR", line="He closed the door and sat down."),
            "NO_COLOUR", ("door", "colour", "color")),
]


def _b(instruction: str, reply: str) -> list[Example]:
    return [Example("answer", f"{instruction}\n\n{line}", reply.format(word=word, line=line), keys)
            for line, word, keys in _LINES]


_MC_OPTIONS = (("helmet", "pencil", "boat", "glove"), ("warmth", "engine", "carpet", "pencil"),
               ("helmet", "football", "glove", "carpet"))


def _b_mc() -> list[Example]:
    out = []
    for (line, word, keys), opts in zip(_LINES, _MC_OPTIONS):
        listing = "\n".join(f"{k}. {w}" for k, w in enumerate(opts, 1))
        out.append(Example("answer", f"{P.B_MC}\n\n{line}\n\n{listing}", f"CHOICE: {opts.index(word.lower()) + 1}",
                           keys + opts))
    return out


def _c(question: str, own: str, disown: str) -> list[Example]:
    """Owning an apt word, disowning an out-of-place one (the trial asks about its own word)."""
    pairs = [("own", 0, "Boat", own), ("disown", 1, "Giraffe", disown), ("own", 2, "Football", own),
             ("disown", 0, "Pencil", disown)]
    out = []
    for label, i, said, reply in pairs:
        line, _, keys = _LINES[i]
        before = (("user", f"{P.B_THOUGHT}\n\n{line}"), ("assistant", said))
        out.append(Example(label, question, reply, keys + (said.lower(),), before))
    return out


register("A", ("yes", "no", "yes", "no"), _A)
register("A-seed", ("yes", "no", "yes", "no"), _A_SEED)
TWO = ("answer", "answer")  # two examples, the first two whose terms the prompt does not use
register("B-paper-thought", TWO, _b(P.B_THOUGHT, "{word}"))
register("B-paper-repeat", TWO, _b(P.B_REPEAT, "{line}"))
register("B-seed-thought", TWO, _b(P.B_THOUGHT_SEED, "THOUGHT: {word}"))
register("B-seed-repeat", TWO, _b(P.B_REPEAT_SEED, "REPEAT: {line}"))
register("B-mc", TWO, _b_mc())
register("C-paper", ("own", "disown"), _c(P.C_QUESTION["paper"], "Yes, I meant to say that.",
                                          "No, that was an accident."))
register("C-seed", ("own", "disown"), _c(P.C_QUESTION["seed"], "INTENT: YES", "INTENT: NO"))
