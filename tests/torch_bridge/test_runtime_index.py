"""Indexing by tensors computed at run time, on the device: ``x[i0, i1]`` on leading
dims (CLIP's pooled token, CodeGen's position table) and ``torch.gather`` along any dim
of an N-D tensor (GPT-J's rotary table) — compared with CPU, with no host work."""

from __future__ import annotations

import pytest
import torch

import torch_bridge
from device_check import assert_on_device_like_cpu
from torch_bridge import runtime


@pytest.fixture(autouse=True)
def _tiny():
    before = runtime.get_config()
    runtime.set_config("tiny")
    yield
    runtime.set_config(before)


def test_index_by_run_time_tensors_on_leading_dims() -> None:
    torch.manual_seed(0)
    x, table = torch.randn(3, 5, 4), torch.randn(10, 6)
    ids = torch.randint(0, 5, (3,))
    rows, pos = torch.arange(3), torch.tensor([[0, 3, -1], [2, 2, 9]])
    picks = torch.tensor([2, 0, -3, 1])
    cases = [
        (lambda x, r, i: x[r, i], (x, rows, ids)),              # CLIP's pooled token
        (lambda t, p: t[p], (table, pos)),                       # a 2-D table, 2-D picks
        (lambda x, p: x[p], (x, picks)),                         # rows of a 3-D tensor
        (lambda x, p: (x * 2)[:, 1:][p], (x, picks)),            # a computed view
    ]
    for fn, args in cases:
        assert_on_device_like_cpu(fn, *args, rtol=0, atol=0)


def test_gather_along_any_dim_of_an_nd_tensor() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(2, 7, 5), torch.randn(3, 4, 6)
    along1 = torch.randint(0, 7, (2, 4, 5))
    along2 = torch.randint(0, 6, (3, 4, 2))
    for fn, args in [(lambda x, i: torch.gather(x, 1, i), (x, along1)),
                     (lambda y, i: torch.gather(y, 2, i), (y, along2)),
                     (lambda x, i: torch.gather(x * 1 + 0, 1, i), (x, along1))]:
        assert_on_device_like_cpu(fn, *args, rtol=0, atol=0)


def test_gather_with_an_index_narrower_on_another_dim_falls_back_visibly() -> None:
    x, index = torch.randn(2, 7, 5), torch.randint(0, 7, (2, 4, 3))
    with pytest.warns(torch_bridge.HostFallbackWarning, match=r"gather"):
        with torch_bridge.profile() as prof:
            out = torch.gather(x.npu(), 1, index.npu()).cpu()
    assert torch.equal(out, torch.gather(x, 1, index))
    assert [r.name for r in prof.result.host_work] == ["aten.gather"]


_TINY = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=64, rotary_dim=8,
             bos_token_id=0, eos_token_id=0)


def _transformers_model(name: str):
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "clip-text":
        config = T.CLIPTextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, vocab_size=100,
                                  max_position_embeddings=32)
        return T.CLIPTextModel(config), (torch.randint(0, 100, (2, 16)),)
    model = {"gpt-j": lambda: T.GPTJForCausalLM(T.GPTJConfig(**_TINY)),
             "codegen": lambda: T.CodeGenForCausalLM(T.CodeGenConfig(**_TINY))}[name]()
    return model, (torch.randint(0, 100, (1, 16)),)


@pytest.mark.parametrize("name", ["clip-text", "gpt-j", "codegen"])
def test_models_that_index_at_run_time_compile_with_no_host_work(name: str) -> None:
    """Held-out families that used to put their run-time indexing on the host: exported
    as ``archsim run FILE`` does, compiled with no host node, numbers equal to CPU."""
    import compiler
    from archsim.config import load_config
    from torch_bridge.model_outputs import Forward

    model, inputs = _transformers_model(name)
    module = Forward(model.eval(), {})
    compiled = compiler.compile_graph(compiler.export_model(module, inputs),
                                      load_config("tiny"))
    assert compiled.fallbacks == ()
    outputs, _ = compiled.run(*inputs)
    with torch.no_grad():
        expected = module(*inputs)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    for got, want in zip(outputs, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_index_tensors_on_inner_dims_put_the_picks_where_torch_does() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 4)
    i, j = torch.tensor([-2, 0, 4]), torch.tensor([1, 2, 0])
    cases = [lambda x, i, j: x[:, :, i],            # one inner dim
             lambda x, i, j: x[:, j, i],            # consecutive dims: picks stay there
             lambda x, i, j: x[j % 2, :, i],        # separated dims: picks go first
             lambda x, i, j: x[..., j]]
    for fn in cases:
        assert_on_device_like_cpu(fn, x, i, j, rtol=0, atol=0)


def test_falcon_estimate_on_meta_equals_the_run_with_no_host_work() -> None:
    """Falcon indexes ``qkv[..., [-2], :]`` with a constant list: a meta export loses the
    constant's values, but a one-element pick costs the same wherever it is, so the
    shapes-only estimate lowers it to the slice the real run uses: the same cycles."""
    T = pytest.importorskip("transformers")
    import archsim
    import compiler
    from archsim.config import load_config
    from torch_bridge.model_outputs import Forward

    torch.manual_seed(0)
    config = T.FalconConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            vocab_size=100, new_decoder_architecture=False, multi_query=True)
    model = T.FalconForCausalLM(config).eval()
    ids = torch.randint(0, 100, (1, 16))
    estimate = archsim.estimate(model, (ids.to("meta"),), config="tiny")
    compiled = compiler.compile_graph(compiler.export_model(Forward(model, {}), (ids,)),
                                      load_config("tiny"))
    assert compiled.fallbacks == ()
    assert not [c for c in estimate.program.commands if c.engine.startswith("host")]
    assert estimate.total_cycles == compiled.simulate().total_cycles
