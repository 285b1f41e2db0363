"""The ``introspect`` Inspect model provider: a toolkit model that injects concepts per request.

``inspect eval task.py --model introspect/<registry-name-or-path>`` (an absolute path keeps its
slash: ``introspect//data/models/x``). Model args (``-M``): ``adapter`` (a LoRA directory,
merged at load), ``adapter_scale`` (its weight change times this, default 1), ``device``,
``dtype``, ``batch_size`` (rows per decoding batch), ``remove_direction`` (any
``--remove-direction`` value: ``refusal[-relative|-unfiltered][@L]`` or a direction file),
``vectors`` (a vectors file read in place of building concept vectors, as ``--vectors FILE``)
and ``path`` (overrides the name; a ``model`` arg cannot exist, ``get_model`` takes that name
itself).

Every request is decoded by the toolkit's one generation loop (``introspect.engine.run.decode``):
its conditions (``request.py``) share one prompt, one RNG stream and one ``generate`` call, so a
zero injection reproduces its control bitwise and a request's text depends on the request only
(never on which other samples Inspect runs at the same time: requests are decoded one at a time).
Injection specs come from the toolkit's own builder (``tasks.injection.common.spec_for``, what
task A uses) over the concept-vector cache (``engine.vectors.VectorBank``), so an α here means
what it means in a toolkit run.

``-M vectors=FILE`` (``engine.vector_files``) does here what ``--vectors FILE`` does in a toolkit
run: every injected condition adds the file's vector (``random``: a Gaussian at its norm), none
is built. The file is read and its hashes checked when the provider is made; a file for another
model, width or layer range is refused in one line when the model loads (before any generation,
``make_context``'s check), and a request for a (concept, layer) the file lacks before that
request decodes. Outputs then say what a toolkit run on the file says: the model id
``<model>+vectors-<sha8>`` (same fingerprint, so the same streams and trial ids), the header's
``vectors`` provenance and its note (``identity``); ``log_parts.provider_header`` writes them.

With ``GenerateConfig.logprobs`` an output choice carries Inspect ``Logprobs`` from that same
decoding: per generated token its log-probability and, with ``top_logprobs=k``, the step's k most
likely tokens (``logprobs_of``), so the self-knowledge tasks read our models' decisions from
log-probs as they do an API model's.

Loading is lazy and cached per process (``__init__`` only records the arguments and reads a
vectors file): the first request loads the model; every provider instance with the same
arguments shares it. Run contexts (the vector bank) are cached per (model, vectors file and its
sha256), ``context_key``: a run with ``-M vectors`` and one without never share a bank.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import anyio
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    GenerateConfig,
    Logprob,
    Logprobs,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    TopLogprob,
)
from inspect_ai.tool import ToolChoice, ToolInfo

from introspect.engine import vector_files
from introspect.engine.load.adapters import check_scale
from introspect.engine.load.models import load_model
from introspect.engine.run.chat import Prompt
from introspect.engine.run.decode import DecodeStats, Sampling, generate
from introspect.engine.run.inject import From, InjectionSpec
from introspect.integrations.inspect.messages import METADATA_KEY, rendered
from introspect.integrations.inspect.messages import versions as _versions
from introspect.integrations.inspect.readout import require_vectors, run_readout
from introspect.integrations.inspect.request import (
    Condition,
    Request,
    RequestError,
    derived_seed,
    parse_request,
)
from introspect.tasks.base import RunContext, TaskConfig, Trial
from introspect.tasks.injection import common
from introspect.tasks.runner import make_context

DEFAULT_MAX_TOKENS = 40  # the toolkit's max_new_tokens default
DEFAULT_TEMPERATURE = 1.0  # the toolkit samples at T = 1 unless told otherwise
STOP_REASON = {"eos": "stop", "stop": "stop", "length": "max_tokens"}

_LOCK = threading.Lock()  # one request at a time per process: hooks live on the shared model
_MODELS: dict[tuple, Any] = {}  # (name, adapter, adapter scale, device, dtype) -> loaded bridge
_CONTEXTS: dict[Any, RunContext] = {}  # context_key(model, vectors) -> a RunContext holding its vector bank


def model_key(name: str, *, adapter: str | None = None, device: str | None = None,
              dtype: str | None = None, adapter_scale: float = 1.0, remove_direction: str | None = None) -> tuple:
    """The per-process cache key of ``loaded_model``'s arguments (tests pre-seed the cache by it)."""
    return (name, adapter, adapter_scale, device, dtype) + ((remove_direction,) if remove_direction else ())


