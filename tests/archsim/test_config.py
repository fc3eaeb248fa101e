"""Hardware descriptions: presets, validation messages, overrides."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from archsim.config import DEFAULT_PRESET, config_to_dict, load_config, preset_names
from archsim.errors import ConfigError


def test_presets_are_listed_default_first() -> None:
    names = preset_names()
    assert names[0] == DEFAULT_PRESET == "atom"
    assert set(names) == {"atom", "tpu-v3", "tpu-v4", "ascend-910b", "ascend-910b4", "edge",
                          "tiny"}


@pytest.mark.parametrize("name", preset_names())
def test_each_preset_states_its_peak_numbers_correctly(name: str) -> None:
    """The header comment of each preset states peak FLOP/s and DRAM bandwidth so users
    can check them; they must agree with what the fields imply."""
    text = resources.files("archsim.config.presets").joinpath(f"{name}.yaml").read_text()
    stated = re.search(r"peak matrix FLOP/s: ([\d.]+) TFLOP/s\s+DRAM bandwidth: ([\d.]+) GB/s",
                       text)
    assert stated, f"{name}.yaml does not state its peak numbers"
    config = load_config(name)
    assert config.name == name
    assert round(config.peak_flops / 1e12, 2) == float(stated.group(1))
    assert config.dram_bandwidth_bytes_per_s / 1e9 == pytest.approx(float(stated.group(2)))


@pytest.mark.parametrize("name", preset_names())
def test_a_copied_preset_file_is_the_same_chip_as_the_preset(name: str, tmp_path) -> None:
    """`cp presets/tpu-v4.yaml my.yaml; -c my.yaml` must be tpu-v4: nothing (links,
    energy, area) is merged into a preset loaded by name that its file does not say."""
    text = resources.files("archsim.config.presets").joinpath(f"{name}.yaml").read_text()
    copy = tmp_path / "mine.yaml"
    copy.write_text(text)
    assert load_config(copy) == load_config(name)
    assert load_config(copy).interconnect is not None  # every shipped chip has links


@pytest.mark.parametrize("text, hz", [("1e9", 1_000_000_000), ("2e9", 2_000_000_000),
                                      ("1.2e9", 1_200_000_000), ("1.0e+9", 1_000_000_000),
                                      ("940000000.0", 940_000_000), ("1.05E9", 1_050_000_000)])
def test_an_integral_clock_in_exponent_form_is_an_integer(text: str, hz: int,
                                                          tmp_path) -> None:
    """YAML 1.1 reads 1e9 (no dot or exponent sign) as a string: --set clock_hz=1e9 and
    a file's clock_hz: 1e9 were 'expected an integer, got '1e9'', while 1.0e+9 passed."""
    import yaml

    from_set = load_config("tiny").with_overrides({"clock_hz": yaml.safe_load(text)})
    path = tmp_path / "chip.yaml"
    path.write_text(resources.files("archsim.config.presets").joinpath("tiny.yaml")
                    .read_text().replace("clock_hz: 1000000000", f"clock_hz: {text}", 1))
    for config in (from_set, load_config(path)):
        assert config.clock_hz == hz and type(config.clock_hz) is int


@pytest.mark.parametrize("value", ["1e9.5", "1.5", 1.5, "nan", "inf", "1e9 Hz", True,
                                   "1e5000", "1e2000000"])  # (these took minutes or
                                   # crashed on a 5,001-digit int in the bounds check)
def test_a_clock_that_is_no_whole_number_is_refused(value) -> None:
    with pytest.raises(ConfigError) as info:
        load_config("tiny").with_overrides({"clock_hz": value})
    assert info.value.problems == (f"clock_hz: expected an integer, got {value!r}",)


@pytest.mark.parametrize("value", ["abc", "", "0.5 GB"])
def test_a_float_field_that_is_no_number_echoes_the_text(value: str, tmp_path) -> None:
    """--set dram.efficiency=abc (and the same in a file) read 'expected a number, got
    None': the text parsed to None was echoed instead of the text typed."""
    with pytest.raises(ConfigError) as info:
        load_config("tiny").with_overrides({"dram.efficiency": value})
    assert info.value.problems == (f"dram.efficiency: expected a number, got {value!r}",)
    path = tmp_path / "chip.yaml"
    text = resources.files("archsim.config.presets").joinpath("tiny.yaml").read_text()
    path.write_text(re.sub(r"channel_bandwidth_gb_per_s: [\d.]+",
                           "channel_bandwidth_gb_per_s: abc", text, count=1))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == (
        "dram.channel_bandwidth_gb_per_s: expected a number, got 'abc'",)


