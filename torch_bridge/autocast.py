"""Autocast on npu: placeholder filled below."""
from __future__ import annotations

import torch


def install(library: torch.library.Library, fallback_library: torch.library.Library) -> None:
    fallback_library.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
