"""LLM serving on simulated NPUs: prefill and decode with a KV cache, batching, tensor
and pipeline parallelism (``archsim llm``). Imports torch only when a run is timed."""

from __future__ import annotations

from typing import Any

__all__ = ["Parallelism", "Request", "bundled_models", "load_model", "serve"]


def __getattr__(name: str) -> Any:
    if name == "serve":
        from serving.run import serve
        return serve
    if name in ("Parallelism", "Request"):
        from serving import plan
        return getattr(plan, name)
    if name in ("bundled_models", "load_model"):
        from serving import spec
        return getattr(spec, name)
    raise AttributeError(f"module 'serving' has no attribute {name!r}")
