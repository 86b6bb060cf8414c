"""The GPT itself: causality, initial loss, hook points, both attention paths, KV cache,
generation, parameter counts, and the sampling filters."""

from __future__ import annotations

import math

import pytest
import torch

from gptscope.model import layers
from gptscope.model.gpt import GPT, GPTConfig, HookPoint, KVCache, count_params, preset_config
from gptscope.model.sampling import filter_logits, sample_next


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # tiny tensors: one thread avoids oversubscription on a shared CPU (many times faster)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def make(seed: int = 0, **kw) -> GPT:
    base = dict(vocab_size=97, n_ctx=32, n_layer=2, n_head=4, d_model=32)
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**base, **kw})).eval()


def tokens(model: GPT, T: int, B: int = 1, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.cfg.vocab_size, (B, T), generator=g)


def perturb_weights(model: GPT, seed: int = 5) -> GPT:
    """Give biases and LayerNorm parameters non-trivial values (init leaves them 0 / 1), so that
    tests involving them can fail."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


CONFIGS = {
    "pre-tanh": dict(),
    "post-exact": dict(norm="post", gelu="exact"),
    "pre-exact-nobias-untied": dict(gelu="exact", bias=False, tie_weights=False),
    "post-tanh-nobias": dict(norm="post", bias=False),
}


# ---- causality and initial loss ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "explain"])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_causality_future_token_does_not_change_past_logits(mode, norm):
    model = make(norm=norm).set_mode(mode)
    T = 24
    idx = tokens(model, T)
    with torch.no_grad():
        base, _ = model(idx)
        for t in (0, 7, T - 2):
            changed = idx.clone()
            changed[0, t + 1] = (changed[0, t + 1] + 1) % model.cfg.vocab_size
            out, _ = model(changed)
            torch.testing.assert_close(out[0, : t + 1], base[0, : t + 1], atol=1e-6, rtol=0)
            assert (out[0, t + 1] - base[0, t + 1]).abs().max() > 1e-4


def test_without_the_mask_the_future_leaks():
    model = make(causal=False)
    idx = tokens(model, 16)
    changed = idx.clone()
    changed[0, 10] = (changed[0, 10] + 1) % model.cfg.vocab_size
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
    assert (a[0, :10] - b[0, :10]).abs().max() > 1e-5


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_untrained_loss_is_about_ln_vocab(norm):
    V = 257
    model = make(seed=3, vocab_size=V, n_ctx=64, norm=norm)
    idx = torch.randint(0, V, (8, 65), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, loss = model(idx[:, :-1], idx[:, 1:])
    assert abs(float(loss) - math.log(V)) < 0.15, (float(loss), math.log(V))


# ---- hook points, capture, and the two attention paths ----------------------------------------


def expected_shapes(cfg: GPTConfig, B: int, T: int) -> dict[str, tuple[int, ...]]:
    d, nh, hs, dm, V = cfg.d_model, cfg.n_head, cfg.d_head, cfg.d_mlp, cfg.vocab_size
    shapes = {
        "hook_embed": (B, T, d),
        "hook_pos_embed": (1, T, d),
        "ln_final.hook_normalized": (B, T, d),
        "hook_logits": (B, T, V),
    }
    if cfg.norm == "pre":
        shapes["ln_final.hook_scale"] = (B, T, 1)
    for i in range(cfg.n_layer):
        p = f"blocks.{i}."
        for ln in ("ln1", "ln2"):
            shapes[p + ln + ".hook_scale"] = (B, T, 1)
            shapes[p + ln + ".hook_normalized"] = (B, T, d)
        for n in ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post"):
            shapes[p + n] = (B, T, d)
        for n in ("hook_q", "hook_k", "hook_v", "hook_z"):
            shapes[p + "attn." + n] = (B, T, nh, hs)
        shapes[p + "attn.hook_attn_scores"] = (B, nh, T, T)
        shapes[p + "attn.hook_pattern"] = (B, nh, T, T)
        shapes[p + "attn.hook_result"] = (B, T, nh, d)
        shapes[p + "mlp.hook_pre"] = (B, T, dm)
        shapes[p + "mlp.hook_post"] = (B, T, dm)
    return shapes


def no_hooks_left(model: GPT) -> bool:
    return all(not m._forward_hooks for m in model.modules() if isinstance(m, HookPoint))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_capture_and_explicit_path_match_the_fast_path(name):
    model = perturb_weights(make(**CONFIGS[name]))
    cfg = model.cfg
    B, T = 2, 20
    idx = tokens(model, T, B)
    with torch.no_grad():
        fast, _ = model(idx)
        explicit, _ = model.set_mode("explain")(idx)
        model.set_mode("fast")
        with model.capture() as cache:
            assert model.mode == "explain"  # capture runs its block in explain mode ...
            captured, _ = model(idx)
        assert model.mode == "fast"  # ... and restores the mode after
        after, _ = model(idx)
    torch.testing.assert_close(explicit, fast, atol=1e-5, rtol=0)
    torch.testing.assert_close(captured, fast, atol=1e-5, rtol=0)
    assert torch.equal(after, fast)

    shapes = expected_shapes(cfg, B, T)
    assert set(cache) == set(shapes) == set(model.hook_dict)
    for k, shape in shapes.items():
        assert tuple(cache[k].shape) == shape, k
    torch.testing.assert_close(cache["hook_logits"], fast, atol=1e-5, rtol=0)

    above = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for i in range(cfg.n_layer):
        pat = cache[f"blocks.{i}.attn.hook_pattern"]
        torch.testing.assert_close(pat.sum(-1), torch.ones(B, cfg.n_head, T), atol=1e-6, rtol=0)
        assert torch.all(pat[..., above] == 0)
        assert torch.all(pat[..., ~above] > 0)
        # residual bookkeeping
        c = lambda n, i=i: cache[f"blocks.{i}.{n}"]  # noqa: E731
        if cfg.norm == "pre":
            torch.testing.assert_close(c("hook_resid_mid"), c("hook_resid_pre") + c("hook_attn_out"))
            torch.testing.assert_close(c("hook_resid_post"), c("hook_resid_mid") + c("hook_mlp_out"))
        else:
            torch.testing.assert_close(c("hook_resid_mid"), c("ln1.hook_normalized"))
            torch.testing.assert_close(c("hook_resid_post"), c("ln2.hook_normalized"))
        # the pattern really is softmax of the masked scores
        scores = c("attn.hook_attn_scores").masked_fill(above, float("-inf"))
        torch.testing.assert_close(pat, torch.softmax(scores, -1))
    torch.testing.assert_close(cache["blocks.0.hook_resid_pre"], cache["hook_embed"] + cache["hook_pos_embed"])
    assert no_hooks_left(model)


def test_fast_mode_uses_sdpa_and_capture_records_only_what_it_names(monkeypatch):
    model = make()
    idx = tokens(model, 12)
    seen = {}
    orig = torch.nn.functional.scaled_dot_product_attention

    def spy(*a, **k):
        seen["sdpa"] = seen.get("sdpa", 0) + 1
        return orig(*a, **k)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        model(idx)
    assert seen.get("sdpa") == model.cfg.n_layer  # fast mode: the fused kernel in every layer
    seen.clear()
    with torch.no_grad(), model.capture(["blocks.1.hook_resid_post", "hook_logits"]) as cache:
        model(idx)
    with torch.no_grad(), model.capture(["blocks.0.attn.hook_pattern"]) as cache2:
        model(idx)
    assert "sdpa" not in seen  # a capture runs the step-by-step path
    assert set(cache) == {"blocks.1.hook_resid_post", "hook_logits"}
    assert set(cache2) == {"blocks.0.attn.hook_pattern"}
    assert no_hooks_left(model)


@pytest.mark.skipif(layers._onednn_linear is None, reason="this PyTorch has no oneDNN")
@pytest.mark.parametrize("name", ["pre-tanh", "pre-exact-nobias-untied"])
def test_onednn_linear_gives_the_default_paths_numbers(monkeypatch, name):
    """Linear multiplies through oneDNN only for inference (no autograd, no autocast) in float32, and
    then gives nn.Linear's numbers to float32 rounding: forced on for every matrix of a small model,
    the logits and every captured activation agree with PyTorch's default path."""
    model = perturb_weights(make(**CONFIGS[name]))
    idx = tokens(model, 20, B=2)
    names = ["blocks.0.attn.hook_q", "blocks.1.mlp.hook_pre", "blocks.1.hook_resid_post", "hook_logits"]
    with torch.inference_mode(), model.capture(names) as default:
        model(idx)
    calls = []

    def spy(*a):
        calls.append(a[1].shape)
        return onednn(*a)

    onednn = layers._onednn_linear
    monkeypatch.setattr(layers, "_onednn_linear", spy)
    monkeypatch.setattr(layers, "ONEDNN_MIN_WEIGHTS", 0)
    with torch.inference_mode(), model.capture(names) as forced:
        model(idx)
    assert len(calls) == model.cfg.n_layer * 4 + 1  # W_QKV, W_O, W_up, W_down per block, W_U
    for n in names:
        torch.testing.assert_close(forced[n], default[n], rtol=1e-5, atol=1e-5)
    calls.clear()
    _, loss = model(idx, targets=idx)  # training: autograd needs PyTorch's own op
    loss.backward()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(idx)  # autocast decides the dtype itself
    with torch.no_grad():
        model(idx, last_only=True)
    assert len(calls) == model.cfg.n_layer * 4 + 1  # only the last, plain no_grad call
    monkeypatch.setattr(layers, "ONEDNN_MIN_WEIGHTS", 1 << 19)
    calls.clear()
    with torch.no_grad():
        model(idx)
    assert calls == []  # a small model's matrices stay on the default path


