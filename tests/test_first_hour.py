"""A quiet first hour: no deprecation warning from this toolkit's own calls into transformers."""

from __future__ import annotations

import warnings

from introspect import Conversation, generate, render
from introspect.engine.run.decode import next_token_logprobs


def test_decoding_raises_no_future_warning(tiny_model):
    """``past_key_values=`` warns a FutureWarning in transformers 5.x (removed in 5.40): the
    decode loop passes the cache under the name the model class uses."""
    m = tiny_model("llama")
    p = render(m.tokenizer, Conversation.of(("user", "Hello there")))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        g = generate(m, [p, p], max_new_tokens=4)
        next_token_logprobs(m, [p])
    assert len(g) == 2 and all(x.tokens for x in g)


class _Log(list):
    """A stream that is not a terminal (a log file)."""

    def write(self, s: str) -> None:
        self.append(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_progress_lines_in_a_log_every_5_percent_or_30_seconds():
    from introspect.tasks.runner import LogProgress, _progress

    now = [0.0]
    log = _Log()
    p = LogProgress(200, log, clock=lambda: now[0])
    p.set_description("A")
    for _ in range(9):  # 9 trials in 9 s: below 5% (10 trials) and below 30 s, no line yet
        now[0] += 1.0
        p.update()
    assert "".join(log) == ""
    now[0] += 1.0
    p.update()  # the 10th trial: 5%
    lines = "".join(log).splitlines()
    assert lines == ["A: 10/200 trials (5%), 1.00 trials/s, ETA 3m10s"]
    now[0] += 40.0
    p.update()  # 30 s passed since the last line
    assert "".join(log).splitlines()[-1] == "A: 11/200 trials (6%), 0.22 trials/s, ETA 14m19s"
    p.close()  # nothing new since: no duplicate line
    assert len("".join(log).splitlines()) == 2
    assert isinstance(_progress(5, True, _Log()), LogProgress)
    assert not isinstance(_progress(5, False, _Log()), LogProgress)


def test_injection_tasks_without_layers_use_a_stated_default():
    from experiments.settings import task_config
    from introspect.tasks.runner import default_layers

    assert default_layers(30) == (17, 19, 21)  # SmolLM2-135M: around 2/3 of 30 layers
    assert default_layers(24) == (13, 15, 17)
    assert default_layers(4) == (1, 2)  # a tiny model: interior layers only
    assert task_config({"tasks": ["A"]}, 30).layers == (17, 19, 21)
    assert task_config({"tasks": ["A"], "layers": [5]}, 30).layers == (5,)
    assert task_config({"tasks": ["A"], "layers_grid": 2}, 30).layers != (17, 19, 21)
    assert task_config({"tasks": ["A"], "layers": []}, 30).layers == ()  # given empty: refused later
