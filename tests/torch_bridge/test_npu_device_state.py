"""torch.npu RNG state round-trip and reserved memory (as torch_openreg tests them)."""

import torch

import torch_bridge  # noqa: F401  (registers the npu device)


def test_rng_state_round_trip_gives_same_numbers() -> None:
    torch.npu.manual_seed(7)
    state = torch.npu.get_rng_state()
    first = torch.randn(4, device="npu").cpu()
    torch.npu.set_rng_state(state)
    second = torch.randn(4, device="npu").cpu()
    assert torch.equal(first, second)
    torch.npu.set_rng_state_all(torch.npu.get_rng_state_all())


def test_memory_reserved_tracks_allocated() -> None:
    x = torch.empty(1024, device="npu")
    assert torch.npu.memory_reserved() >= 4096
    assert torch.npu.memory_reserved() == torch.npu.memory_allocated()
    assert torch.npu.max_memory_reserved() >= torch.npu.memory_reserved()
    torch.npu.empty_cache()
    del x


def test_properties_and_mem_info_come_from_the_preset() -> None:
    cfg = torch.npu.get_config()
    props = torch.npu.get_device_properties(0)
    assert props.total_memory == cfg.dram.capacity_bytes
    assert props.multi_processor_count == cfg.cores
    assert torch.npu.get_device_name(0) == cfg.name
    free, total = torch.npu.mem_get_info()
    assert total == cfg.dram.capacity_bytes
    assert free == total - torch.npu.memory_allocated()
    x = torch.empty(256, device="npu")
    stats = torch.npu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.npu.memory_allocated()
    assert stats["allocated_bytes.all.peak"] == torch.npu.max_memory_allocated()
    del x