def test_hooks_are_removed_even_when_the_block_raises():
    model = make()
    with pytest.raises(RuntimeError), model.capture():
        raise RuntimeError("boom")
    assert no_hooks_left(model)
    with pytest.raises(KeyError), model.hooks([("blocks.0.no_such_hook", lambda t, n: None)]):
        pass
    assert no_hooks_left(model)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_head_results_sum_to_attn_out(name):
    model = perturb_weights(make(**CONFIGS[name]))
    idx = tokens(model, 16, 2)
    with torch.no_grad(), model.capture() as cache:
        model(idx)
    for i, block in enumerate(model.blocks):
        res = cache[f"blocks.{i}.attn.hook_result"]
        total = res.sum(2)
        if block.attn.c_proj.bias is not None:
            total = total + block.attn.c_proj.bias
        torch.testing.assert_close(total, cache[f"blocks.{i}.hook_attn_out"], atol=1e-5, rtol=0)
        # and each head's result is its z through its slice of W_O
        z = cache[f"blocks.{i}.attn.hook_z"]
        hs = model.cfg.d_head
        w = block.attn.c_proj.weight[:, hs : 2 * hs]  # head 1
        torch.testing.assert_close(res[:, :, 1], z[:, :, 1] @ w.T, atol=1e-5, rtol=0)