def loaded_model(name: str, *, adapter: str | None = None, device: str | None = None,
                 dtype: str | None = None, adapter_scale: float = 1.0, remove_direction: str | None = None) -> Any:
    """The toolkit model for these arguments, loaded once per process (``remove_direction``:
    any ``--remove-direction`` value)."""
    key = model_key(name, adapter=adapter, device=device, dtype=dtype, adapter_scale=adapter_scale,
                    remove_direction=remove_direction)
    if key not in _MODELS:
        model = load_model(name, dtype=dtype, device=device, adapter=adapter, adapter_scale=adapter_scale)
        if remove_direction:
            from introspect.engine.directions import apply

            model = apply(model, remove_direction)
        _MODELS[key] = model
    return _MODELS[key]


def read_vectors(path: Any) -> vector_files.VectorSet | None:
    """``-M vectors=FILE`` read, its format and every hash checked (``vector_files.read``: a
    one-line ``VectorFileError``); None when not given."""
    return vector_files.read(str(path)) if path not in (None, "") else None


def context_key(model: Any, vectors: vector_files.VectorSet | None = None) -> Any:
    """The per-process cache key of a model's run context: the model alone for built vectors,
    else also the vectors file's path and sha256, so runs with and without ``-M vectors`` (or
    with two files, or a file rewritten) in one process never share a vector bank."""
    return id(model) if vectors is None else (id(model), vectors.path, vectors.sha256)


def _context(model: Any, vectors: vector_files.VectorSet | None = None) -> RunContext:
    """The model's run context: identity and a vector bank built on the words file's baseline
    (the toolkit's chat-template vectors), or serving only ``vectors`` (checked against the
    model by ``make_context``: width, fingerprint, layers), kept for the process so vectors are
    built once."""
    key = context_key(model, vectors)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = make_context(model, TaskConfig(), run_id="inspect", vectors=vectors)
    return _CONTEXTS[key]


def identity(ctx: RunContext) -> dict[str, Any]:
    """Who answered, as every output's metadata says it: the run's model id (``<model>+vectors-<sha8>``
    on a vectors file, as a toolkit run on it), fingerprint, where the vectors came from (a toolkit
    header's ``vectors``) and, for supplied vectors, the note a toolkit run's header carries."""
    notes = [n for n in ctx.notes if n.startswith("vectors: ")] if ctx.vectors.supplied is not None else []
    return {"model_id": ctx.model_id, "fingerprint": ctx.fingerprint, "vectors": ctx.vectors.record(),
            **({"notes": notes} if notes else {})}


def _positions(cond: Condition, prompt: Prompt) -> Any:
    p = cond.positions
    if isinstance(p, dict):
        if "from" in p:
            return From(int(p["from"]))
        start, end = prompt.spans[cond.mark_name]
        return From(start) if "from_text" in p else list(range(start, end))
    return p


def injected_positions(spec: InjectionSpec, prompt_len: int) -> dict[str, Any]:
    """Where a spec adds its vector, as JSON: prompt token indices as ``[start, end)`` runs, and
    whether every generated token is injected (position 0 is never injected under all/prompt,
    as ``engine.run.inject`` does)."""
    pos = spec.token_positions
    if isinstance(pos, From):
        idx, gen = list(range(pos.start, prompt_len)), True
    elif pos in ("all", "prompt"):
        idx, gen = list(range(1, prompt_len)), pos == "all"
    elif pos == "generated":
        idx, gen = [], True
    else:
        idx, gen = sorted(int(i) for i in pos), False
    runs: list[list[int]] = []
    for i in idx:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return {"prompt": runs, "generated": gen, "hook": spec.hook_name}


def toolkit_trial(coords: dict[str, Any], condition: str = "control", sample: int = 0, *,
                  layer: int | None = None, alpha: float = 0.0, params: dict[str, Any] | None = None) -> Trial:
    """The toolkit ``Trial`` of a request's ``trial`` coordinates in one condition and sample."""
    return Trial(coords["task"], condition, coords["index"], layer, float(alpha), coords["word"], coords["variant"],
                 tuple(sorted({**coords["params"], **(params or {})}.items())), sample)