def test_public_figures_of_tpu_v3() -> None:
    config = load_config("tpu-v3")
    assert config.peak_flops == pytest.approx(2 * 2 * 128 * 128 * 940e6)
    assert config.dram_bandwidth_bytes_per_s == pytest.approx(450e9)


def test_overrides_by_dotted_path() -> None:
    config = load_config("tiny").with_overrides({"core.matrix.rows": 8, "dram.channels": 4})
    assert config.core.matrix.rows == 8
    assert config.dram.channels == 4
    assert load_config("tiny").core.matrix.rows == 4  # the original is untouched


def test_every_problem_is_reported_at_once() -> None:
    data = config_to_dict(load_config("tiny"))
    data["core"]["matrix"]["rows"] = 0
    data["core"]["matrix"]["dataflow"] = "xs"
    data["core"]["dma"]["engines"] = True
    data["dram"]["colour"] = "blue"
    del data["noc"]["latency_cycles"]
    from archsim.config import config_from_dict

    with pytest.raises(ConfigError) as info:
        config_from_dict(data, source="my.yaml")
    assert info.value.problems == (
        "core.dma.engines: expected an integer, got True",
        "core.matrix.rows: must be > 0, got 0",
        "core.matrix.dataflow: 'xs' is not one of ws, os, is",
        "dram.colour: unknown key (known: kind, channels, channel_bandwidth_gb_per_s, "
        "latency_cycles, capacity_bytes, interleave_bytes, access_granularity_bytes, "
        "efficiency)",
        "noc.latency_cycles: missing",
    )
    assert str(info.value).startswith("my.yaml: 5 problems:\n  - core.dma.engines")


def test_impossible_combinations_are_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        load_config("tiny").with_overrides({
            "core.matrix.input_dtype": "i8",
            "core.scratchpad.banks": 3,
            "dram.interleave_bytes": 40,
        })
    assert info.value.problems == (
        "core.matrix.accumulator_dtype: 'f32' cannot accumulate input_dtype 'i8' "
        "(i8 needs i32, floats need f32)",
        "core.scratchpad.banks: 3 does not divide size_bytes 65536",
        "dram.interleave_bytes: 40 is not a multiple of access_granularity_bytes 16",
    )


def test_bad_override_path_names_the_allowed_fields() -> None:
    with pytest.raises(ConfigError, match=r"core.matrx.rows: no field 'matrx' under core "
                                          r"\(fields: dma, matrix, scratchpad, vector\)"):
        load_config("tiny").with_overrides({"core.matrx.rows": 8})
    with pytest.raises(ConfigError, match=r"core.matrix: is a block, not a value"):
        load_config("tiny").with_overrides({"core.matrix": 8})


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(ConfigError, match=r"unknown preset 'tpu-v9'; presets: atom, "):
        load_config("tpu-v9")


def test_yaml_file_loads_and_reports_its_path(tmp_path) -> None:
    import yaml

    path = tmp_path / "mine.yaml"
    data = config_to_dict(load_config("tiny"))
    path.write_text(yaml.safe_dump(data))
    assert load_config(path) == load_config("tiny")
    data["clock_hz"] = "fast"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"mine.yaml: 1 problem:\n  - clock_hz: expected an "
                                          r"integer, got 'fast'"):
        load_config(path)


def test_broken_yaml_is_one_problem_on_one_line(tmp_path) -> None:
    # PyYAML's message is four lines, the last a caret under an empty line.
    path = tmp_path / "broken.yaml"
    path.write_text("cores: 2\ncore: [\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (f"{path}: 1 problem:\n  - not valid YAML at line 3, column 1: "
                                 f"expected the node content, but found '<stream end>'")


def test_missing_file_is_named(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"no such file: .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