def test_listening_to_the_head_results_changes_no_digit_and_replacing_one_edits_it():
    model = perturb_weights(make())
    idx = tokens(model, 16)
    with torch.no_grad():
        with model.capture(["blocks.0.attn.hook_pattern"]):
            base, _ = model(idx)
        with model.capture(["blocks.0.attn.hook_result", "blocks.1.attn.hook_result"]) as cache:
            heard, _ = model(idx)
        assert torch.equal(heard, base)  # the per-head outputs are read beside the output, not summed into it

        def zero_result(r, name):
            r = r.clone()
            r[:, :, 2] = 0
            return r

        def zero_z(z, name):
            z = z.clone()
            z[:, :, 2] = 0
            return z

        with model.hooks([("blocks.0.attn.hook_result", zero_result)]):
            via_result, _ = model(idx)
        with model.hooks([("blocks.0.attn.hook_z", zero_z)]):
            via_z, _ = model(idx)
    assert (via_result - base).abs().max() > 1e-4
    torch.testing.assert_close(via_result, via_z, atol=1e-5, rtol=0)
    assert cache["blocks.1.attn.hook_result"].shape[2] == model.cfg.n_head
    assert no_hooks_left(model)


def test_replacing_hook_ablates_a_head_only_inside_the_block():
    model = make()
    idx = tokens(model, 16)
    with torch.no_grad():
        base, _ = model(idx)

        def zero_head(z, name):
            z = z.clone()
            z[:, :, 2] = 0
            return z

        with model.hooks([("blocks.0.attn.hook_z", zero_head)]), model.capture(["blocks.0.attn.hook_z"]) as cache:
            ablated, _ = model(idx)
        after, _ = model(idx)
    assert (ablated - base).abs().max() > 1e-4
    assert torch.all(cache["blocks.0.attn.hook_z"][:, :, 2] == 0)
    assert torch.equal(after, base)
    assert no_hooks_left(model)

    # zeroing one head's z equals subtracting that head's result from the residual stream
    with torch.no_grad(), model.capture() as full:
        model(idx)
    head = full["blocks.0.attn.hook_result"][:, :, 2]

    def subtract(x, name):
        return x - head

    with torch.no_grad(), model.hooks([("blocks.0.hook_attn_out", subtract)]):
        via_result, _ = model(idx)
    torch.testing.assert_close(via_result, ablated, atol=1e-5, rtol=0)


