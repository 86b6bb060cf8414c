"""LongRoPE (Phi-3-mini-128k, Phi-3.5-mini, Phi-4-mini): imported and computed as transformers 5
computes it. The references are random transformers Phi3ForCausalLM models (eager attention, float32)
whose original context is 16 positions of 64, with random short and long factors (1 to 5), one of
them turning only 3/4 of each head as Phi-4-mini does; each is imported as save_pretrained writes it
(rope_parameters) and as Phi-3.5-mini's config.json spells it (rope_scaling {"type": "longrope"} and
a top-level original_max_position_embeddings). Prompts within and past the original context agree to
1e-4 in both modes, and so do KV-cached steps, the one that crosses the original context included
(transformers picks the factors per forward call, from that call's positions; so does gptscope)."""

from __future__ import annotations

import itertools
import json
import math
import shutil

import pytest
import torch
from hf_families import byte_level_tokenizer

from gptscope.model import checkpoint as ckpt
from gptscope.model import importers
from gptscope.model.gpt import GPTConfig, KVCache
from gptscope.model.importers.common import ImportFailed, hf_rope
from gptscope.model.positions import rope_attention_factor, rope_frequencies

pytestmark = pytest.mark.slow  # transformers' model classes take seconds to load
transformers = pytest.importorskip("transformers")

ORIGINAL, LONGEST = 16, 64
SHORT_T, LONG_T = 12, 40  # prompts within and past the original context
# name -> partial_rotary_factor: every pair of a 16-channel head turns (8 factors), or 12 channels (6)
CASES = {"phi3": 1.0, "phi4-partial": 0.75}
TOL = 1e-4


def factors(g: torch.Generator, n: int) -> list[float]:
    return (1.0 + 4.0 * torch.rand(n, generator=g)).tolist()


def build(folder, partial: float, seed: int):
    """A random Phi3ForCausalLM with LongRoPE, saved as save_pretrained writes it; returns (model, rope params)."""
    g = torch.Generator().manual_seed(seed)
    pairs = int(16 * partial) // 2
    rope = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "partial_rotary_factor": partial,
        "short_factor": factors(g, pairs),
        "long_factor": factors(g, pairs),
    }
    cfg = transformers.Phi3Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=LONGEST,
        original_max_position_embeddings=ORIGINAL,
        initializer_range=0.1,
        rope_parameters=dict(rope),
        bos_token_id=1,
        eos_token_id=0,
        pad_token_id=0,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    m = transformers.Phi3ForCausalLM(cfg).eval()
    with torch.no_grad():  # random norm gains, so a wrong mapping cannot hide
        for name, p in m.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    m.save_pretrained(folder)
    return m, rope


def older_spelling(folder, dest, rope: dict) -> None:
    """The folder with config.json as Phi-3.5-mini publishes it: rope_scaling {"type": "longrope", short
    and long factors}, rope_theta, partial_rotary_factor and original_max_position_embeddings at the top."""
    shutil.copytree(folder, dest)
    c = json.loads((dest / "config.json").read_text())
    c.pop("rope_parameters")
    c["rope_scaling"] = {"type": "longrope", "short_factor": rope["short_factor"], "long_factor": rope["long_factor"]}
    c.update(rope_theta=rope["rope_theta"], original_max_position_embeddings=ORIGINAL)
    if rope["partial_rotary_factor"] != 1.0:
        c["partial_rotary_factor"] = rope["partial_rotary_factor"]
    (dest / "config.json").write_text(json.dumps(c))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (transformers model, rope params, folder, gptscope model), for both spellings of each case."""
    root = tmp_path_factory.mktemp("longrope")
    tok = byte_level_tokenizer()
    out = {}
    for seed, (name, partial) in enumerate(CASES.items()):
        m, rope = build(root / name, partial, seed)
        tok.save(str(root / name / "tokenizer.json"))
        older_spelling(root / name, root / f"{name}-old", rope)
        for spelling in (name, f"{name}-old"):
            dest, _summary = importers.import_model(root / spelling, spelling, root / "data")
            out[spelling] = (m, rope, root / spelling, ckpt.load(dest).model)
    return out


def prompt(T: int) -> list[int]:
    return torch.randint(0, 300, (T,), generator=torch.Generator().manual_seed(T)).tolist()


def theirs(m, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0]


def ours(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids]))[0][0]


SPELLINGS = [s for name in CASES for s in (name, f"{name}-old")]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_config_holds_the_factors_the_original_context_and_the_attention_factor(built, spelling):
    m, rope, folder, model = built[spelling]
    cfg = model.cfg
    assert cfg.rope_scaling == "longrope" and cfg.rope_original_ctx == ORIGINAL and cfg.n_ctx == LONGEST
    assert cfg.rope_short_factor == tuple(rope["short_factor"]) and cfg.rope_long_factor == tuple(rope["long_factor"])
    assert len(cfg.rope_short_factor) == cfg.rotary // 2 == len(m.model.rotary_emb.inv_freq)
    # no attention_factor in the file: sqrt(1 + ln(64 / 16) / ln 16) = sqrt(1.5), as transformers computes it
    assert rope_attention_factor(cfg) == pytest.approx(math.sqrt(1.5), abs=1e-15)
    assert rope_attention_factor(cfg) == m.model.rotary_emb.attention_scaling
    assert torch.equal(rope_frequencies(cfg), m.model.rotary_emb.original_inv_freq)  # the short set, bit for bit
    if spelling.endswith("-old"):  # transformers reads the older spelling the same way
        again = transformers.Phi3ForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
        ids = prompt(LONG_T)
        assert torch.equal(theirs(again, ids), theirs(m, ids))


@pytest.mark.parametrize("T", [SHORT_T, ORIGINAL, ORIGINAL + 1, LONG_T])
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_logits_match_transformers_in_both_modes(built, spelling, T):
    m, _rope, _folder, model = built[spelling]
    ids = prompt(T)
    ref = theirs(m, ids)
    for mode in ("explain", "fast"):
        model.set_mode(mode)
        assert (ours(model, ids) - ref).abs().max() < TOL, (spelling, T, mode)


def their_steps(m, ids: list[int], cuts: list[int]) -> list[torch.Tensor]:
    """transformers' logits of each chunk ids[cuts[i]:cuts[i+1]], fed one forward call at a time with its cache."""
    cache, out = transformers.DynamicCache(config=m.config), []
    with torch.no_grad():
        for a, b in itertools.pairwise(cuts):
            out.append(m(torch.tensor([ids[a:b]]), cache=cache, use_cache=True).logits[0])  # the cache grows in place
    return out


