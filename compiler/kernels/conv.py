"""Convolution as implicit GEMM on NCHW tensors, with padding by addressing.

A tile is ``ty`` output rows (or, of a long row, ``tw`` of its columns) x an
output-channel tile of ``ni`` images of one group (several images only with whole
images: the batch folds into the GEMM's rows). Per
input-channel chunk the zero-padded window ``[ni, c, rows, cols]`` is built in SRAM:
its border is zero-filled and the input's interior lands inside it by one strided DMA,
so the padded tensor never exists in DRAM. The vector engine rearranges the window into
stride phases, channels last (:class:`~compiler.kernels.conv_geometry.Geometry`); each
tap's A operand is then a strided view ``[ni, ty, ow, c]`` of those planes streaming
exactly the tile's output pixels, B is the tap's weights ``[c, o]`` (kept resident per
core when they fit), and the taps accumulate into one ``[pixels, o]`` accumulator,
transposed back to NCHW once. Arrays taller than a chunk get several taps packed into K
(copied side by side); a chunk's window, taps and matmuls are one
:class:`~compiler.kernels.conv_step.ConvStep`. Tile sizes come from the cost model
(:func:`~compiler.kernels.conv_tiling.choose_conv_tiling`); when no tile fits the
scratchpad the per-tap kernel (:mod:`compiler.kernels.conv_per_tap`) runs instead.
"""

from __future__ import annotations

from dataclasses import replace

from archsim.config.names import sram_space
from archsim.errors import CapacityError, LoweringError
from compiler import graph as g
from compiler.emit import Arena
from compiler.ir.dtypes import DType
from compiler.ir.operands import Slice, SramRef
from compiler.ir.ops import Transpose
from compiler.kernels.common import Context, TileSteps, pipeline
from compiler.kernels.conv_geometry import (
    Geometry, conv_tiles, epilogue_bytes, epilogue_reads, reads_stored, row_block, stored_ref,
)
from compiler.kernels.conv_interleave import interleaved, padded_weights
from compiler.kernels.conv_depthwise import (
    choose_depthwise_tiling,
    is_depthwise,
    lower_conv_depthwise,
)
from compiler.kernels.conv_packed import choose_packed_tiling, lower_conv_packed, packed_inputs
from compiler.kernels.conv_patch import lower_conv_patch
from compiler.kernels.conv_patch_tiling import choose_patch_tiling, is_patch_embedding
from compiler.kernels.conv_per_tap import lower_conv_per_tap
from compiler.kernels.conv_staging import StagedWeights, rotated
from compiler.kernels.epilogue import finish_cost
from compiler.kernels.conv_step import ConvLayout, ConvStep
from compiler.kernels.conv_tiling import (
    ConvTiling, choose_conv_tiling, packed_groups, packs_taps, weight_loads,
)
from compiler.kernels.matmul import accumulator_dtype
from compiler.kernels.transfers import load_dense
from compiler.kernels.vector import layout, sub
from compiler.plan import Kernel