# ---- KV cache and generation -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "explain"])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_kv_cache_matches_full_forward(mode, norm):
    model = make(norm=norm).set_mode(mode)
    T, prefill = 30, 7
    idx = tokens(model, T)
    with torch.no_grad():
        full, _ = model(idx)
        cache = KVCache(model.cfg, 1)
        first, _ = model(idx[:, :prefill], kv_cache=cache)
        steps = [first]
        for t in range(prefill, T - 4):
            out, _ = model(idx[:, t : t + 1], kv_cache=cache)
            steps.append(out)
        out, _ = model(idx[:, T - 4 :], kv_cache=cache)  # a multi-token chunk after the cache
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    assert cache.length == T
    assert cache.numel_used() == model.cfg.n_layer * 2 * T * model.cfg.d_model
    with pytest.raises(ValueError):
        model(idx[:, :3], kv_cache=cache)  # past n_ctx


def test_generate_with_and_without_cache_agree():
    model = make(seed=2)
    prompt = tokens(model, 5)
    for kw in (dict(temperature=1.0), dict(temperature=0.8, top_k=10), dict(temperature=1.2, top_p=0.9)):
        a = model.generate(prompt, 20, seed=7, use_cache=True, **kw)
        b = model.generate(prompt, 20, seed=7, use_cache=False, **kw)
        assert a.shape == (1, 25)
        assert torch.equal(a, b), kw
        assert torch.equal(a[:, :5], prompt)
    c = model.generate(prompt, 20, seed=8)
    assert not torch.equal(c, model.generate(prompt, 20, seed=7))


def test_generate_beyond_the_window_keeps_going():
    model = make(seed=2, n_ctx=16)
    prompt = tokens(model, 5)
    cached = model.generate(prompt, 30, seed=1, temperature=0)
    plain = model.generate(prompt, 30, seed=1, temperature=0, use_cache=False)
    assert cached.shape == plain.shape == (1, 35)
    # identical while the whole sequence fits the window (the last of these tokens is predicted
    # from exactly n_ctx tokens). Past it the cached run re-prefills on the last n_ctx - 1
    # tokens, so from there on the two may legitimately differ.
    assert torch.equal(cached[:, :17], plain[:, :17])


def test_temperature_zero_is_greedy():
    model = make(seed=4)
    prompt = tokens(model, 4)
    out = model.generate(prompt, 12, temperature=0, seed=123)
    seq = prompt
    with torch.no_grad():
        for _ in range(12):
            logits, _ = model(seq)
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)
    assert torch.equal(out, model.generate(prompt, 12, temperature=0, seed=999))


