"""Figures render headless (Agg canvas, no pyplot) with titles, axis labels and legends;
SRAM occupancy follows its documented definition."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from reports.figures import (
    FIGURES,
    pareto_figure,
    pareto_front,
    save_figures,
    roofline_figure,
    sram_occupancy,
    sram_occupancy_figure,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_has_title_labels_and_legend(name, mm_result):
    fig = FIGURES[name](mm_result)
    ax = fig.axes[0]
    assert ax.get_title().strip()
    assert ax.get_xlabel().strip()
    assert ax.get_ylabel().strip() or ax.get_yticklabels()
    assert ax.get_legend() is not None
    fig.canvas.draw()  # renders without a display


def test_timeline_has_one_row_per_used_engine(mm_result):
    from reports.figures import timeline_figure

    ax = timeline_figure(mm_result).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == len(mm_result.engine_busy_cycles)
    assert "core0 neural engine mxu0" in labels and "chip host DMA" in labels


def test_save_figures_writes_pngs(tmp_path, mm_result):
    paths = save_figures(mm_result, tmp_path / "figs")
    assert sorted(p.stem for p in paths) == sorted([*FIGURES, "power"])  # + power over time
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_pyplot_and_no_display_needed():
    """Rendering uses the Agg canvas without pyplot's global state; importing
    ``reports`` alone does not load matplotlib."""
    code = (
        "import sys, reports\n"
        "assert 'matplotlib' not in sys.modules\n"
        "from archsim.config import load_config\n"
        "from archsim.simulator import Simulator\n"
        "from compiler.ir.builder import ProgramBuilder\n"
        "from compiler.ir.dtypes import DType\n"
        "from compiler.ir.operands import SramRef\n"
        "from compiler.ir.ops import Load\n"
        "b = ProgramBuilder('p'); b.tensor('x', (8, 8), DType.f32, 'in')\n"
        "b.add('core0.dma0', Load(b.ref('x'), SramRef('sram0', 0, (8, 8), DType.f32)))\n"
        "r = Simulator(load_config('tiny')).run(b.build(), verify=False)\n"
        "import io; reports.timeline_figure(r).savefig(io.BytesIO(), format='png')\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    env = {**os.environ, "DISPLAY": "", "MPLBACKEND": ""}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)


def test_sram_occupancy_chain_hand_derived(chain_result):
    # The load writes sram0[0:256) at cycle 0; the multiply updates it in place
    # (51-69); the store reads it until 120: 256 live bytes from 0 to 120.
    (occ,) = sram_occupancy(chain_result)
    assert occ.space == "sram0" and occ.capacity_bytes == 64 * 1024
    assert occ.cycles.tolist() == [0, 120]
    assert occ.live_bytes.tolist() == [256, 0]


def test_sram_occupancy_never_exceeds_the_address_high_water(mm_result):
    for occ in sram_occupancy(mm_result):
        assert 0 < occ.max_live_bytes <= mm_result.sram_peak_bytes[occ.space]
        assert occ.live_bytes[-1] == 0
        assert np.all(np.diff(occ.cycles) > 0)


def test_pareto_front():
    points = [(1.0, 10.0), (2.0, 5.0), (3.0, 6.0), (4.0, 1.0), (4.0, 2.0)]
    assert pareto_front(points) == [0, 1, 3]


def test_pareto_figure(mm_result, simulate, programs):
    results = [mm_result, simulate(programs.matmul_softmax(), "atom")]
    ax = pareto_figure(results, cost="peak_flops").axes[0]
    assert ax.get_xlabel() == "peak matrix TFLOP/s" and ax.get_ylabel() == "latency (us)"
    assert {t.get_text() for t in ax.texts} == {"tiny", "atom"}
    assert ax.get_xscale() == "log"  # 0.064 vs 32.8 TFLOP/s
    with pytest.raises(ValueError, match="unknown cost 'price'"):
        pareto_figure(results, cost="price")


def test_the_summary_and_the_figure_state_one_sram_peak(mm_result):
    """'SRAM peak' is the highest address used, in the text and in the figure's legend
    (drawn dashed); the most bytes live at once is named as such."""
    from reports.summary import summary
    from reports.text import format_bytes

    text = summary(mm_result)
    figure = sram_occupancy_figure(mm_result)
    legend = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    occupancy = {occ.space: occ for occ in sram_occupancy(mm_result)}
    assert legend
    for line in legend:  # spaces with identical curves share a line
        occ = occupancy[line.split(":")[0].split(" ")[0]]
        peak = format_bytes(mm_result.sram_peak_bytes[occ.space])
        assert f"SRAM peak {peak} of" in line
        assert f"at most {occ.max_live_bytes / 1024:.1f} KiB live" in line
        assert peak in text.split("SRAM peak (highest byte address used)")[1]
    dashed = [ln for ln in figure.axes[0].get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == len(legend)


def test_roofline_labels_name_their_own_points_and_never_overlap():
    import torch

    import archsim
    from archsim.app.models import GPT2
    from reports.ops import op_rows

    with torch.device("meta"):
        model = GPT2(layers=2).eval()
    result = archsim.estimate(model, torch.zeros(1, 64, dtype=torch.long, device="meta"),
                              "atom", all_layers=True)
    figure = roofline_figure(result)
    ax = figure.axes[0]
    labels = [t for t in ax.texts if t.get_text()]
    assert len(labels) >= 5
    rows = {r.source: r for r in op_rows(result)}
    renderer = figure.canvas.get_renderer()
    from matplotlib.text import Text

    boxes = [Text.get_window_extent(t, renderer) for t in labels]
    frame = ax.get_window_extent(renderer)
    for label, box in zip(labels, boxes):
        row = rows[label.get_text()]  # the label is at its op's point
        assert label.xy == (row.arithmetic_intensity, row.achieved_flops)
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1
    legend = ax.get_legend().get_window_extent(renderer)
    for i, a in enumerate(boxes):
        assert not any(a.overlaps(b) for b in boxes[i + 1:])
        assert not a.overlaps(legend)
    assert f"the {len(labels)} longest ops named" in ax.get_title()