# a prefill within the original context, single steps up to it, the step that crosses it (the 17th
# position: long factors for its query, short-factor keys in the cache), then two positions at once
CUTS = [0, 14, 15, 16, 17, 19]


@pytest.mark.parametrize("spelling", ["phi3", "phi4-partial"])
def test_kv_cached_steps_match_transformers_own_across_the_original_context(built, spelling):
    m, _rope, _folder, model = built[spelling]
    ids = prompt(CUTS[-1])
    ref = their_steps(m, ids, CUTS)
    whole = theirs(m, ids[: ORIGINAL + 1])  # one call over 17 positions: all of them turned by the long factors
    # transformers' own quirk, kept: the step past the original context is not the whole text's answer
    assert (ref[3][-1] - whole[-1]).abs().max() > 1e-2
    assert (ref[2][-1] - theirs(m, ids[:ORIGINAL])[-1]).abs().max() < TOL  # within it, a step is the whole text's
    for mode in ("explain", "fast"):
        model.set_mode(mode)
        cache = KVCache(model.cfg, 1)
        with torch.no_grad():
            steps = [model(torch.tensor([ids[a:b]]), kv_cache=cache)[0][0] for a, b in itertools.pairwise(CUTS)]
        assert cache.length == CUTS[-1]
        for i, (got, want) in enumerate(zip(steps, ref, strict=True)):
            assert (got - want).abs().max() < TOL, (spelling, mode, CUTS[i])


# what is switched off or swapped, by setting GPTConfig fields (the name of another field: its value)
BREAKS = [
    ("longrope off", dict(rope_scaling="none"), SHORT_T),
    ("short factors past the original context", dict(rope_long_factor="rope_short_factor"), LONG_T),
    ("long factors within it", dict(rope_short_factor="rope_long_factor"), SHORT_T),
    ("no attention factor", dict(rope_attention_factor=1.0), SHORT_T),
]


@pytest.mark.parametrize("what,off,T", BREAKS, ids=[b[0] for b in BREAKS])
def test_each_part_of_longrope_is_what_makes_them_agree(built, what, off, T):
    """Switching LongRoPE off, turning by the wrong factor set, or leaving the attention factor out breaks
    the agreement, so the parity tests above can fail."""
    m, _rope, folder, _model = built["phi4-partial"]
    model = ckpt.load(folder.parent / "data" / "models" / "phi4-partial").model  # a copy of its own to spoil
    model.set_mode("explain")
    ids = prompt(T)
    ref = theirs(m, ids)
    assert (ours(model, ids) - ref).abs().max() < TOL
    cfg = model.cfg  # one config object, shared by every block
    for k, v in off.items():
        setattr(cfg, k, getattr(cfg, v) if isinstance(v, str) and v.startswith("rope_") else v)
    assert (ours(model, ids) - ref).abs().max() > 1e-2, what


def _edit(folder, dest, fn):
    shutil.copytree(folder, dest)
    c = json.loads((dest / "config.json").read_text())
    fn(c)
    (dest / "config.json").write_text(json.dumps(c))


