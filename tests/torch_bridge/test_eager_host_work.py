"""No host work goes unannounced on the eager device: ``cat`` with empty operands (a KV
cache before its first token, Phi-3's empty rotary pass-through) runs on the device, and
every path that does run an op on the host warns once per op and reason and is listed by
the profiler."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import pytest
import torch
from torch.testing import assert_close

import torch_bridge
from torch_bridge import fallback
from torch_bridge.model_outputs import tensor_leaves

Op = Callable[..., torch.Tensor]

X = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
EMPTY_1D = torch.tensor([])  # transformers' DynamicLayer before its first update

CATS: dict[str, Op] = {
    "empty_1d_first": lambda x, e: torch.cat([e, x], dim=-2),
    "empty_1d_between": lambda x, e: torch.cat([x, e, x], dim=1),
    "empty_slice": lambda x, e: torch.cat([x[..., :2], x[..., 4:]], dim=-1),
    "all_empty": lambda x, e: torch.cat([e, e]),
    "out": lambda x, e: torch.cat([e, x], dim=0, out=torch.empty(0, device=x.device)),
}


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch) -> None:
    monkeypatch.setattr(fallback, "_warned_ops", set())


def _run(fn: Op, *args: torch.Tensor) -> tuple[torch.Tensor, torch_bridge.profile, list]:
    with warnings.catch_warnings(record=True) as caught, torch_bridge.profile() as prof:
        warnings.simplefilter("always")
        got = fn(*(a.to("npu") for a in args))
    return got, prof, [w for w in caught if issubclass(w.category,
                                                      torch_bridge.HostFallbackWarning)]


@pytest.mark.parametrize("name", list(CATS))
def test_cat_with_empty_operands_runs_on_the_device(name: str) -> None:
    fn = CATS[name]
    got, prof, warned = _run(fn, X, EMPTY_1D)
    want = fn(X, EMPTY_1D)
    assert got.device.type == "npu" and got.dtype == want.dtype
    assert_close(got.cpu(), want, rtol=0, atol=0)
    assert not prof.result.host_work and not warned
    assert (prof.result.device_cycles > 0) == (want.numel() > 0)  # the copy is timed


def test_cat_of_one_kept_operand_is_a_fresh_tensor() -> None:
    x = X.to("npu")
    got = torch.cat([EMPTY_1D.to("npu"), x])
    x.add_(1)
    assert_close(got.cpu(), X, rtol=0, atol=0)


def test_cat_keeps_torch_errors_and_dtypes_of_empty_operands() -> None:
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([torch.zeros(2, 0).to("npu"), torch.ones(3, 4).to("npu")], dim=1)
    half = X.half()
    got, prof, warned = _run(lambda e, h: torch.cat([e, h]), EMPTY_1D, half)
    assert got.dtype == torch.float32  # the empty float32 operand still promotes
    assert_close(got.cpu(), half.float())
    assert [r.name for r in prof.result.host_work] == ["aten.cat"]
    assert len(warned) == 1


HOST_PATHS: dict[str, tuple[Op, tuple[torch.Tensor, ...], str]] = {
    "no_npu_kernel": (lambda x: torch.linalg.qr(x)[0], (torch.randn(4, 4),),
                      "aten.linalg_qr.out has no npu kernel"),
    "device_dtype": (lambda x: x * 3, (torch.randn(4, dtype=torch.float64),),
                     "aten.mul.Tensor runs on the host: dtype torch.float64"),
    "zero_element_operand": (lambda b, a, m: torch.addmm(b, a, m),
                             (torch.randn(4), torch.randn(5, 0), torch.randn(0, 4)),
                             "aten.addmm runs on the host: a zero-element operand"),
    "out_of_another_shape": (lambda x: torch.exp(x, out=torch.empty(3, device=x.device)),
                             (torch.randn(4),), "aten.exp.out runs on the host: result"),
}


@pytest.mark.parametrize("name", list(HOST_PATHS))
def test_every_host_path_warns_once_and_is_listed(name: str) -> None:
    fn, args, message = HOST_PATHS[name]
    first, prof, warned = _run(fn, *args)
    again, _, warned_again = _run(fn, *args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own (resizing a non-empty out=)
        want = fn(*args)
    assert_close(first.cpu(), want)
    assert_close(again.cpu(), want)
    assert [str(w.message)[:len(message)] for w in warned] == [message]
    assert warned[0].filename == __file__
    assert not warned_again
    # the host work crosses the host link twice (inputs up, results down): at least its
    # latency each way, which a model charging only the host's FLOPs would miss
    latency = prof.result.config.host_link.latency_cycles
    assert prof.result.host_work and prof.result.host_cycles >= 2 * latency


T = pytest.importorskip("transformers")
_LM = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
       "intermediate_size": 128, "vocab_size": 500}
MODELS = {  # use_cache as by default: each layer's KV cache starts empty
    "phi3": lambda: T.Phi3ForCausalLM(T.Phi3Config(**_LM, num_key_value_heads=2,
                                                   pad_token_id=0)),
    "bart": lambda: T.BartForConditionalGeneration(T.BartConfig(
        encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
        vocab_size=500, max_position_embeddings=64)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_cached_forward_has_no_host_work_but_reading_a_value(name: str) -> None:
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    ids = torch.randint(0, 500, (1, 12))
    with torch.no_grad():
        want = tensor_leaves(model(ids))
        got, prof, warned = _run(lambda m, i: tensor_leaves(m(i)),
                                 copy.deepcopy(model).to("npu"), ids)
    assert len(got) == len(want) > 2  # logits and the filled KV cache
    for g, w in zip(got, want):
        assert_close(g.cpu(), w, rtol=1e-4, atol=1e-4)
    assert {r.name for r in prof.result.host_work} <= {"aten._local_scalar_dense"}
    assert not warned