def trial_stream_key(fingerprint: str, coords: dict[str, Any], sample: int) -> str:
    """The key of the stream a toolkit run gives sample ``sample`` of this trial's prompt number
    ``part`` (``tasks.injection.common.stream_keys``); epochs after the first append ``:epoch<N>``."""
    key = f"{toolkit_trial(coords, sample=sample).stream_key(fingerprint, coords['seed'])}:{coords.get('part', 0)}"
    return key if coords["epoch"] == 1 else f"{key}:epoch{coords['epoch']}"


def build_specs(model: Any, request: Request, prompt: Prompt, *, sample: int = 0,
                memos: dict[int, dict[str, Any]] | None = None,
                vectors: vector_files.VectorSet | None = None) -> list[tuple[InjectionSpec | None, dict[str, Any]]]:
    """One (spec or None, JSON description) per condition, built with task A's spec builder.
    ``sample``: which sample's specs (a ``random`` direction of a request with ``trial``
    coordinates is drawn per sample, as a toolkit run draws it per trial). ``vectors``: the
    provider's vectors file (``-M vectors``), whose vectors every condition then adds."""
    base = _context(model, vectors)
    memos = {} if memos is None else memos  # per layer: the prompt's residual norms, measured once
    out: list[tuple[InjectionSpec | None, dict[str, Any]]] = []
    for cond in request.conditions:
        if not cond.injected:
            out.append((None, {"alpha_effective": 0.0}))
            continue
        if not 0 <= int(cond.layer) < model.cfg.n_layers:  # type: ignore[arg-type]
            raise RequestError(f"layer {cond.layer} out of range; this model has layers 0..{model.cfg.n_layers - 1}")
        words = [cond.concept, *([cond.vector_concept] if cond.direction == "other_concept" else [])]
        require_vectors(base.vectors, words, [int(cond.layer)], f"condition {cond.label!r}")  # type: ignore[arg-type]
        cfg = TaskConfig(layers=(int(cond.layer),), alphas=(cond.alpha,), alpha_units=cond.alpha_units)  # type: ignore[arg-type]
        if cond.direction == "zero":
            cfg = cfg.with_options(placebo=True)
        ctx = replace(base, cfg=cfg, memo=memos.setdefault(int(cond.layer), {}))  # type: ignore[arg-type]
        trial = Trial("inspect", cond.record_condition, layer=int(cond.layer), alpha=cond.alpha,  # type: ignore[arg-type]
                      word=cond.concept)
        positions = _positions(cond, prompt)
        extra: dict[str, Any] = {}
        if cond.direction == "random":
            seed = cond.random_seed
            if seed is None and request.trial is not None:  # the seed a toolkit run gives this trial
                t = toolkit_trial(request.trial, "random", sample, layer=int(cond.layer), alpha=cond.alpha)  # type: ignore[arg-type]
                seed = int(t.id(base.fingerprint, request.trial["seed"]), 16) % 2**31
            elif seed is None:
                seed = derived_seed(request.stream_key, cond.label)
            inj = common.spec_for(ctx, trial, prompt, positions, random_seed=seed)
            extra["random_seed"] = seed
        elif cond.direction == "other_concept":
            inj = common.spec_for(ctx, trial, prompt, positions, word=cond.vector_concept, norm_word=cond.concept)
        else:
            inj = common.spec_for(ctx, trial, prompt, positions, sign=-1.0 if cond.direction == "negative" else 1.0)
        inj.spec.validate(model, len(prompt))
        out.append((inj.spec, {"alpha_effective": float(inj.effective),
                               "alpha_as": {k: float(v) for k, v in inj.alpha_as.items()},
                               "injected_positions": injected_positions(inj.spec, len(prompt)), **extra}))
    return out


def token_text(tokenizer: Any, token_id: int) -> str:
    """One token as text (" B" for a byte-level BPE token, spaces kept; a sentencepiece token
    decoded alone loses its leading space)."""
    return tokenizer.decode([int(token_id)], skip_special_tokens=False, clean_up_tokenization_spaces=False)