REFUSALS = [
    (
        "no-long",
        lambda c: c["rope_parameters"].pop("long_factor"),
        r"rope_type is 'longrope': LongRoPE .* needs rope_parameters\.long_factor: a list of 6 numbers .*; it is missing",
    ),
    (
        "short-length",
        lambda c: c["rope_parameters"].__setitem__("short_factor", [1.0] * 8),
        r"needs rope_parameters\.short_factor: a list of 6 numbers above 0, one per rotary pair; it is \[1\.0, 1\.0",
    ),
    (
        "negative",
        lambda c: c["rope_parameters"].__setitem__("long_factor", [1.0] * 5 + [-1.0]),
        r"rope_parameters\.long_factor: a list of 6 numbers above 0, .*-1\.0\]",
    ),
    (
        "two-originals",
        lambda c: c["rope_parameters"].__setitem__("original_max_position_embeddings", 32),
        r"original_max_position_embeddings \(16.*rope_parameters\.original_max_position_embeddings \(32\) differ",
    ),
    ("yarn", lambda c: c["rope_parameters"].__setitem__("rope_type", "yarn"), r"rope_type is 'yarn': YaRN"),
    (
        "stray-key",
        lambda c: c["rope_parameters"].__setitem__("beta_fast", 32),
        r"rope_parameters\.beta_fast is not a RoPE setting",
    ),
]


@pytest.mark.parametrize("case,edit,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_longrope_settings_are_refused_by_name(built, tmp_path, case, edit, message):
    _edit(built["phi4-partial"][2], tmp_path / case, edit)
    with pytest.raises(ImportFailed, match=message):
        importers.import_model(tmp_path / case, case, tmp_path / "data")


def test_su_is_longrope_for_phi3_and_other_families_refuse_longrope(built, tmp_path):
    m, _rope, folder, _model = built["phi3"]
    _edit(folder, tmp_path / "su", lambda c: c["rope_parameters"].__setitem__("rope_type", "su"))
    dest, _ = importers.import_model(tmp_path / "su", "su", tmp_path / "data")
    ids = prompt(LONG_T)
    assert (ours(ckpt.load(dest).model, ids) - theirs(m, ids)).abs().max() < TOL
    with pytest.raises(ImportFailed, match=r"LongRoPE .* does not compute for this family"):
        hf_rope({"rope_parameters": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}})


def test_gptconfig_checks_longropes_settings_naming_the_field():
    ok = dict(pos="rope", d_model=64, n_head=4, rope_scaling="longrope", rope_original_ctx=16)
    good = GPTConfig(**ok, rope_short_factor=[1.0] * 8, rope_long_factor=(2,) * 8)
    assert good.rope_short_factor == (1.0,) * 8 and good.rope_long_factor == (2.0,) * 8
    assert GPTConfig.from_dict(json.loads(json.dumps(good.to_dict()))) == good  # a checkpoint's JSON round-trips
    with pytest.raises(ValueError, match=r"rope_short_factor has 7 factors; longrope needs one per rotary pair \(8\)"):
        GPTConfig(**ok, rope_short_factor=[1.0] * 7, rope_long_factor=[1.0] * 8)
    with pytest.raises(ValueError, match="rope_long_factor must be a list of finite numbers > 0"):
        GPTConfig(**ok, rope_short_factor=[1.0] * 8, rope_long_factor=[0.0] * 8)
    with pytest.raises(ValueError, match="rope_short_factor is set: it needs rope_scaling='longrope'"):
        GPTConfig(pos="rope", rope_short_factor=[1.0] * 16)
    with pytest.raises(ValueError, match="rope_attention_factor must be a finite number >= 0"):
        GPTConfig(**ok, rope_short_factor=[1.0] * 8, rope_long_factor=[1.0] * 8, rope_attention_factor=-1.0)


def test_the_forward_page_explains_longrope(built):
    """The rope part names the scaling, its attention factor and the factors the prompt's pass used; the
    block switches part says LongRoPE in words with the model's numbers."""
    from fastapi.testclient import TestClient

    from gptscope.server.app import create_app
    from gptscope.server.config import Settings

    _m, rope, folder, _model = built["phi4-partial"]
    dest = folder.parent / "data" / "models" / "phi4-partial"
    app = create_app(Settings(checkpoint=dest, allow_hosts=["testserver"], data_dir=dest.parent.parent))
    with TestClient(app) as client:
        r = client.post("/api/v1/forward", json={"text": "To be, or not", "include": ["rope", "block_switches"]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["tokens"]) <= ORIGINAL  # within the original context: the short factors
        part = body["rope"]
        assert part["scaled"] == "longrope" and part["attention_factor"] == pytest.approx(math.sqrt(1.5))
        want = [1 / (f * 10000.0 ** (2 * i / 12)) for i, f in enumerate(rope["short_factor"])]
        assert part["frequencies"] == pytest.approx(want, abs=1e-6)  # rounded to 6 places
        notes = {n["name"]: n["text"] for n in body["block_switches"]["switches"]}
        assert "original context of 16 tokens" in notes["longrope"] and "1.225" in notes["longrope"]
