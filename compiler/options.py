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
    vector_share: bool = True
    """Give the last columns of a few-row matmul of narrow weights (a decode GEMV) to
    the vector units where its arrays are bound by taking the weights in and that is
    faster (:mod:`compiler.kernels.matmul_vector`); off: every column on the arrays."""
    host_fallback: bool = True
    """Ops without a lowering run on the host (timed, visible); else raise
    UnsupportedOpError."""
    attention_fusion: bool = True
    """Run written-out attention (``softmax(q @ k^T * scale [+ mask]) @ v``) as the
    flash-attention kernel instead of materializing the scores."""
    causal_mask: bool = True
    """An attention mask whose folded values are the causal triangle (transformers'
    mask under torch.export, a ``tril`` or ``-inf`` triangle) runs as causal attention:
    hidden key tiles skipped, no mask read (:mod:`compiler.causal_mask`)."""
    constant_folding: bool = True
    """Evaluate ops whose inputs are all compile-time constants (masks, aranges)."""
    fold_limit_elements: int = 1 << 24
    """Largest constant the compiler folds."""
    on_chip_temps: bool = True
    """Keep intermediate tensors that fit in the shared SRAM instead of DRAM (memory-space
    assignment, :mod:`compiler.residency`); no effect without shared SRAM."""
    channels_last: bool = True
    """Honor channels-last (NHWC) 4-D user inputs and graph outputs: such a tensor is
    stored NHWC in DRAM, as torch holds it, and a convolution reading or writing it
    does so without rearranging it (:mod:`compiler.layout`). Off: every tensor is
    stored in its logical (NCHW) order and convolutions transpose on the vector unit."""
    partial_matmul_commands: int = 0
    """Performance-only: when the program's last kernel is a matmul that would emit more
    commands than this (and its output tiles fall into identical panels), only its first
    panels are compiled, and ``CompiledProgram.simulate`` extends the result to the whole
    matmul (``SimResult.tiles`` says so; :mod:`compiler.kernels.matmul_panels`). 0:
    always whole. Such a program cannot run functionally."""