def test_generate_steps_are_replayable_with_sample_next():
    model = make(seed=6)
    prompt = tokens(model, 3)
    out = model.generate(prompt, 8, temperature=0.9, top_k=20, seed=42)
    with torch.no_grad():
        for step in range(8):
            logits, _ = model(out[:, : 3 + step])
            assert sample_next(logits[0, -1], 0.9, 20, None, 42, step).token == int(out[0, 3 + step])


# ---- parameter counts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(norm="post"),
        dict(bias=False),
        dict(tie_weights=False),
        dict(norm="post", bias=False, tie_weights=False),
        dict(d_mlp=48, n_layer=3),
    ],
)
def test_count_params_matches_the_module(kw):
    cfg = GPTConfig(**{**dict(vocab_size=101, n_ctx=24, n_layer=2, n_head=2, d_model=16), **kw})
    model = GPT(cfg)
    counts = count_params(cfg)
    assert (
        counts["total"] == model.num_params() == sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    )
    seed = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2)
    assert counts["seed_convention"] == seed
    assert counts["biases_and_norms"] == counts["total"] - seed


def test_gpt1_preset_matches_the_published_count():
    c = count_params(preset_config("gpt1"))
    assert c["seed_convention"] == 116_414_976
    assert c["token_embedding"] == 40478 * 768
    assert round(c["token_embedding"] / c["seed_convention"], 3) == 0.267


def test_gpt2_preset_matches_gpt2_small():
    # GPT-2 small (124M, tied): wte 50257*768 + wpe 1024*768 + 12 blocks + ln_f.
    d, V, n = 768, 50257, 1024
    block = (2 * 2 * d) + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    by_hand = V * d + n * d + 12 * block + 2 * d
    assert by_hand == 124_439_808
    c = count_params(preset_config("gpt2"))
    assert c["total"] == 124_439_808
    assert c["per_block"] == block == 7_087_872


# ---- sampling ----------------------------------------------------------------------------------


def test_top_p_keeps_the_smallest_set_reaching_p():
    # dyadic probabilities, so the boundaries (mass exactly p) are exact in float32
    probs = torch.tensor([0.0625, 0.5, 0.125, 0.25, 0.0625])
    logits = probs.log()
    for p, want in [
        (0.3, {1}),
        (0.5, {1}),
        (0.51, {1, 3}),
        (0.75, {1, 3}),
        (0.76, {1, 3, 2}),
        (0.875, {1, 3, 2}),
        (0.9, {0, 1, 2, 3}),
        (0.9375, {0, 1, 2, 3}),
        (0.95, {0, 1, 2, 3, 4}),
        (1.0, {0, 1, 2, 3, 4}),
    ]:
        # (tokens 0 and 4 tie; the tie goes to the lower id so the set stays the smallest)
        f = filter_logits(logits, 1.0, None, p)
        got = set(torch.nonzero(f.kept).flatten().tolist())
        assert got == want, (p, got)
        torch.testing.assert_close(f.probs_final.sum(), torch.tensor(1.0))
        assert torch.all(f.probs_final[~f.kept] == 0)
        torch.testing.assert_close(f.probs_final[f.kept], probs[f.kept] / probs[f.kept].sum())


def test_top_k_keeps_exactly_k_even_with_ties():
    logits = torch.tensor([1.0, 3.0, 3.0, 3.0, 0.5, 2.0])
    for k in range(1, 7):
        f = filter_logits(logits, 1.0, k, None)
        assert int(f.kept.sum()) == k == int(f.kept_top_k.sum())
        if k < 6:  # every kept token is at least as likely as every dropped one
            assert logits[f.kept].min() >= logits[~f.kept].max()
        torch.testing.assert_close(f.probs_final.sum(), torch.tensor(1.0))
    with pytest.raises(ValueError):
        filter_logits(logits, 1.0, 0, None)
    with pytest.raises(ValueError):
        filter_logits(logits, 1.0, None, 0.0)


