"""Shared by the adapted torch_openreg cases: registration and the skip reasons."""

import pytest

import torch_bridge  # noqa: F401  (registers the npu device)

ONE_DEVICE = pytest.mark.skip(reason="npu has one device (npu:0); openreg has two")
NO_GENERATOR = pytest.mark.skip(
    reason="torch.Generator(device='npu') needs C++ PrivateUse1HooksInterface.getNewGenerator")
NO_PINNED = pytest.mark.skip(
    reason="pinned memory needs C++ PrivateUse1HooksInterface.getPinnedMemoryAllocator")
NO_BACKEND_META = pytest.mark.skip(
    reason="tensor backend metadata needs a C++ BackendMeta (openreg's own)")
OPENREG_OPS = pytest.mark.skip(reason="torch.ops.openreg.* are openreg's own C++ test ops")
NO_QUANTIZED = pytest.mark.skip(
    reason="quantized npu tensors need a C++ quantizer (QuantizedPrivateUse1)")