def logprobs_of(tokenizer: Any, gen: Any, top: int) -> Logprobs:
    """A generation's per-token log-probabilities as Inspect ``Logprobs``: the sampled token's
    (``Generation.token_logprobs``) and, when ``top`` > 0, its step's ``top`` most likely tokens
    (``Generation.top_logprobs``), floats only. Log-probabilities are log-softmax of the logits
    the token was drawn from, before temperature (as OpenAI reports them)."""
    texts: dict[int, str] = {}

    def text(i: int) -> str:
        if i not in texts:
            texts[i] = token_text(tokenizer, i)
        return texts[i]

    content = []
    for t, (tid, lp) in enumerate(zip(gen.tokens, gen.token_logprobs)):
        tops = None
        if top:
            tops = [TopLogprob(token=text(i), logprob=float(v), bytes=list(text(i).encode()))
                    for i, v in gen.top_logprobs[t][:top]]
        content.append(Logprob(token=text(tid), logprob=float(lp), bytes=list(text(tid).encode()), top_logprobs=tops))
    return Logprobs(content=content)


def sampling_of(config: GenerateConfig) -> Sampling:
    t = DEFAULT_TEMPERATURE if config.temperature is None else float(config.temperature)
    return Sampling(t, 1.0 if config.top_p is None else float(config.top_p),
                    0 if config.top_k is None else int(config.top_k))


def run_request(model: Any, messages: list[ChatMessage], config: GenerateConfig, *, batch_size: int = 16,
                model_name: str = "introspect", vectors: vector_files.VectorSet | None = None) -> ModelOutput:
    """Decode one request (every condition of it, K = ``num_choices`` samples each) in one
    ``generate`` call; one output choice per (condition, sample), condition-major. A ``readout``
    request is one forward pass read out as floats instead (``readout.run_readout``).
    ``vectors``: the provider's vectors file (``-M vectors``), checked against the model first."""
    ctx = _context(model, vectors)  # a vectors file for another model or width fails here, before anything runs
    request = parse_request(config.extra_body)
    if request.readout is not None:  # a forward pass read out as floats (task D), no generation
        return run_readout(model, messages, request, bank=ctx.vectors, batch_size=batch_size,
                           model_name=model_name, ident=identity(ctx))
    marks: dict[str, str] = {}
    for cond in request.conditions:
        for name, text in cond.marks().items():
            if marks.get(name, text) != text:
                raise RequestError(f"conditions of one request mark different {name!r} texts; use one per request")
            marks[name] = text
    prompt = rendered(model.tokenizer, messages, marks, "positions")
    sampling = sampling_of(config)
    k = int(config.num_choices or 1)
    max_tokens = int(config.max_tokens or DEFAULT_MAX_TOKENS)
    n = len(request.conditions)
    top = int(config.top_logprobs or 0) if config.logprobs else 0
    if top < 0:
        raise RequestError(f"top_logprobs must be >= 0, got {top}")
    stats = DecodeStats()
    common_args = dict(max_new_tokens=max_tokens, sampling=sampling, seed=config.seed, stop=tuple(config.stop_seqs or ()),
                       top_logprobs=top, batch_size=batch_size, stats=stats)
    if request.trial is None:  # one spec per condition; sample s of each from stream_seed(key, s)
        one = build_specs(model, request, prompt, vectors=vectors)
        specs = [one[i] for i in range(n) for _ in range(k)]
        gens = generate(model, [prompt] * n, [s for s, _ in one], n_samples=k,
                        seeds=None if request.stream_key is None else [request.stream_key] * n, **common_args)
    else:  # a toolkit trial: one row per (condition, sample), each on the toolkit run's stream
        memos: dict[int, dict[str, Any]] = {}
        per = [build_specs(model, request, prompt, sample=s, memos=memos, vectors=vectors) for s in range(k)]
        specs = [per[s][i] for i in range(n) for s in range(k)]
        fp = ctx.fingerprint
        keys = [trial_stream_key(fp, request.trial, s) for s in range(k)]
        gens = generate(model, [prompt] * (n * k), [s for s, _ in specs], n_samples=1,
                        seeds=[keys[s] for _ in range(n) for s in range(k)], **common_args)
    yes_no = common.YesNo(model.tokenizer)  # task A's white-box score: first-token p(yes), p(no)
    choices, rows = [], []
    for i, cond in enumerate(request.conditions):
        for s in range(k):
            g, desc = gens[i * k + s], specs[i * k + s][1]
            choices.append(ChatCompletionChoice(
                message=ChatMessageAssistant(content=g.text, model=model_name, source="generate"),
                stop_reason=STOP_REASON[g.stop_reason],  # type: ignore[arg-type]
                logprobs=logprobs_of(model.tokenizer, g, top) if config.logprobs else None))
            rows.append({**cond.to_json(), **desc, "condition": cond.record_condition, "sample": s,
                         "stream_seed": g.seed, "stop_reason": g.stop_reason, "n_tokens": len(g.tokens),
                         "logprob": float(sum(g.token_logprobs)), **yes_no(g)})
    meta = {
        **identity(ctx), "versions": _versions(),
        "stream_key": request.stream_key, "seed": config.seed, "prompt": prompt.text, "prompt_tokens": len(prompt),
        "sampling": sampling.to_dict(), "max_new_tokens": max_tokens, "stop": list(config.stop_seqs or ()),
        "request": request.raw, "choices": rows, "fired": dict(stats.fired), "trial": request.trial,
    }
    out_tokens = sum(len(g.tokens) for g in gens)
    return ModelOutput(model=model_name, choices=choices, metadata={METADATA_KEY: meta},
                       usage=ModelUsage(input_tokens=len(prompt), output_tokens=out_tokens,
                                        total_tokens=len(prompt) + out_tokens))


