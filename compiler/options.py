"""Compile options: one switch per optimization, so users can see what each buys."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompileOptions:
    fusion: bool = True
    """Fuse chains of vector ops into one pass over SRAM and elementwise epilogues into
    matmul/conv tiles."""
    double_buffering: bool = True
    """Alternate SRAM buffer sets so the DMA of tile i+1 overlaps compute on tile i."""
    multicore: bool = True
    """Split output tiles over all cores (else everything runs on core 0)."""
    multi_array: bool = True
    """Use every systolic array of a core in parallel."""
    host_fallback: bool = True
    """Ops without a lowering run on the host (timed, visible); else raise
    UnsupportedOpError."""
    attention_fusion: bool = True
    """Run written-out attention (``softmax(q @ k^T * scale [+ mask]) @ v``) as the
    flash-attention kernel instead of materializing the scores."""
    constant_folding: bool = True
    """Evaluate ops whose inputs are all compile-time constants (masks, aranges)."""
    fold_limit_elements: int = 1 << 24
    """Largest constant the compiler folds."""
