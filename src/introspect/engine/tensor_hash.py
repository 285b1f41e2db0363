"""A tensor's sha256 over its float32 bytes: one rule for every hash a header or file carries
(a removed direction, an exported vector), so equal vectors hash equal wherever they are named."""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor


def tensor_sha256(t: Tensor) -> str:
    return hashlib.sha256(t.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()).hexdigest()
