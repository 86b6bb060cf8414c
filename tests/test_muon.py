"""Muon orthogonalised in the device's native dtype (model/muon.py) and the one decision that picks
that dtype for Muon and autocast alike (model/precision.py): bf16 equals torch.optim.Muon bit for
bit, fp32 orthogonalises at least as accurately, GPTSCOPE_PRECISION forces either path, and the
trainer uses what was decided and says why."""

from __future__ import annotations

import pytest
import torch

from gptscope.model import precision
from gptscope.model.muon import Muon, orthogonalise
from gptscope.model.train import RECIPE_WHY, RECIPES, TrainConfig, make_optimizers, recipe_for, train

SHAPES = [(48, 16), (16, 48), (24, 24), (64, 32)]  # tall, wide, square: the iteration transposes tall ones


@pytest.fixture
def choice_cache():
    """native_precision is measured once per process; these tests measure and force it afresh."""
    precision.native_precision.cache_clear()
    yield
    precision.native_precision.cache_clear()


def params_and_grads(seed: int) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=g) for s in SHAPES]
    grads = [[torch.randn(s, generator=g) for s in SHAPES] for _ in range(4)]  # four steps
    return params, grads


def run(opt_cls, params, grads, **kw) -> list[torch.Tensor]:
    ps = [torch.nn.Parameter(p.clone()) for p in params]
    opt = opt_cls(ps, lr=0.02, weight_decay=0.1, momentum=0.95, **kw)
    for step in grads:
        for p, g in zip(ps, step):
            p.grad = g.clone()
        opt.step()
    return [p.detach() for p in ps]


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
def test_bf16_update_equals_torch_muon_bit_for_bit(nesterov, adjust):
    params, grads = params_and_grads(0)
    theirs = run(torch.optim.Muon, params, grads, nesterov=nesterov, adjust_lr_fn=adjust)
    ours = run(Muon, params, grads, nesterov=nesterov, adjust_lr_fn=adjust, ortho_dtype=torch.bfloat16)
    for a, b, p in zip(ours, theirs, params):
        assert torch.equal(a, b)
        assert not torch.equal(a, p)  # and the step did move the weights


def test_fp32_update_is_close_to_torch_but_not_the_same_arithmetic():
    params, grads = params_and_grads(1)
    theirs = run(torch.optim.Muon, params, grads, adjust_lr_fn="original")
    ours = run(Muon, params, grads, adjust_lr_fn="original", ortho_dtype=torch.float32)
    for a, b in zip(ours, theirs):
        assert not torch.equal(a, b)
        torch.testing.assert_close(a, b, atol=4 * 0.02 * 2e-2, rtol=0)  # 4 steps of lr 0.02, bf16's ~1% error


@pytest.mark.parametrize("shape", [*SHAPES, (128, 512), (384, 128)])
def test_fp32_orthogonalises_at_least_as_accurately_as_bf16(shape):
    """Against the same iteration in float64, and in what it is for: singular values near 1."""
    g = torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    exact = orthogonalise(g, torch.float64, gram=False)
    err = {
        dt: float((orthogonalise(g.float(), dt).double() - exact).norm() / exact.norm())
        for dt in (torch.float32, torch.bfloat16)
    }
    assert err[torch.float32] <= err[torch.bfloat16]
    assert err[torch.float32] < 1e-5 and err[torch.bfloat16] > 1e-3  # float32 is all but exact
    # what it is for: G's singular vectors kept, its singular values pushed towards 1
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    m = u.T @ orthogonalise(g.float(), torch.float32).double() @ vh.T  # diagonal if the vectors are G's
    off = m - torch.diag(m.diagonal())
    assert float(off.norm() / m.norm()) < 1e-5
    assert float(m.diagonal().max()) < 1.3 and float(m.diagonal().median()) > 0.6


