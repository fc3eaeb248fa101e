"""A fixture the torch.compile tests share: a fresh dynamo on ``atom``, and a graph that
falls back to eager failing the test (``from compile_fixtures import fresh_on_atom``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch

import torch_bridge  # noqa: F401 - registers the backend
from torch_bridge import compile_backend, runtime


@pytest.fixture(autouse=True)
def fresh_on_atom() -> Iterator[None]:
    torch._dynamo.reset()
    with runtime.use_config("atom"), warnings.catch_warnings():
        warnings.simplefilter("error", compile_backend.GraphFallbackWarning)
        yield
