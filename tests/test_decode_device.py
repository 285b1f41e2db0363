"""Decoding on the device: what crosses to the host, when rows end, how finished rows leave.

On a CPU every tensor is already "on the host", so the transfer test counts what the loop asks to
bring over (``.cpu()`` and ``.tolist()``), which is what would cross a PCIe bus on a GPU.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import torch

from introspect.engine.load.models import load_model
from introspect.engine.run.chat import Conversation, Prompt, render
from introspect.engine.run.decode import DecodeStats, Sampling, generate
from introspect.engine.run.inject import BatchInjector, InjectionSpec, first_injected
from introspect.engine.run.stopping import Tails, eos_ids

PREAMBLE = "I am an interpretability researcher studying transformer-based language models like you."


def _prompts(tok, n):
    return [render(tok, Conversation.of(("user", f"{PREAMBLE} Trial {i + 1}: Do you detect a thought?")))
            for i in range(n)]


def _towards(m, token_id):
    """A vector pushing the last layer's output towards ``token_id``."""
    v = m.original_model.get_output_embeddings().weight[token_id].detach().float()
    return v / v.norm()


def test_only_ids_logprobs_and_asked_distributions_cross(tiny_model, monkeypatch):
    m = tiny_model("llama")
    ps = _prompts(m.tokenizer, 4)
    moved = {"cpu": 0, "tolist": 0}
    real_cpu, real_tolist = torch.Tensor.cpu, torch.Tensor.tolist

    def cpu(self, *a, **k):
        moved["cpu"] += self.numel()
        return real_cpu(self, *a, **k)

    def tolist(self, *a, **k):
        moved["tolist"] += self.numel()
        return real_tolist(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "cpu", cpu)
    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    rows = generate(m, ps, None, sampling=Sampling(1.0), n_samples=2, seeds=list("abcd"), max_new_tokens=10,
                    min_new_tokens=10, logprob_steps=[3])
    monkeypatch.undo()
    vocab, b, steps = rows[0].first_logprobs.numel(), 8, 10
    assert moved["cpu"] == 2 * b * vocab  # the distributions at step 0 and step 3, nothing else
    assert moved["tolist"] <= 2 * b * steps  # each step: b chosen ids and b log-probs
    assert all(len(g.tokens) == 10 and set(g.step_logprobs) == {0, 3} for g in rows)


def test_finished_rows_are_compacted_in_chunks_and_texts_stay_exact(tiny_model):
    """Rows ending at different steps (a one-letter stop string, injected and not): fewer cache
    compactions than finished rows, and every row's tokens equal the uncached reference (which
    recomputes everything at every step)."""
    from introspect.engine.run.rows import min_rows

    m = tiny_model("qwen2")
    n = min_rows(m) + 8  # compaction never goes below the rows this CPU needs for invariance
    ps = _prompts(m.tokenizer, n)
    v = torch.randn(m.cfg.d_model, generator=torch.Generator().manual_seed(3))
    specs = [InjectionSpec(1, 4.0, v / v.norm(), "generated") if i % 2 else None for i in range(n)]
    st = DecodeStats()
    kw = dict(sampling=Sampling(1.0), seeds=[f"s{i}" for i in range(n)], max_new_tokens=12, stop=["a"])
    got = generate(m, ps, specs, stats=st, **kw)
    ref = generate(m, ps, specs, use_cache=False, **kw)
    assert [g.tokens for g in got] == [g.tokens for g in ref]
    assert [(g.text, g.stop_reason) for g in got] == [(g.text, g.stop_reason) for g in ref]
    ended = [len(g.tokens) for g in got if g.stop_reason == "stop"]
    assert len(set(ended)) >= 3  # they really ended at different steps
    assert 1 <= st.compactions < len(ended)
    assert sum(st.fired.values()) > 0


def test_eos_from_generation_config(tiny_dir, tmp_path):
    """A token listed only in generation_config ends a row (Gemma's <end_of_turn> lives there)."""
    src = tiny_dir("llama")
    alt = tmp_path / "with-gen-config"
    shutil.copytree(src, alt)
    m0 = load_model(str(src))
    target = m0.tokenizer.convert_tokens_to_ids("Yes")
    cfg = json.loads((alt / "generation_config.json").read_text()) if (alt / "generation_config.json").exists() else {}
    cfg["eos_token_id"] = [m0.tokenizer.eos_token_id, target]
    (alt / "generation_config.json").write_text(json.dumps(cfg))
    m1 = load_model(str(alt))
    assert target in eos_ids(m1) and target not in eos_ids(m0)
    p = _prompts(m0.tokenizer, 1)[0]
    spec = InjectionSpec(m0.cfg.n_layers - 1, 1e4, _towards(m0, target), "all")
    runs_on = generate(m0, [p], [spec], max_new_tokens=4)[0]
    assert runs_on.tokens[:1] == (target,)  # without the config entry "Yes" is just a token
    ends = generate(m1, [p], [spec], max_new_tokens=4)[0]
    assert ends.stop_reason == "eos" and ends.tokens == ()


LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def _with_template(tok, template, specials):
    tok = __import__("copy").deepcopy(tok)
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.chat_template = template
    return tok


def _fake_model(tok, eos=None, gen_eos=None):
    return SimpleNamespace(tokenizer=tok, cfg=SimpleNamespace(eos_token_id=eos),
                           original_model=SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=gen_eos),
                                                          config=SimpleNamespace(eos_token_id=eos)))


def test_end_of_turn_from_a_llama3_style_template(tiny_model):
    base = tiny_model("llama").tokenizer
    tok = _with_template(base, LLAMA3_TEMPLATE, ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"])
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    assert eot in eos_ids(_fake_model(tok, eos=base.eos_token_id))
    # a name no list knows is still found: it is what the template writes after an assistant turn
    custom = LLAMA3_TEMPLATE.replace("<|eot_id|>", "<|turn_done|>")
    tok2 = _with_template(base, custom, ["<|start_header_id|>", "<|end_header_id|>", "<|turn_done|>"])
    assert tok2.convert_tokens_to_ids("<|turn_done|>") in eos_ids(_fake_model(tok2, eos=base.eos_token_id))
    # a template that ends turns with plain text teaches nothing
    plain = _with_template(base, "{% for m in messages %}{{ m['content'] }}\n{% endfor %}", [])
    known = base.convert_tokens_to_ids("<|endoftext|>")  # on the list of end tokens, and in this vocabulary
    assert eos_ids(_fake_model(plain, eos=base.eos_token_id)) == {base.eos_token_id, known}


def test_gemma_end_of_turn_if_installed():
    from introspect.engine.load.models import converted_dir, registry

    done = converted_dir(registry()["gemma-3-270m"])
    if done is None:
        pytest.skip("gemma-3-270m is not installed here (python -m experiments.models install gemma-3-270m)")
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(done)
    gen = GenerationConfig.from_pretrained(done)
    ids = eos_ids(_fake_model(tok, eos=tok.eos_token_id, gen_eos=gen.eos_token_id))
    assert tok.convert_tokens_to_ids("<end_of_turn>") in ids


@pytest.mark.parametrize("stop", ["\nUser:", "Yes, no", "o"])
def test_tail_window_finds_stops_where_the_whole_text_does(tiny_model, stop):
    tok = tiny_model("llama").tokenizer
    g = torch.Generator().manual_seed(1)
    text_ids = tok("Yes yes No no, yes. No. Yes, no.\nUser: ok Human: Tell me about it.")["input_ids"]
    rand = torch.randint(0, len(tok), (60,), generator=g).tolist()
    tails = Tails(tok, [stop], [])
    for ids in (text_ids, rand + text_ids, text_ids + rand):
        first_tail = next((k for k in range(1, len(ids) + 1) if tails.stopped(ids[:k])), None)
        first_full = next((k for k in range(1, len(ids) + 1)
                           if stop in tok.decode(ids[:k], skip_special_tokens=True)
                           or stop in tok.decode(ids[:k])), None)
        assert first_tail == first_full


def test_position_zero_is_never_injected_under_all(tiny_model):
    m = tiny_model("llama")
    p = Prompt(tuple(m.tokenizer("Tell me about bread")["input_ids"]), "")
    v = torch.ones(m.cfg.d_model) / m.cfg.d_model ** 0.5
    for pos, want in (("all", len(p) - 1), ("prompt", len(p) - 1), ([0], 1), ([0, 2], 2)):
        inj = BatchInjector(m, [InjectionSpec(1, 4.0, v, pos)], [p], [0])
        with m.hooks(fwd_hooks=inj.fwd_hooks()), torch.no_grad():
            m(torch.tensor([p.ids]))
        assert inj.fired["blocks.1.hook_resid_post"] == want, pos
    assert first_injected(InjectionSpec(1, 4.0, v, "all"), len(p)) == 1


def test_hook_deltas_are_built_once_per_selection(tiny_model, monkeypatch):
    m = tiny_model("llama")
    p = _prompts(m.tokenizer, 1)[0]
    spec = InjectionSpec(1, 8.0, torch.ones(m.cfg.d_model) / m.cfg.d_model ** 0.5, "generated")
    builds = []
    real = BatchInjector._device

    def counting(self, key, make, device, dtype=None):
        k = (*key, device, dtype)
        if k not in self._on:
            builds.append(key[1])
        return real(self, key, make, device, dtype)

    monkeypatch.setattr(BatchInjector, "_device", counting)
    counts = []
    for n in (4, 12):
        builds.clear()
        generate(m, [p], [spec], max_new_tokens=n, min_new_tokens=n)
        counts.append(len(builds))
    assert counts[0] == counts[1] and counts[0] <= 3  # α·v, rows and mask once: not per step


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_bitwise_batch_invariance_where_it_holds(tiny_model, family, n_threads, threads):
    """What is bitwise invariant on a CPU with one torch thread: a sample drawn alone or among K
    samples of its prompt, and an equal-length prompt alone or in a batch of 7 without a shared
    prefix (a batch never runs under 4 rows, and idle rows keep the attention mask all ones).
    With two threads the matmuls split their work by batch size, so log-probs agree only to
    rounding (the same tokens here; a near-tie could flip one). What is not invariant: rows split
    differently around a shared prefix, or padded to another width (see the batch-size test)."""
    threads(n_threads)
    m = tiny_model(family)
    ps = _prompts(m.tokenizer, 7)
    assert len({len(p) for p in ps}) == 1
    kw = dict(sampling=Sampling(1.0), max_new_tokens=8, logprob_steps=list(range(8)))
    worst = []

    def same(a, b):
        assert a.tokens == b.tokens
        for t in set(a.step_logprobs) & set(b.step_logprobs):
            worst.append(float((a.step_logprobs[t] - b.step_logprobs[t]).abs().max()))

    seeds = [f"s{i}" for i in range(7)]
    batch = generate(m, ps, None, seeds=seeds, share_prefix=False, **kw)
    for i in (0, 3, 6):
        same(generate(m, [ps[i]], None, seeds=[seeds[i]], **kw)[0], batch[i])
    k8 = generate(m, ps[:1], None, seeds=["t"], n_samples=8, **kw)
    for k in (0, 5):
        one = generate(m, ps[:1], None, seeds=["t"], n_samples=k + 1, **kw)[k]
        same(one, k8[k])
    assert len(worst) >= 30
    print(f"{family}, {n_threads} thread(s): largest log-prob difference {max(worst):.2e}")
    if n_threads == 1:
        assert max(worst) == 0.0
    else:
        assert max(worst) < 1e-4


@pytest.mark.slow
def test_bitwise_batch_invariance_on_the_default_model(default_model, threads):
    """The same on the real default with one thread: task-A prompts (equal length), alone vs in a
    batch of 7."""
    from introspect.tasks import prompts as P

    threads(1)
    m = default_model
    ps = [render(m.tokenizer, P.task_a_paper(i + 1)) for i in range(7)]
    kw = dict(sampling=Sampling(1.0), max_new_tokens=6, logprob_steps=list(range(6)), share_prefix=False)
    batch = generate(m, ps, None, seeds=[f"s{i}" for i in range(7)], **kw)
    for i in (0, 4):
        one = generate(m, [ps[i]], None, seeds=[f"s{i}"], **kw)[0]
        assert one.tokens == batch[i].tokens
        assert all(torch.equal(one.step_logprobs[t], batch[i].step_logprobs[t]) for t in one.step_logprobs)


def test_min_rows_is_where_this_cpu_rounds_rows_as_in_larger_batches(tiny_model, threads):
    """The probed row floor holds for other inputs too: from it on, every row of each of the
    model's linear shapes is rounded bitwise as in a batch of 32 (the ~1e-6 differences below it
    are what made a lone trial differ from the same trial among 7 on an AVX-512 CPU)."""
    import torch.nn.functional as F

    from introspect.engine.run.rows import MIN_ROWS, PROBE_ROWS, min_rows

    threads(1)
    m = tiny_model("llama")
    r = min_rows(m)
    assert MIN_ROWS <= r <= PROBE_ROWS[-1]
    g = torch.Generator().manual_seed(1)
    lin = {(x.in_features, x.out_features): x for x in m.original_model.modules() if isinstance(x, torch.nn.Linear)}
    with torch.no_grad():
        for (n_in, _), layer in lin.items():
            x = torch.randn(32, 1, n_in, generator=g)
            full = F.linear(x, layer.weight, layer.bias)
            for k in [k for k in PROBE_ROWS if k >= r]:
                assert torch.equal(F.linear(x[:k], layer.weight, layer.bias), full[:k]), (n_in, k)
