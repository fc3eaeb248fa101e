"""Eager ``topk`` / ``sort`` / ``max.dim`` on the npu with tied values: torch does not
fix which tied element comes first, so the device's indices need only be a valid order
(they were compared with CPU's exactly: a false NumericsError)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import torch_bridge  # noqa: F401 - registers the npu device
from archsim.errors import NumericsError
from torch_bridge import numerics, runtime
from torch_bridge.tie_order import with_device_tie_order

aten = torch.ops.aten
INF = float("inf")


@pytest.fixture(autouse=True)
def _on_atom():
    with runtime.use_config("atom"):
        yield


def _valid(source: torch.Tensor, values: torch.Tensor, indices: torch.Tensor,
           dim: int = -1) -> None:
    assert_close(source.gather(dim, indices), values)


class TestOnTheDevice:
    def test_topk_of_tied_minus_infinities(self) -> None:
        x = torch.tensor([[.5, -INF, .1, -INF, -INF, .3]])
        got = torch.topk(x.to("npu"), 4)
        assert_close(got.values.cpu(), torch.topk(x, 4).values)
        _valid(x, got.values.cpu(), got.indices.cpu())

    @pytest.mark.parametrize("descending", [False, True])
    def test_sort_with_many_ties(self, descending) -> None:
        torch.manual_seed(0)
        x = torch.randn(2, 100)
        x[x < 0.5] = -INF
        got = torch.sort(x.to("npu"), descending=descending)
        assert_close(got.values.cpu(), torch.sort(x, descending=descending).values)
        _valid(x, got.values.cpu(), got.indices.cpu())
        assert (got.indices.cpu().sort().values == torch.arange(100)).all()


class TestTheCheck:
    """:func:`with_device_tie_order` on hand-made device results."""

    SOURCE = torch.tensor([[.5, -INF, .1, -INF, -INF, .3]])
    CPU = (torch.tensor([[.5, .3, .1, -INF]]), torch.tensor([[0, 5, 2, 1]]))

    def check(self, indices: list[int], op=aten.topk.default, args=(SOURCE, 4)) -> bool:
        """Whether the device's ``indices`` replace CPU's."""
        device = (self.CPU[0], torch.tensor([indices]))
        cpu = with_device_tie_order(op, args, {}, device, self.CPU)
        return cpu[1] is device[1]

    def test_another_tied_element_is_accepted(self) -> None:
        assert self.check([0, 5, 2, 4])

    def test_an_index_at_another_value_is_refused(self) -> None:
        assert not self.check([0, 5, 1, 2])

    def test_an_element_picked_twice_is_refused(self) -> None:
        assert not self.check([0, 5, 2, 2])

    def test_an_index_out_of_range_is_refused(self) -> None:
        assert not self.check([0, 5, 2, 6])

    def test_a_stable_sort_fixes_the_order(self) -> None:
        source = torch.tensor([[1., 0., 1.]])
        cpu = (torch.tensor([[0., 1., 1.]]), torch.tensor([[1, 0, 2]]))
        device = (cpu[0], torch.tensor([[1, 2, 0]]))
        stable = with_device_tie_order(aten.sort.stable, (source,), {"stable": True},
                                       device, cpu)
        free = with_device_tie_order(aten.sort.default, (source,), {}, device, cpu)
        assert (stable[1] is cpu[1], free[1] is device[1]) == (True, True)

    def test_max_over_a_dim_keeps_its_dim_out(self) -> None:
        source = torch.tensor([[1., 3., 3.], [2., 2., 0.]])
        cpu = (torch.tensor([3., 2.]), torch.tensor([1, 0]))
        device = (cpu[0], torch.tensor([2, 1]))
        assert with_device_tie_order(aten.max.dim, (source, 1), {}, device, cpu)[1] \
            is device[1]

    def test_wrong_indices_are_still_a_numerics_error(self) -> None:
        device = (self.CPU[0], torch.tensor([[0, 5, 1, 2]]))
        with pytest.raises(NumericsError, match="output 1: torch.int64 values differ"):
            numerics.check_first_call(aten.topk.default, (self.SOURCE, 4), {}, device)


@pytest.mark.filterwarnings("ignore::torch_bridge.fallback.HostFallbackWarning")
def test_sampling_generation_on_the_npu() -> None:
    """``top_k`` fills the logits with -inf and ``top_p`` sorts them: many ties (it
    raised NumericsError in ``aten.sort``). Sampling itself is host work."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval().to("npu")
    prompt = torch.randint(0, 64, (1, 5)).to("npu")
    out = model.generate(prompt, do_sample=True, top_k=10, top_p=0.9, max_new_tokens=6,
                         pad_token_id=0)
    assert out.shape == (1, 11) and out.device.type == "npu"
