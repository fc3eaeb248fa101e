"""Property: whatever the input, archsim answers with a result or an ArchsimError (one
line on the CLI) within a time limit — never a bare exception, a hang or a silently
wrong number. Random config overrides, mutated and valid programs, CLI argument lists.
"""

from __future__ import annotations

import math
import signal
from contextlib import contextmanager

import pytest
import torch
from hypothesis import event as _event, given, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st

from archsim.cli.main import main
from archsim.config import load_config
from archsim.errors import ArchsimError
from archsim.simulator import Simulator
from compiler.ir.text import parse_program, print_program

SECONDS = 20


def event(text: str) -> None:
    """Count an outcome in Hypothesis' statistics (``--hypothesis-show-statistics``);
    nothing when called from a plain test."""
    if currently_in_test_context():
        _event(text)


@contextmanager
def time_limit(seconds: int = SECONDS):
    def hung(*_):
        raise AssertionError(f"no answer within {seconds} s")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _numeric_fields() -> list[str]:
    import dataclasses

    paths = []

    def walk(obj, prefix=""):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, prefix + f.name + ".")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                paths.append(prefix + f.name)
    walk(load_config("tiny"))
    return paths


FIELDS = _numeric_fields()
VALUES = st.one_of(
    st.integers(min_value=-2 ** 70, max_value=2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 2 ** 62, 10 ** 308, 1e-300, "12", "x", None, [], True]))


@given(st.dictionaries(st.sampled_from(FIELDS), VALUES, min_size=1, max_size=4))
def test_config_overrides_give_a_config_or_a_config_error(overrides) -> None:
    with time_limit():
        try:
            config = load_config("tiny").with_overrides(overrides)
        except ArchsimError as exc:
            event(f"ArchsimError: {type(exc).__name__}")
            return
    event("accepted")
    for path, value in overrides.items():  # accepted values are finite and in range
        assert not (isinstance(value, float) and not math.isfinite(value)), path
    assert config.dram_bandwidth_bytes_per_s > 0 and config.peak_flops > 0


VALID = """program fuzz target=tiny
dram %A : f32[4,8] in
dram %B : f32[8,4] in
dram %C : f32[4,4] out
 0: core0.dma0 load   %A[0:4, 0:8] -> sram0[0x000000] f32[4,8]
 1: core0.dma1 load   %B[0:8, 0:4] -> sram0[0x000100] f32[8,4]
 2: core0.mxu0 matmul sram0[0x000000] f32[4,8], sram0[0x000100] f32[8,4] -> sram0[0x000200] f32[4,4] after 0,1
 3: core0.vpu  unary  relu sram0[0x000200] f32[4,4] -> sram0[0x000300] f32[4,4] after 2
 4: core0.dma0 store  sram0[0x000300] f32[4,4] -> %C[0:4, 0:4] after 3
"""


def _answer(text: str) -> None:
    """Parse, verify and simulate ``text``: a result or an ArchsimError, in time."""
    config = load_config("tiny")
    with time_limit():
        try:
            program = parse_program(text)
            result = Simulator(config).run(program)
        except ArchsimError as exc:
            event(f"ArchsimError: {type(exc).__name__}")
            return
    event("simulated")
    assert result.total_cycles >= 0
    # a valid program round-trips through the text form with the same cycles
    again = Simulator(config).run(parse_program(print_program(program)))
    assert again.total_cycles == result.total_cycles


@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 3),
                          st.text(alphabet="0123456789:,[]%x.-afsrm \n#", max_size=6)),
                min_size=1, max_size=4))
def test_mutated_programs_give_a_result_or_an_archsim_error(edits) -> None:
    text = VALID
    for at, cut, insert in edits:
        text = text[:at] + insert + text[at + cut:]
    _answer(text)


@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64))
def test_valid_matmul_programs_end_no_earlier_than_their_roofline(m, k, n) -> None:
    config = load_config("tiny")
    text = VALID.replace("f32[4,8]", f"f32[{m},{k}]").replace("f32[8,4]", f"f32[{k},{n}]") \
        .replace("f32[4,4]", f"f32[{m},{n}]").replace("%A[0:4, 0:8]", f"%A[0:{m}, 0:{k}]") \
        .replace("%B[0:8, 0:4]", f"%B[0:{k}, 0:{n}]").replace("%C[0:4, 0:4]", f"%C[0:{m}, 0:{n}]")
    text = text.replace("0x000100", "0x004000").replace("0x000200", "0x008000") \
        .replace("0x000300", "0x00c000")
    with time_limit():
        try:
            result = Simulator(config).run(parse_program(text))
        except ArchsimError as exc:  # e.g. a tile larger than tiny's scratchpad
            event(f"ArchsimError: {type(exc).__name__}")
            return
    event("simulated")
    flops = 2 * m * k * n
    dram = 4 * (m * k + k * n + m * n)
    roofline = max(flops / (config.peak_flops / config.clock_hz),
                   dram / (config.dram_bandwidth_bytes_per_s / config.clock_hz))
    assert result.total_cycles >= math.floor(roofline)


