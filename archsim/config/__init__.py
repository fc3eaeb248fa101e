"""Hardware descriptions: presets, loading, validation, overrides. No SimPy, no torch."""

from archsim.config.energy import EnergyConfig, PowerConfig
from archsim.config.load import (
    DEFAULT_PRESET,
    config_from_dict,
    config_to_dict,
    load_config,
    preset_names,
)
from archsim.config.model import (
    CoreConfig,
    DmaConfig,
    DramConfig,
    HostLinkConfig,
    InterconnectConfig,
    MatrixConfig,
    NocConfig,
    NpuConfig,
    RuntimeConfig,
    ScratchpadConfig,
    SharedSramConfig,
    VectorConfig,
    VectorCostsConfig,
)

__all__ = [
    "DEFAULT_PRESET", "CoreConfig", "DmaConfig", "DramConfig", "EnergyConfig", "HostLinkConfig", "PowerConfig",
    "InterconnectConfig", "MatrixConfig", "NocConfig", "NpuConfig", "RuntimeConfig", "ScratchpadConfig", "SharedSramConfig",
    "VectorConfig", "VectorCostsConfig", "config_from_dict", "config_to_dict",
    "load_config", "preset_names",
]