@pytest.mark.parametrize("shape", [(128, 512), (384, 128), (16, 48)])
def test_the_gram_space_iteration_is_the_same_polynomial(shape):
    """The fast path for wide matrices (float32 default) agrees with the direct iteration."""
    g = torch.randn(shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    exact = orthogonalise(g, torch.float64, gram=False)
    torch.testing.assert_close(orthogonalise(g, torch.float64, gram=True), exact, atol=1e-12, rtol=0)
    fast = orthogonalise(g.float(), torch.float32)  # takes the Gram path by default
    torch.testing.assert_close(fast, orthogonalise(g.float(), torch.float32, gram=True), atol=0, rtol=0)
    assert float((fast.double() - exact).norm() / exact.norm()) < 1e-5
    # bf16 never takes it (torch's arithmetic, bit for bit)
    assert torch.equal(orthogonalise(g.float(), torch.bfloat16), orthogonalise(g.float(), torch.bfloat16, gram=False))


def test_orthogonalise_leaves_its_input_as_it_was():
    """Without Nesterov the update is the momentum buffer itself: it must not be normalised in place."""
    g = torch.randn(16, 32)
    before = g.clone()
    orthogonalise(g, torch.float32)
    assert torch.equal(g, before)


def test_a_forced_path_wins_and_a_bad_value_is_refused(monkeypatch, choice_cache):
    for forced in ("bf16", "fp32"):
        monkeypatch.setenv(precision.ENV, forced)
        precision.native_precision.cache_clear()
        c = precision.native_precision("cpu")
        assert c.precision == forced and c.why == f"forced by {precision.ENV}={forced}" and c.slowdown is None
        assert recipe_for(torch.device("cpu")) == {**RECIPES[f"cpu-{forced}"], "precision": forced}
        other = "fp32" if forced == "bf16" else "bf16"  # a precision given picks its own path's recipe
        assert recipe_for(torch.device("cpu"), other) == {**RECIPES[f"cpu-{other}"], "precision": other}
    monkeypatch.setenv(precision.ENV, "fp16")
    precision.native_precision.cache_clear()
    with pytest.raises(ValueError, match=precision.ENV):
        precision.native_precision("cpu")


def test_the_cpu_probe_measures_and_decides_by_its_measurement(monkeypatch, choice_cache):
    monkeypatch.delenv(precision.ENV, raising=False)
    threads = torch.get_num_threads()
    c = precision.native_precision("cpu")
    assert torch.get_num_threads() == threads  # the probe times one thread, then gives the count back
    assert c.slowdown is not None and c.slowdown > 0
    native = c.slowdown <= precision.NATIVE_IF_WITHIN
    assert (c.update_ratio is not None) == native  # a training update is timed only where bf16 is native
    faster = native and c.update_ratio is not None and c.update_ratio <= 1 - precision.UPDATE_MARGIN
    assert c.precision == ("bf16" if faster else "fp32")
    assert f"{c.slowdown:.0f}x slower" in c.why or f"{1 / c.slowdown:.1f}x the speed" in c.why
    # every verdict, with made-up measurements: the matmul's, then the update's (issue #67)
    cases = [
        (
            0.6,
            0.8,
            "bf16",
            "native bf16 (matmul 1.7x the speed of fp32), and a training update 1.25x the speed of fp32",
        ),
        (
            0.6,
            0.97,
            "fp32",
            "native bf16 (matmul 1.7x the speed of fp32), but a training update in bf16 takes 0.97x fp32's",
        ),
        (52.0, None, "fp32", "no native bf16: bf16 matmul 52x slower than fp32"),
    ]
    for slowdown, ratio, verdict, why in cases:
        monkeypatch.setattr(precision, "measure_cpu", lambda s=slowdown: s)
        monkeypatch.setattr(precision, "measure_update", lambda r=ratio: r)
        precision.native_precision.cache_clear()
        c = precision.native_precision("cpu")
        assert (c.precision, c.why, c.update_ratio) == (verdict, why, ratio)


@pytest.mark.parametrize("prec, dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_the_trainer_orthogonalises_in_the_runs_precision(prec, dtype):
    from gptscope.model.gpt import GPT, preset_config

    model = GPT(preset_config("tiny", vocab_size=64))
    tc = TrainConfig(optimizer="muon", muon_lr=0.02, max_lr=5e-3, precision=prec, max_steps=1)
    muon, adamw = make_optimizers(model, tc, fused=False)
    assert isinstance(muon, Muon) and all(g["ortho_dtype"] == dtype for g in muon.param_groups)
    assert isinstance(adamw, torch.optim.AdamW)


def test_the_run_prints_and_records_its_choice(tmp_path, monkeypatch, capsys, choice_cache):
    monkeypatch.setenv(precision.ENV, "fp32")
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(200))
    (tmp_path / "t.txt").write_text(text)
    res = train(
        TrainConfig(
            corpus=str(tmp_path / "t.txt"),
            preset="tiny",
            vocab_size=280,
            batch_size=4,
            max_steps=3,
            device="cpu",
            overrides={"n_ctx": 32, "d_model": 32, "n_head": 2},
        )
    )
    err = capsys.readouterr().err
    assert "precision=fp32" in err  # filled in by the recipe
    assert "recipe for cpu-fp32 (fields not given)" in err and f"why: {RECIPE_WHY['cpu-fp32']}" in err
    assert f"muon orthogonalisation: fp32 (forced by {precision.ENV}=fp32)" in err
    assert res.meta.precision == f"fp32 (forced by {precision.ENV}=fp32)"
    assert res.meta.train_config["precision"] == "fp32" and res.meta.train_config["optimizer"] == "muon"

    given = train(
        TrainConfig(
            corpus=str(tmp_path / "t.txt"),
            preset="tiny",
            vocab_size=280,
            batch_size=4,
            max_steps=2,
            device="cpu",
            optimizer="adamw",
            precision="fp32",
            overrides={"n_ctx": 32, "d_model": 32, "n_head": 2},
        )
    )
    assert "autocast: off (precision given)" in capsys.readouterr().err
    assert given.meta.precision == "fp32 (precision given)"