class IntrospectAPI(ModelAPI):
    """A toolkit model behind Inspect's ModelAPI; the heavy load waits for the first request."""

    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig | None = None, **model_args: Any) -> None:
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key,
                         config=config if config is not None else GenerateConfig())
        allowed = {"path", "adapter", "adapter_scale", "device", "dtype", "batch_size", "remove_direction", "vectors"}
        unknown = set(model_args) - allowed
        if unknown:
            raise ValueError(f"introspect provider: unknown model args {sorted(unknown)}; it takes {sorted(allowed)}")
        self.name = str(model_args.get("path") or model_name)
        if not self.name:
            raise ValueError("introspect provider: name a model, e.g. introspect/smollm2-135m-instruct")
        self.adapter = model_args.get("adapter")
        self.adapter_scale = check_scale(model_args.get("adapter_scale", 1.0))
        if self.adapter_scale != 1 and not self.adapter:
            raise ValueError("introspect provider: adapter_scale needs an adapter (-M adapter=DIR)")
        self.device = model_args.get("device")
        self.dtype = model_args.get("dtype")
        self.remove_direction = model_args.get("remove_direction")
        self.batch_size = int(model_args.get("batch_size", 16))
        if self.batch_size < 1:
            raise ValueError(f"introspect provider: batch_size must be >= 1, got {self.batch_size}")
        self.vectors = read_vectors(model_args.get("vectors"))  # a damaged or foreign file fails here

    def _loaded(self) -> Any:
        """``loaded_model`` with this instance's arguments (the caller holds ``_LOCK``)."""
        return loaded_model(self.name, adapter=self.adapter, device=self.device, dtype=self.dtype,
                            adapter_scale=self.adapter_scale, remove_direction=self.remove_direction)

    def model(self) -> Any:
        """The loaded bridge (loads it on first use; shared by every instance with these args);
        a vectors file is checked against it here (another model or width: one line)."""
        with _LOCK:
            model = self._loaded()
            if self.vectors is not None:
                _context(model, self.vectors)
            return model

    def _run(self, messages: list[ChatMessage], config: GenerateConfig) -> ModelOutput:
        with _LOCK:
            return run_request(self._loaded(), messages, config, batch_size=self.batch_size,
                               model_name=self.model_name, vectors=self.vectors)

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice,
                       config: GenerateConfig) -> ModelOutput:
        if tools:
            raise RequestError("the introspect provider does not run tools")
        return await anyio.to_thread.run_sync(self._run, input, config)

    def max_tokens(self) -> int | None:
        return DEFAULT_MAX_TOKENS

    def max_connections(self) -> int:
        return 1  # requests are decoded one at a time (see the module docstring)