def test_top_k_then_top_p_and_temperature():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(50, generator=g) * 2
    f = filter_logits(logits, 0.7, 10, 0.8)
    assert f.kept_top_k.sum() == 10 and torch.all(f.kept <= f.kept_top_k) and f.kept.sum() >= 1
    torch.testing.assert_close(f.probs_temperature, torch.softmax(logits / 0.7, -1))
    torch.testing.assert_close(f.probs_raw, torch.softmax(logits, -1))
    # top-p is measured on the top-k renormalised distribution
    pk = torch.where(f.kept_top_k, f.probs_temperature, torch.zeros(50))
    pk = pk / pk.sum()
    kept_mass = float(pk[f.kept].sum())
    smallest_kept = float(pk[f.kept].min())
    assert kept_mass >= 0.8 - 1e-6 and kept_mass - smallest_kept < 0.8
    torch.testing.assert_close(f.probs_final.sum(), torch.tensor(1.0))
    greedy = filter_logits(logits, 0.0)
    assert int(greedy.kept.sum()) == 50 and float(greedy.probs_final[int(logits.argmax())]) == 1.0


def test_sample_next_is_reproducible_per_seed_and_step():
    logits = torch.zeros(1000)  # uniform: different streams almost surely differ
    a = [sample_next(logits, 1.0, None, None, seed=3, step=s).token for s in range(6)]
    b = [sample_next(logits, 1.0, None, None, seed=3, step=s).token for s in range(6)]
    c = [sample_next(logits, 1.0, None, None, seed=4, step=s).token for s in range(6)]
    assert a == b and a != c
    assert len(set(a)) > 1  # steps draw from different streams
    s = sample_next(torch.tensor([0.0, 5.0, 1.0]), 0.0, seed=0, step=0)
    assert s.token == 1 and s.prob == 1.0
    with pytest.raises(ValueError):
        sample_next(logits, -1.0)


def test_explain_mode_gives_the_same_bits_whatever_is_captured(tiny_model):
    torch.manual_seed(3)
    x = torch.randint(0, tiny_model.cfg.vocab_size, (1, 20))
    tiny_model.set_mode("explain")
    try:
        with torch.no_grad():
            plain, _ = tiny_model(x)
            with tiny_model.capture() as cache:
                captured, _ = tiny_model(x)
        assert torch.equal(plain, captured)  # bitwise: no path switches when hooks are added
        assert "blocks.0.attn.hook_result" in cache
    finally:
        tiny_model.set_mode("fast")
    with torch.no_grad():
        fused, _ = tiny_model(x)
    assert torch.allclose(fused, plain, atol=1e-5)


@pytest.mark.slow  # starts a Python process, to see what the first load imports
def test_a_checkpoint_is_built_with_no_initialisation_and_its_weights_are_the_files():
    """checkpoint.empty_gpt skips every weight init on the meta device (the first init there would
    import torch._dynamo: 2.7 s of the app's start), in its own thread only."""
    import subprocess
    import sys
    import threading

    from gptscope.model import checkpoint as ckpt
    from gptscope.server.config import BUILTIN_CHECKPOINT

    code = (
        "import sys; from gptscope.model import checkpoint; from gptscope.server.config import BUILTIN_CHECKPOINT; "
        "checkpoint.load(BUILTIN_CHECKPOINT); print('torch._dynamo' in sys.modules)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "False", p.stdout + p.stderr
    c = ckpt.load(BUILTIN_CHECKPOINT)
    files = ckpt.read_tensors(c.path, c.meta.weights, c.meta.weights_sha256, "weights")
    state = c.model.state_dict()
    assert files and all(torch.equal(state[k], v.float()) for k, v in files.items())
    # while one thread skips inits, another initialises as usual
    made = {}
    with torch.device("meta"), ckpt._NoInit():
        t = threading.Thread(target=lambda: made.setdefault("w", torch.nn.Linear(64, 64).weight))
        t.start()
        t.join()
        skipped = torch.nn.Linear(64, 64).weight
    assert made["w"].device.type == "cpu" and 0 < float(made["w"].detach().abs().max()) <= 1 / 8
    assert skipped.device.type == "meta"
    torch.manual_seed(0)
    assert (
        float(GPT(GPTConfig(vocab_size=97, n_ctx=32, n_layer=2, n_head=4, d_model=32)).wte.weight.detach().std()) > 0.01
    )