TOKENS = ["run", "show", "report", "configs", "workloads", "compare", "validate", "sweep",
          "gemm", "conv", "attention", "--seq", "--batch", "--layers", "-c", "tiny", "atom",
          "--set", "core.matrix.rows=0", "dram.channels=nan", "--out", "/dev/null", "-q",
          "--json", "--perf-only", "--dtype", "bf16", "16", "-3", "0", "x", "missing.rbln",
          "--explain", "--help"]


@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=6))
def test_cli_argument_lists_exit_cleanly(argv) -> None:
    with time_limit(60):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage errors and --help
            code = exc.code
    event(f"exit {code}")
    assert code in (0, 1, 2, None)


@pytest.mark.parametrize("text", ["", "program", "program p\n 0: core0.vpu", "\x00\x01",
                                  "program p\ndram %A : f32[99999999999999999999] in\n"])
def test_edge_programs(text: str) -> None:
    _answer(text)


# ---------------------------------------------------------------- random small models

LAYERS = ("linear", "relu", "gelu", "layer_norm", "softmax", "residual", "scale", "transpose",
          "sum", "self_matmul", "tanh", "exp")


class _Random(torch.nn.Module):
    """A chain of ``LAYERS`` on a (batch, rows, features) input; linear widths taken in
    turn from ``widths``."""

    def __init__(self, layers: list[str], rows: int, width: int, widths: list[int]) -> None:
        super().__init__()
        self.layers = layers
        self.mods = torch.nn.ModuleList()
        for name in layers:  # track the (rows, features) shape each layer sees
            if name == "linear":
                out = widths[len(self.mods) % len(widths)]
                self.mods.append(torch.nn.Linear(width, out))
                width = out
            elif name == "layer_norm":
                self.mods.append(torch.nn.LayerNorm(width))
            elif name == "transpose":
                rows, width = width, rows
            elif name == "self_matmul":
                width = rows

    def forward(self, x):
        mods = iter(self.mods)
        elementwise = {"relu": torch.relu, "gelu": torch.nn.functional.gelu,
                       "tanh": torch.tanh, "softmax": lambda t: torch.softmax(t, dim=-1),
                       "residual": lambda t: t + t * 0.5, "scale": lambda t: t * 0.25,
                       "transpose": lambda t: t.transpose(-1, -2),
                       "sum": lambda t: t.sum(dim=-1, keepdim=True) + t,
                       "self_matmul": lambda t: t @ t.transpose(-1, -2) * 0.1,
                       "exp": lambda t: torch.exp(-t.abs())}
        for name in self.layers:
            x = next(mods)(x) if name in ("linear", "layer_norm") else elementwise[name](x)
        return x


@settings(max_examples=max(4, settings.default.max_examples // 8))
@given(st.lists(st.sampled_from(LAYERS), min_size=1, max_size=5), st.integers(1, 2),
       st.integers(1, 24), st.integers(1, 40), st.lists(st.integers(1, 40), min_size=1,
                                                        max_size=3))
def test_random_small_models_match_torch_or_give_an_archsim_error(layers, batch, rows, width,
                                                                  widths) -> None:
    """Compile and run a random chain of layers: the numbers equal torch's on CPU and the
    run ends no earlier than its DRAM roofline, or the answer is an ArchsimError."""
    import compiler

    torch.manual_seed(0)
    model = _Random(layers, rows, width, widths).eval()
    x = torch.randn(batch, rows, width)
    config = load_config("tiny")
    with time_limit(60):
        try:
            compiled = compiler.compile_graph(compiler.export_model(model, (x,)), config)
            (got,), result = compiled.run(x)
        except ArchsimError as exc:
            event(f"ArchsimError: {type(exc).__name__}")
            return
    event("compiled and ran")
    want = model(x)
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    dram = 4 * (x.numel() + want.numel())
    assert result.total_cycles >= math.floor(
        dram / (config.dram_bandwidth_bytes_per_s / config.clock_hz))
