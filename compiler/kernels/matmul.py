"""The matmul kernel: output tiles over cores, k-loop with double-buffered operands,
one column block per systolic array, fused elementwise epilogue.

Per output tile ``[mt, nt * arrays]`` on a core: for each k step, load the A tile (shared
by the arrays) and one B tile per array (when the weight is stored [N, K], the DMA
writes the tile transposed: its SRAM side is a strided view), then one matmul per
array accumulates into its own f32 accumulator. The epilogue casts to the output
dtype, runs the fused group and stores. A one-row-block matmul (a decode GEMV) deals
its last round of tiles evenly over every array, splitting the columns left over by K
(:mod:`.matmul_split`), and where narrow weights leave its arrays bound by taking them
in, its last columns to the vector units (:mod:`.matmul_vector`); column lists are
(array, columns) pairs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from archsim.config.names import mxu_engine, sram_space, vpu_engine
from archsim.errors import CapacityError
from archsim.matrix import steady_cycles
from compiler.cost import choose_matmul_tiling
from compiler.emit import Arena
from compiler.graph import Value
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import (Binary, BinaryKind, Cast, Copy, MatMul, VectorMatMul,
                             weight_only)
from compiler.kernels.common import Box, Context, TileSteps, pipeline, unravel
from compiler.kernels.epilogue import finish_tile, pass_order
from compiler.kernels.matmul_dequant import DequantWeights
from compiler.kernels.matmul_panels import TilePanels, panel_plan
from compiler.kernels.matmul_split import TailTile, full_width, rebalanced_for
from compiler.kernels.matmul_staging import StagedA, StagedB
from compiler.kernels.matmul_vector import TimedStep, VectorShare, interleaved, plan_share
from compiler.kernels.matmul_transposed import (  # noqa: F401 (re-exported)
    _row_parts, _transposed_strides, load_transposed)
from compiler.kernels.vector import Order, bytes_per_element, layout, load_box, sub
from compiler.plan import Kernel, aligned


def accumulator_dtype(dtype: DType) -> DType:
    return DType.i32 if dtype.is_int8 else DType.f32


def _operand_box(value: Value, batch_index: tuple[int, ...], rows: tuple[int, int],
                 cols: tuple[int, int]) -> Box:
    lead = aligned(value.shape[:-2], len(batch_index))
    box = tuple((0, 1) if n == 1 else (i, i + 1) for n, i in zip(lead, batch_index))
    box = box[len(box) - (len(value.shape) - 2):] if len(value.shape) > 2 else ()
    return box + (rows, cols)


def _widen_cost(ctx: Context, dq: DequantWeights | None) -> float:
    """Vector cycles a lane spends on one weight the vector unit dequantizes: its element
    ops (:attr:`compiler.ir.ops.Dequant.vector_passes`), or a weight-only int8 weight's
    cast (its per-channel scale is applied to the output, in the epilogue)."""
    costs = ctx.config.core.vector.costs
    return dq.vector_passes * costs.elementwise if dq is not None else costs.cast


def lower_matmul_kernel(ctx: Context, kernel: Kernel) -> None:
    node = kernel.anchor
    a, b = node.inputs[:2]
    dq = DequantWeights.of(node)  # b: narrow weights dequantized in the input path
    # ... or on the vector unit, a tile at a time, where the preset says so
    widen = ctx.config.core.matrix.dequant == "vector" and (
        dq is not None or weight_only(a.dtype, b.dtype))
    out: Value = node.out
    trans_b = node.spec.trans_b
    group = kernel.group
    batch_shape = out.shape[:-2]
    m, n = out.shape[-2:]
    k = a.shape[-1]
    batch = math.prod(batch_shape)
    acc_dtype = accumulator_dtype(a.dtype)
    cast_needed = out.dtype is not acc_dtype
    rank = len(out.shape)
    epi_bytes = (out.dtype.itemsize if cast_needed else 0) + \
        (bytes_per_element(ctx, group, {out.id}) if group else 0)
    arrays = ctx.config.core.matrix.arrays if ctx.options.multi_array else 1
    order = pass_order(group, out, cast_needed) if group else None  # the epilogue's pass
    tiling = choose_matmul_tiling(ctx.config, batch, m, k, n, a.dtype, out.dtype,
                                  ctx.cores, arrays, ctx.sets, max(0, epi_bytes), ctx.capacity,
                                  b.dtype, dq.item_bytes if dq else 0.0,
                                  dq.n_unit if dq else 1,
                                  widen=_widen_cost(ctx, dq) if widen else 0.0)
    mt, kt, nt, used = tiling.mt, tiling.kt, tiling.nt, tiling.arrays
    n_tile = nt * used
    def plain_tiles(n: int) -> list[tuple[int, int, int]]:
        return [(bi, m0, n0) for bi in range(batch) for m0 in range(0, m, mt)
                for n0 in range(0, n, n_tile)]
    tiles = plain_tiles(n)
    k_steps = list(range(0, k, kt))
    def plan_panels(limit: int):
        return panel_plan(len(tiles), ctx.cores, m % mt == 0 and n % n_tile == 0,
                          tiling.acc_sets, tiling.op_sets, len(k_steps), tiling.a_resident,
                          -(-n // n_tile), 2 * len(tiles) * len(k_steps), limit)
    panels = plan_panels(ctx.partial_limit)
    # packed int4, or one-byte weights the arrays widen exactly (their scales applied to
    # the output); not one-byte weights scaled on the way in (fp8 weight-only), which
    # torch's graph rounds to A's dtype after scaling and the share would not
    narrow = dq.packed if dq is not None else weight_only(a.dtype, b.dtype)
    share = plan_share(ctx.config, ctx.cores, m, n, k, tiling, a.dtype, b.dtype, dq) \
        if ctx.options.vector_share and narrow and not widen and panels is None and \
        batch == 1 and m <= mt else None
    if share and len(plain_tiles(share.first)) < ctx.cores:
        share = None  # every core keeps tiles of its own on its arrays
    if share:
        tiles = plain_tiles(share.first)
    n_cols = share.first if share else n  # the arrays' columns
    # weights kept in shared SRAM only where no run compiles the matmul in part (its
    # first panels would all load from DRAM): every door then gets the same schedule
    keep_weights = tiling.b_staged and plan_panels(1) is None
    if panels is not None:  # the first panels only (compiler.kernels.matmul_panels)
        tiles = panels.emitted(tiles)
    ctx.em.reserve(2 * len(tiles) * len(k_steps), kernel.name)  # a load and a multiply each
    cores = min(ctx.cores, len(tiles))
    def allocate(base: int, split_a: tuple[int, int], share: VectorShare | None = None
                 ) -> tuple[list[_Buffers], list[_Buffers]]:
        """The arrays' buffers of each core from ``base``, then the vector share's."""
        arrays = [_allocate(ctx, operand_arena(ctx, c, base), tiling, (a.dtype, b.dtype),
                            acc_dtype, out, cast_needed, group, rank, dq, widen, split_a)
                  for c in range(cores)]
        own = [_allocate(ctx, operand_arena(ctx, c, arrays[c].end), _share_tiling(tiling, share),
                         (a.dtype, b.dtype), acc_dtype, out, cast_needed, group, rank, dq)
               for c in range(cores)] if share else []
        return arrays, own
    if share:  # the share's buffers beside the arrays' (else every column on the arrays)
        try:
            allocate(0, (0, 0), share)
        except CapacityError:
            share, n_cols, tiles = None, n, plain_tiles(n)
            cores = min(ctx.cores, len(tiles))
    tail: list[TailTile] = []  # a one-row-block matmul's last round, balanced (its split
    # tiles' own A buffers must fit beside the tiling's: not always so on small scratchpads)
    if panels is None and batch == 1 and m <= mt and (dq is None or dq.packed and not widen):
        spread = tiling  # one tile spread narrower than the arrays: split by K instead
        tiling = (full_width(ctx.config, tiling, n_cols, arrays, dq) if len(tiles) == 1
                  else None) or tiling
        balanced, tail = rebalanced_for(ctx.config, tiles, cores, m, n_cols, k, tiling,
                                        a.dtype, dq)
        try:
            allocate(0, _split_lanes(tail), share)
            tiles = balanced
        except CapacityError:
            tail = []
        if not tail:  # the wide tiling only with the round that splits it
            tiling = spread
        nt, used = tiling.nt, tiling.arrays
        n_tile = nt * used
    staging = StagedA.plan(ctx, tiles, cores, (mt, kt), a.dtype, tiling.op_sets,
                           len(k_steps)) if tiling.a_staged else None
    staged_b = StagedB.plan(ctx, -(-n_cols // n_tile), len(k_steps), used, (kt, nt), b.dtype) \
        if keep_weights else None
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    split_a = _split_lanes(tail)
    try:  # after the previous matmul kernel's buffers, or from 0 if they do not fit
        bufs, share_bufs = allocate(ctx.matmul_sram_end, split_a, share)
    except CapacityError:
        bufs, share_bufs = allocate(0, split_a, share)
    ctx.matmul_sram_end = (share_bufs or bufs)[0].end
    step_count = [0] * cores
    timed: list[list[TimedStep]] = [[] for _ in range(cores)]  # the arrays' steps' cycles
    holding: list[tuple[int, int] | None] = [None] * cores  # (batch, row block) of A kept
    ranges: list[tuple[int, int, int]] = []  # (first, end command, panel) when in part
    blocks = [0] * cores  # row blocks a core has held: resident A sets rotate per block,
    # so a block's loads issued ahead never overwrite one still being multiplied
    for t, (bi, m0, n0) in enumerate(tiles):
        core = t % cores
        q = (t // cores) % tiling.acc_sets  # the core's own tile count so far
        batch_index = unravel(bi, batch_shape)
        m1 = min(m0 + mt, m)
        cols = list(enumerate((n0 + j * nt, min(n0 + (j + 1) * nt, n_cols))
                              for j in range(used) if n0 + j * nt < n_cols))  # (array, columns)
        load_a = not tiling.a_resident or holding[core] != (bi, m0)
        if load_a and tiling.a_resident:
            blocks[core] += 1
        holding[core] = (bi, m0)
        for s, k0 in enumerate(k_steps):
            k1 = min(k0 + kt, k)
            op_set = step_count[core] % tiling.op_sets
            step_count[core] += 1
            last = s == len(k_steps) - 1
            a_buf = bufs[core].a[(blocks[core] % tiling.op_sets) * tiling.k_steps + s
                                 if tiling.a_resident else op_set]
            staged = staging.source(ctx, t, s, a, _operand_box(a, batch_index, (m0, m1),
                                                              (k0, k1)),
                                    m1 - m0, k1 - k0, kernel.name) if staging else None
            steps = TileSteps(
                load=_loader(ctx, core, bufs[core], op_set, a_buf if load_a else None, a, b,
                             trans_b, batch_index, (m0, m1), (k0, k1), cols, kernel.name,
                             staged, dq, (staged_b, n0 // n_tile, s) if staged_b else None),
                compute=_multiplier(ctx, core, bufs[core], op_set, a_buf, q, (m1 - m0),
                                    (k0, k1), cols, s > 0, kernel.name, dq),
                store=_epilogue(ctx, core, bufs[core], q, out, group, order, batch_index,
                                (m0, m1), cols, cast_needed, kernel.name) if last else
                (lambda: None),
            )
            if panels is not None:
                steps = _tagged(ctx, steps, panels.panel_of(t), ranges)
            per_core[core].append(steps)
            if share:  # when each step's work is due (only the share's order needs it)
                timed[core].append(TimedStep(_step_cycles(ctx, m1 - m0, k1 - k0, cols,
                                                          a.dtype), last))
    own = [len(tiles[c::cores]) for c in range(cores)]  # tiles each core has had
    for tile in tail:
        core = tile.core
        q = own[core] % tiling.acc_sets
        own[core] += 1
        for s in range(tile.steps):
            op_set = step_count[core] % tiling.op_sets
            step_count[core] += 1
            per_core[core].append(_tail_step(
                ctx, core, bufs[core], op_set, q, tile, s, s == tile.steps - 1, a, b,
                trans_b, unravel(0, batch_shape), m, dq, (out, group, order, cast_needed),
                kernel.name))
            if share:
                timed[core].append(TimedStep(max(
                    _step_cycles(ctx, m, ks[1] - ks[0], [(0, lane.cols)], a.dtype)
                    for lane in tile.lanes if (ks := lane.step(s, tile.kt)) is not None),
                    s == tile.steps - 1))
    if share:
        share_steps = range(0, k, share.kt)
        for core in range(cores):
            per_core[core] = interleaved(per_core[core], timed[core], share.step_cycles, [
                _share_step(ctx, core, share_bufs[core], s % tiling.op_sets, share.columns[core],
                            (k0, min(k0 + share.kt, k)), k0 + share.kt >= k, a, b, trans_b,
                            unravel(0, batch_shape), m, dq, (out, group, order, cast_needed),
                            kernel.name)
                for s, k0 in enumerate(share_steps)])
    pipeline(per_core, tiling.op_sets - 1)
    if panels is not None:
        ctx.tile_panels = TilePanels(kernel.name, tuple(ranges), panels.total,
                                     panels.tiles_per_panel)


def _step_cycles(ctx: Context, m: int, k: int, cols: list[tuple[int, tuple[int, int]]],
                 dtype: DType) -> int:
    """The arrays' cycles of a k step (its widest array's multiply, back to back)."""
    return max(steady_cycles(m, k, c1 - c0, ctx.config.core.matrix, dtype)
               for _, (c0, c1) in cols)


def _split_lanes(tail: list[TailTile]) -> tuple[int, int]:
    """(arrays, k rows) of the A buffers each array of a split tile needs."""
    return (max((len(t.lanes) for t in tail if t.split), default=0),
            max((t.kt for t in tail if t.split), default=0))


def _tail_step(ctx: Context, core: int, bufs: _Buffers, op_set: int, q: int,
               tile: TailTile, s: int, last: bool, a: Value, b: Value, trans_b: bool,
               batch_index: tuple[int, ...], m: int, dq: DequantWeights | None,
               epilogue: tuple, source: str) -> TileSteps:
    """k-step ``s`` of a tile of a rebalanced last round (:mod:`.matmul_split`): a plain
    one shares its A tile over its arrays; a split one loads each array's own share of
    K (A into the array's own A buffer) and, after the last step, adds the arrays'
    partial sums into the first array's accumulator on the vector unit before the
    epilogue."""
    lanes = [(j, lane.cols, ks) for j, lane in enumerate(tile.lanes)
             if (ks := lane.step(s, tile.kt)) is not None]
    if tile.split:
        parts = [(bufs.lane_a[op_set][j], ks, [(j, cols)]) for j, cols, ks in lanes]
    else:
        parts = [(bufs.a[op_set], lanes[0][2], [(j, cols) for j, cols, _ in lanes])]
    loads = [_loader(ctx, core, bufs, op_set, a_buf, a, b, trans_b, batch_index, (0, m), ks,
                     cols, source, None, dq) for a_buf, ks, cols in parts]
    multiplies = [_multiplier(ctx, core, bufs, op_set, a_buf, q, m, ks, cols, s > 0, source,
                              dq) for a_buf, ks, cols in parts]
    out, group, order, cast_needed = epilogue
    cols = [tile.lanes[0].cols] if tile.split else [lane.cols for lane in tile.lanes]
    finish = _epilogue(ctx, core, bufs, q, out, group, order, batch_index, (0, m),
                       list(enumerate(cols)), cast_needed, source)

    def store() -> None:
        if not last:
            return
        if tile.split:  # the arrays' partial sums over K, into the first's accumulator
            width = cols[0][1] - cols[0][0]
            total = sub(bufs.acc[q][0], (m, width))
            for j in range(1, len(tile.lanes)):
                ctx.em.emit(vpu_engine(core), Binary(BinaryKind.add, total,
                                                     sub(bufs.acc[q][j], (m, width)), total),
                            source)
        finish()
    return TileSteps(lambda: [load() for load in loads],
                     lambda: [multiply() for multiply in multiplies], store)


def _share_tiling(tiling, share: VectorShare):
    """The buffers of a core's vector share (:mod:`.matmul_vector`): one tile of the
    widest core's columns, the arrays' k step and operand sets, A loaded per step."""
    return dataclasses.replace(tiling, kt=share.kt, nt=share.width, arrays=1, acc_sets=1,
                               k_steps=1, a_resident=False, a_staged=False, b_staged=False)


def _share_step(ctx: Context, core: int, bufs: _Buffers, op_set: int, cols: tuple[int, int],
                ks: tuple[int, int], last: bool, a: Value, b: Value, trans_b: bool,
                batch_index: tuple[int, ...], m: int, dq: DequantWeights | None,
                epilogue: tuple, source: str) -> TileSteps:
    """k-step ``ks`` of the vector unit's columns ``cols`` on ``core``: its A and B
    tiles, a :class:`~compiler.ir.ops.VectorMatMul`, and after the last step the
    epilogue, as an array's tile has them."""
    lane = [(0, cols)]
    out, group, order, cast_needed = epilogue
    finish = _epilogue(ctx, core, bufs, 0, out, group, order, batch_index, (0, m), lane,
                       cast_needed, source)
    return TileSteps(
        _loader(ctx, core, bufs, op_set, bufs.a[op_set], a, b, trans_b, batch_index, (0, m),
                ks, lane, source, None, dq),
        _multiplier(ctx, core, bufs, op_set, bufs.a[op_set], 0, m, ks, lane, ks[0] > 0,
                    source, dq, vector=True),
        finish if last else (lambda: None))


def operand_arena(ctx: Context, core: int, base: int) -> Arena:
    """The scratchpad of ``core`` from byte ``base`` on, for a matmul kernel's buffers.

    Each matmul kernel places its buffers where the previous one's end (wrapping to 0
    when they do not fit), as a compiler that prefetches the next op's weights gives
    that prefetch buffers of its own: the SRAM dependencies then let the next kernel's
    first weight loads start as soon as the DMA queues reach them, while this one's
    last multiplies still read their tiles. With the same buffers, those loads
    waited for the multiplies that last read each byte (a one-row-weight GEMV on
    ``tpu-v4`` left the arrays idle ~1,200 cycles at each projection's start, the DRAM
    half idle meanwhile)."""
    arena = Arena(sram_space(core), ctx.capacity)
    arena.top = base
    return arena


def _tagged(ctx: Context, steps: TileSteps, panel: int,
            ranges: list[tuple[int, int, int]]) -> TileSteps:
    """``steps`` noting the commands each phase emits as ``panel``'s."""
    def tag(phase: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            first = ctx.em.count
            phase()
            if ctx.em.count > first:
                ranges.append((first, ctx.em.count, panel))
        return run
    return TileSteps(tag(steps.load), tag(steps.compute), tag(steps.store))


class _Buffers:
    def __init__(self) -> None:
        self.a: list[SramRef] = []
        self.lane_a: list[list[SramRef]] = []  # split tiles: each array's A, per set
        self.b: list[list[SramRef]] = []
        self.scales: list[list[SramRef]] = []  # dequantized weights: their groups' scales
        self.wide: list[list[SramRef]] = []  # B tiles the vector unit dequantized
        self.acc: list[list[SramRef]] = []
        self.out: list[list[SramRef]] = []
        self.epilogue: list[list[tuple[dict[int, SramRef], dict[int, SramRef]]]] = []
        self.end = 0  # the scratchpad byte after the last buffer


def _allocate(ctx: Context, arena: Arena, tiling, dtypes: tuple[DType, DType],
              acc_dtype: DType, out: Value, cast_needed: bool, group,
              rank: int, dq: DequantWeights | None = None, widen: bool = False,
              split_a: tuple[int, int] = (0, 0)) -> _Buffers:
    """SRAM of one core (in ``arena``): A and B tiles in their operands' dtypes
    (``dtypes``; weight-only int8 B tiles stay int8, int4 ones packed; dequantized ones
    with their scales; with ``widen``, the vector unit's dequantized copies in A's
    dtype; with ``split_a`` (arrays, k rows), an A tile per set for each array of a
    tile split by K), accumulators, outputs and the epilogue's buffers."""
    mt, kt, nt = tiling.mt, tiling.kt, tiling.nt
    bufs = _Buffers()
    a_tiles = tiling.op_sets * (tiling.k_steps if tiling.a_resident else 1)
    bufs.a = [arena.alloc((mt, kt), dtypes[0], "matmul A tile") for _ in range(a_tiles)]
    bufs.lane_a = [[arena.alloc((mt, split_a[1]), dtypes[0], "matmul split-K A tile")
                    for _ in range(split_a[0])] for _ in range(tiling.op_sets)]
    for _ in range(tiling.op_sets):
        if dq is not None and dq.packed:
            bufs.b.append([dq.allocate_packed(arena, kt, nt) for _ in range(tiling.arrays)])
        else:
            bufs.b.append([arena.alloc((kt, nt), dtypes[1], "matmul B tile")
                           for _ in range(tiling.arrays)])
        if dq is not None:
            bufs.scales.append([dq.allocate_scales(arena, kt, nt)
                                for _ in range(tiling.arrays)])
        if widen:
            bufs.wide.append([arena.alloc((kt, nt), dtypes[0], "matmul dequantized B tile")
                              for _ in range(tiling.arrays)])
    epi_tile = (1,) * (rank - 2) + (mt, nt)
    for _ in range(tiling.acc_sets):
        bufs.acc.append([arena.alloc((mt, nt), acc_dtype, "accumulator")
                         for _ in range(tiling.arrays)])
        bufs.out.append([arena.alloc((mt, nt), out.dtype, "matmul output")
                         for _ in range(tiling.arrays)] if cast_needed else [])
        if group is not None:
            lays = [layout(ctx, group, epi_tile, arena, 1, {out.id})
                    for _ in range(tiling.arrays)]
            bufs.epilogue.append([(lay.buffers[0], lay.scratch[0]) for lay in lays])
    bufs.end = arena.top
    return bufs


def _loader(ctx: Context, core: int, bufs: _Buffers, op_set: int, a_tile: SramRef | None,
            a: Value, b: Value, trans_b: bool, batch_index: tuple[int, ...],
            rows: tuple[int, int], ks: tuple[int, int], cols: list[tuple[int, tuple[int, int]]],
            source: str, staged: Callable[[], SramRef] | None = None,
            dq: DequantWeights | None = None,
            staged_b: tuple[StagedB, int, int] | None = None):
    """A k-step's loads: the A tile into ``a_tile`` (None: it is resident already), a B
    tile per array. ``staged``: A comes from shared SRAM (:mod:`.matmul_staging`);
    ``staged_b``: B tiles kept in shared SRAM, with this tile's column tile and k-step."""
    def load() -> None:
        # B tiles first: each waits only for its own array to be done with its buffer,
        # the shared A tile for every array, and a DMA queue issues in order
        kk = ks[1] - ks[0]
        for j, (c0, c1) in cols:
            if dq is not None and dq.packed:  # with its scales
                dq.load_packed(ctx, bufs.b[op_set][j], bufs.scales[op_set][j], ks, (c0, c1),
                               core, source)
                continue
            if dq is not None:
                dq.load_scales(ctx, bufs.scales[op_set][j], ks, (c0, c1), core, source)
            b_buf = sub(bufs.b[op_set][j], (kk, c1 - c0))

            def from_dram(b_buf: SramRef = b_buf, c0: int = c0, c1: int = c1) -> None:
                if not trans_b:
                    load_box(ctx, b, _operand_box(b, batch_index, ks, (c0, c1)), b_buf,
                             core, source, "load")
                else:
                    load_transposed(ctx, b, _operand_box(b, batch_index, (c0, c1), ks), b_buf,
                                    core, source)
            if staged_b is None:
                from_dram()
            else:
                shared, column, step = staged_b
                shared.load(ctx, (column, step, j), b_buf, from_dram, core, source)
        if a_tile is not None and staged is not None:
            ctx.em.emit(ctx.em.dma(core, "load"),
                        Copy(staged(), sub(a_tile, (rows[1] - rows[0], kk))), source)
        elif a_tile is not None:
            load_box(ctx, a, _operand_box(a, batch_index, rows, ks),
                     sub(a_tile, (rows[1] - rows[0], kk)), core, source, "load")
    return load


def _multiplier(ctx: Context, core: int, bufs: _Buffers, op_set: int, a_tile: SramRef,
                q: int, mm: int, ks: tuple[int, int], cols: list[tuple[int, tuple[int, int]]],
                accumulate: bool, source: str, dq: DequantWeights | None = None,
                vector: bool = False):
    """A k-step's multiplies, an array per column tile; with ``bufs.wide`` (weights the
    vector unit dequantizes) each B tile is first turned into A's dtype there: by the
    dequantization its format needs, or widened (weight-only int8, scaled after).
    ``vector``: the one column tile is the vector unit's share, multiplied there."""
    def compute() -> None:
        kk = ks[1] - ks[0]
        a_buf = sub(a_tile, (mm, kk))
        for j, (c0, c1) in cols:
            acc = sub(bufs.acc[q][j], (mm, c1 - c0))
            if bufs.wide:
                wide = sub(bufs.wide[op_set][j], (kk, c1 - c0))
                ctx.em.emit(vpu_engine(core), dq.dequantize(
                    bufs.b[op_set][j], bufs.scales[op_set][j], wide, ks) if dq is not None
                    else Cast(sub(bufs.b[op_set][j], (kk, c1 - c0)), wide), source)
                op = MatMul(a_buf, wide, acc, accumulate)
            elif dq is not None:
                op = dq.matmul(a_buf, bufs.b[op_set][j], bufs.scales[op_set][j], acc, ks,
                               accumulate)
            else:
                op = MatMul(a_buf, sub(bufs.b[op_set][j], (kk, c1 - c0)), acc, accumulate)
            if vector:
                ctx.em.emit(vpu_engine(core), VectorMatMul(op.a, op.b, op.out, op.accumulate,
                                                           op.scales, op.dequant), source)
                continue
            ctx.em.emit(mxu_engine(core, j), op, source)
    return compute


def _epilogue(ctx: Context, core: int, bufs: _Buffers, q: int, out: Value, group,
              order: Order | None, batch_index: tuple[int, ...], rows: tuple[int, int],
              cols: list[tuple[int, tuple[int, int]]], cast_needed: bool, source: str):
    def store() -> None:
        mm = rows[1] - rows[0]
        for j, (c0, c1) in cols:
            box = tuple((i, i + 1) for i in batch_index) + (rows, (c0, c1))
            finish_tile(ctx, core, sub(bufs.acc[q][j], (mm, c1 - c0)),
                        sub(bufs.out[q][j], (mm, c1 - c0)) if cast_needed else None, out,
                        group, bufs.epilogue[q][j] if group else None, order, box, source)
    return store