def _buffers(ctx: Context, kernel: Kernel, geo: Geometry, tiling: ConvTiling,
             acc_dtype: DType, cast: bool, arrays: int) -> ConvLayout:
    """Allocate every core's buffers for ``tiling``; raises CapacityError when they do
    not fit the scratchpad."""
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    (x, w), out = node.inputs, node.out
    batch, groups = x.shape[0], spec.groups
    cout, cg, kh, kw = w.shape
    _, _, oh, ow = spec.image_shape(out, spec.channels_last_out)
    og = cout // groups
    ni, ty, ot, ct, ntap = (tiling.images, tiling.out_rows, tiling.out_channels,
                            tiling.in_channels, tiling.taps)
    tw = tiling.out_cols or ow
    geo = replace(geo, out_cols=tw)
    if tiling.interleaved:  # the kernel padded to whole phases, a row of them a matmul
        geo = interleaved(geo)
        (kh, kw), bk = geo.kernel, 1
        ntap = tiling.interleaved * geo.stride[0] * kw
    elif tiling.row_blocks:  # a step is one kernel row: its own 1 x kw convolution
        geo, kh, bk = row_block(geo), 1, kh  # bk: the steps a chunk takes
    else:
        bk = 1
    taps = [(i, j) for i in range(kh) for j in range(kw)]
    tap_groups = [taps[t:t + ntap] for t in range(0, len(taps), ntap)]
    tiles = [((n0, min(n0 + ni, batch)), gi, o0, y0, x0) for n0 in range(0, batch, ni)
             for gi in range(groups) for y0 in range(0, oh, ty) for x0 in range(0, ow, tw)
             for o0 in range(0, og, ot)]
    cores = min(ctx.cores, len(tiles))
    sets = ctx.sets
    rows, m, ow = geo.rows(ty), ni * ty * tw, tw
    packed = 0 if tiling.interleaved else packed_groups(len(taps), ntap)
    # the weight blocks (group and channel tile, each of every chunk) each core meets
    chunks = -(-cg // ct)
    blocks = [len({(gi, o0) for _, gi, o0, _, _ in tiles[c::cores]}) * chunks * bk
              for c in range(cores)]
    bufs = []
    for c in range(cores):
        arena = Arena(sram_space(c), ctx.capacity)
        alloc = arena.alloc
        bufs.append({
            "raw": [alloc((ni, ct, rows, geo.cols), x.dtype, "conv input window")
                    for _ in range(sets)] if not tiling.direct_phases else [],
            "planes": [alloc((ni * rows * geo.cols * max(1, tiling.interleaved), ct), x.dtype,
                             "conv input planes")
                       for _ in range(sets)],
            "wraw": [alloc((ot, ct, kh, kw), w.dtype, "conv weight tile") for _ in range(
                weight_loads(tiling.resident_weights, tiling.blocks_kept, sets))],
            "w": [alloc((kh * kw * ct, ot), w.dtype, "conv weight taps")
                  for _ in range(0 if tiling.blocks_kept and tiling.resident_weights else
                                 1 if tiling.resident_weights else sets)],
            "kept": alloc((blocks[c] * ot * ct * kh * kw if tiling.blocks_kept else
                           cout * cg * kh * kw,), w.dtype, "conv resident weights")
            if tiling.resident_weights else None,
            "stage": alloc((ntap, m, ct), x.dtype, "conv tap staging")
            if packed else None,
            "packed": [alloc((packed, m, ntap * ct), x.dtype, "conv packed taps")
                       for _ in range(sets)] if packed else [],
            "acc": [alloc((m, ot), acc_dtype, "conv accumulator") for _ in range(sets)],
            # with K blocks dealt to the arrays, the partials of arrays 1, 2, ...
            "partials": [[alloc((m, ot), acc_dtype, "conv array partial")
                          for _ in range(arrays - 1 if tiling.k_split else 0)]
                         for _ in range(sets)],
            "nchw": [alloc((ni, ot, ty * ow), acc_dtype, "conv output tile")
                     for _ in range(sets)],
            "out": [alloc((ni, ot, ty * ow), out.dtype, "conv output") if cast else None
                    for _ in range(sets)],
            "epi": [layout(ctx, kernel.group, (ni, ty, ow, ot) if spec.channels_last_out
                           else (ni, ot, ty, ow), arena, 1, {out.id})
                    if kernel.group else None for _ in range(sets)],
        })
    return ConvLayout(tiling, geo, tap_groups, tiles, cores, bufs, [{} for _ in range(cores)])


def lower_conv_kernel(ctx: Context, kernel: Kernel) -> None:
    node = kernel.anchor
    spec: g.Conv2d = node.spec
    (x, w), out = node.inputs, node.out
    batch, _, height, width = spec.image_shape(x, spec.channels_last_in)
    cout, cg, kh, kw = w.shape
    _, _, oh, ow = spec.image_shape(out, spec.channels_last_out)
    if not reads_stored(ctx.view(x)):
        raise LoweringError(f"{node.source}: convolution input must be a stored tensor, "
                            f"got a reshaped view")
    (ph, pw), (eh, ew) = spec.padding, spec.pads_end
    geo = Geometry((kh, kw), tuple(spec.stride), tuple(spec.dilation), oh, ow,
                   height + ph + eh, width + pw + ew)
    acc_dtype = accumulator_dtype(x.dtype)
    cast = out.dtype is not acc_dtype
    arrays = ctx.config.core.matrix.arrays if ctx.options.multi_array else 1
    epi_ops = len(kernel.group.nodes) if kernel.group else 0
    # The SRAM estimate of a tiling is close, not exact (alignment, epilogue layouts): if
    # the buffers of the chosen tiling do not fit, choose again under a smaller budget.
    budget = ctx.capacity
    one_tap = not packs_taps(ctx.config)  # runtime.conv_taps: one (XLA on TPU)
    # int8 weights (weight-only) widened on the way in: the implicit GEMM's and the
    # per-tap kernel's matmuls read them as stored; the other mappings do not
    narrow = w.dtype is not x.dtype
    packed = None if one_tap or narrow else \
        choose_packed_tiling(ctx, **packed_inputs(ctx, kernel))
    depthwise = choose_depthwise_tiling(ctx, kernel) \
        if is_depthwise(node) and not narrow else None
    patch = choose_patch_tiling(ctx, kernel) \
        if is_patch_embedding(node) and not narrow else None
    while True:
        tiling = choose_conv_tiling(ctx, geo, batch, spec.groups, cg, cout // spec.groups,
                                    x.dtype, out.dtype.itemsize, cast,
                                    epilogue_bytes(ctx, kernel, out), epi_ops, arrays, budget,
                                    (spec.channels_last_in, spec.channels_last_out),
                                    epilogue_reads(kernel, out),
                                    finish_cost(ctx.config.core.vector, kernel.group, out,
                                                acc_dtype.itemsize, cast))
        estimates = {name: found.cost.estimate(ctx.config) if found is not None else None
                     for name, found, applies in (
                         ("depthwise", depthwise, depthwise is not None),
                         ("patch", patch, is_patch_embedding(node) and not narrow),
                         ("packed", packed, not (one_tap or narrow)), ("gemm", tiling, True))
                     if applies}
        taken = _taken(estimates)
        ctx.choices[node.source] = _choice(taken, estimates) + _layout_note(spec) + (
            "; a tap a matmul (runtime.conv_taps: one)" if one_tap and taken == "gemm"
            and kh * kw > 1 and tiling is not None and not tiling.interleaved else "") + (
            "; weights shared through shared SRAM"
            if taken == "gemm" and tiling is not None and tiling.staged_weights else "") + (
            "; phases interleaved" if taken == "gemm" and tiling is not None and
            tiling.interleaved else "")
        if taken == "depthwise":
            lower_conv_depthwise(ctx, kernel, depthwise)
            return
        if taken == "patch":
            lower_conv_patch(ctx, kernel, patch)
            return
        if taken == "packed":
            lower_conv_packed(ctx, kernel, packed)
            return
        if tiling is None:
            lower_conv_per_tap(ctx, kernel)
            return
        try:
            plan = _buffers(ctx, kernel, geo, tiling, acc_dtype, cast, arrays)
            break
        except CapacityError:
            budget = budget * 7 // 8
    _emit(ctx, kernel, geo, plan, arrays, cast)


def _emit(ctx: Context, kernel: Kernel, geo: Geometry, plan: ConvLayout, arrays: int,
          cast: bool) -> None:
    node = kernel.anchor
    w, source = node.inputs[1], node.source
    cout, cg, kh, kw = w.shape
    # the kernel rows of a step: all, or with row blocks one (``None``: all)
    blocks: list[int | None] = list(range(kh)) if plan.tiling.row_blocks else [None]
    if plan.tiling.row_blocks:
        kh = 1
    padded = plan.geo.kernel if plan.tiling.interleaved else None
    stored = (kh, kw)  # the kernel rows and columns a block loads
    if padded is not None:
        kh, kw = padded
    og = cout // node.spec.groups
    tiling, cores = plan.tiling, plan.cores
    kept: list[dict[tuple[tuple[int, int], tuple[int, int], int | None], SramRef]] = \
        [{} for _ in range(cores)]
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    step_counts = [0] * cores

    staged = StagedWeights.plan(ctx, w.dtype) if tiling.staged_weights else None

    def weights(core: int, xs: int, oo: tuple[int, int], cc: tuple[int, int],
                block: int | None) -> tuple[SramRef, Transpose | None]:
        """Load a weight block (once per core when weights are resident; staged,
        through shared SRAM: :mod:`~compiler.kernels.conv_staging`): kernel row
        ``block`` or all rows; returns where it lives as ``[kh * kw * c, o]`` and the
        rearrangement still to emit."""
        b = plan.bufs[core]
        no, nc = oo[1] - oo[0], cc[1] - cc[0]
        key = (oo, cc, block)
        if tiling.resident_weights:
            if key in kept[core]:
                return kept[core][key], None
            offset = len(kept[core]) * tiling.out_channels * tiling.in_channels * kh * kw \
                if tiling.blocks_kept else (oo[0] * cg + cc[0] * no) * kh * kw
            dst = kept[core][key] = sub(b["kept"], (kh * kw * nc, no), offset)
        else:
            dst = sub(b["w"][xs], (kh * kw * nc, no))
        krows = Slice(0, stored[0]) if block is None else Slice(block, block + 1)
        wref = stored_ref(ctx, w, (Slice(*oo), Slice(*cc), krows, Slice(0, stored[1])))
        wraw = sub(b["wraw"][xs % len(b["wraw"])], (no, nc, kh, kw))
        if padded is not None:
            return padded_weights(ctx, core, wref, (no, nc, *stored),
                                   b["wraw"][xs % len(b["wraw"])], dst, padded,
                                   (tiling.interleaved, *node.spec.stride), source)
        if staged is not None:
            staged.fill(ctx, key, wref, wraw, core, source)
        else:
            load_dense(ctx, wref, wraw, core, source)
        return dst, Transpose(wraw, sub(dst, (kh, kw, nc, no)), (2, 3, 1, 0))

    met: dict[tuple[int, int], int] = {}  # staged: tiles so far of each weight block
    for tile in conv_tiles(plan.tiles, cores, ctx.sets, arrays, og, tiling.out_channels,
                           (geo.out_rows, geo.out_cols), (tiling.out_rows, plan.geo.out_cols)):
        core, gi = tile.core, tile.gi
        steps = [(c0, block) for c0 in range(0, cg, tiling.in_channels) for block in blocks]
        if staged is not None:  # each tile of a block loads a different chunk first
            turn = met[tile.oo] = met.get(tile.oo, -1) + 1
            # among the whole chunks: a short last one stays last, as a tile's first step
            # must be whole (dealt K blocks start every array's sum there)
            whole = [st for st in steps if st[0] + tiling.in_channels <= cg]
            steps = rotated(whole, turn) + steps[len(whole):]
        for s, (c0, block) in enumerate(steps):
            cc = (gi * cg + c0, gi * cg + min(c0 + tiling.in_channels, cg))
            xs = step_counts[core] % ctx.sets
            step_counts[core] += 1
            step = ConvStep(ctx, node, plan, core, xs, tile.q, tile.images,
                            (tile.rows, tile.cols), tile.oo, cc, arrays, tile.array, block)

            def load(step=step, c0=c0, block=block) -> None:
                w_ref, rearrange = weights(step.core, step.xs, step.oo,
                                           (c0, c0 + step.nc), block)
                step.load(w_ref, rearrange)

            store = (lambda: None)
            if s == len(steps) - 1:
                store = step.finisher(kernel, cast)
            per_core[core].append(TileSteps(load, step.compute if s else step.compute_first,
                                            store))
    pipeline(per_core, ctx.sets - 1)


def _layout_note(spec: g.Conv2d) -> str:
    """``; NHWC in and out`` when the image or the result is stored channels last."""
    sides = [side for side, on in (("in", spec.channels_last_in),
                                   ("out", spec.channels_last_out)) if on]
    return f"; NHWC {' and '.join(sides)}" if sides else ""


_MAPPINGS = {"depthwise": "depthwise on the vector unit", "patch": "patches as one GEMM",
             "packed": "taps packed into K", "gemm": "implicit GEMM",
             "per_tap": "one tap at a time"}
_ESTIMATED = {"depthwise": "vector unit", "patch": "patches", "packed": "packed taps",
              "gemm": "implicit GEMM"}
"""How ``_choice`` names each mapping's estimate."""


_ON_A_TIE = ("gemm", "packed", "patch", "depthwise")
"""Which of two mappings estimated alike is taken: the one listed first."""


def _taken(estimates: dict[str, float | None]) -> str:
    """The mapping with the lowest estimate (None: that mapping has no tiling), or
    ``per_tap`` when none has a tiling."""
    found = [(cycles, _ON_A_TIE.index(name), name) for name, cycles in estimates.items()
             if cycles is not None]
    return min(found)[2] if found else "per_tap"


def _choice(taken: str, estimates: dict[str, float | None]) -> str:
    """Which convolution mapping the cost model took, and the estimates it compared."""
    def cycles(value: float | None) -> str:
        return f"{value:,.0f} cycles" if value is not None else "no tiling fits"
    compared = ", ".join(f"{_ESTIMATED[name]} {cycles(value)}"
                         for name, value in estimates.items())
    return f"{_MAPPINGS[taken]} (estimated: {compared})"
