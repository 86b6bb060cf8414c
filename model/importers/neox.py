"""Hugging Face models of GPT-NeoX's architecture: a folder of GPTNeoXForCausalLM (EleutherAI's Pythia
suite, GPT-NeoX-20B): config.json + model.safetensors (or shards) + tokenizer.json.

GPT-2's LayerNorm (with shifts), biases everywhere, GELU, an untied unembedding (embed_out), and two
differences, each a switch of gptscope's GPT: the parallel block (`use_parallel_residual`: attention
and the MLP both read the block's input and their outputs are added together, GPTConfig.parallel) and
RoPE on part of each head (`rotary_pct` / `partial_rotary_factor`: Pythia turns the first quarter of
each head's channels, GPTConfig.rotary_dim). The fused query_key_value matrix holds each head's q, k
and v side by side (head 0's q, k, v, then head 1's ...); it is reordered into gptscope's W_Q, W_K,
W_V. Every config.json field is read or refused by name."""

import re
from pathlib import Path

import torch

from ..gpt import GPTConfig
from .common import (
    Converted,
    HFLayout,
    ImportFailed,
    Piece,
    check_fields,
    check_values,
    config_from,
    convert_hf,
    hf_flag,
    hf_number,
    hf_rope,
    hf_sizes,
)

MODEL_TYPES = ("gpt_neox",)
ARCHITECTURE = "GPTNeoXForCausalLM"
NEOX_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_act",
    "max_position_embeddings",
    "layer_norm_eps",
    "tie_word_embeddings",
    "use_parallel_residual",
    "attention_bias",
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "rotary_emb_base",  # the older spelling of rope_theta
    "rotary_pct",  # ... and of partial_rotary_factor
    "partial_rotary_factor",
    "hidden_dropout",  # training only
    "classifier_dropout",  # a classification head's, which a causal LM has not
    "is_decoder",
)
# buffers older files carry: the causal mask and RoPE's frequencies, recomputed, not parameters
_NEOX_BUFFER = re.compile(r"^gpt_neox\.layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)$")
GELUS = {"gelu": "exact", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}


def _rope(raw: dict) -> dict:
    """RoPE's settings, written either way: rotary_emb_base and rotary_pct (Pythia's files) or
    rope_theta and partial_rotary_factor (transformers 5's rope_parameters)."""
    renamed = dict(raw)
    for old, new in (("rotary_emb_base", "rope_theta"), ("rotary_pct", "partial_rotary_factor")):
        if old in renamed:
            if new in renamed and renamed[new] != renamed[old]:
                raise ImportFailed(f"config.json fields {old} and {new} differ")
            renamed[new] = renamed.pop(old)
    params = renamed.get("rope_parameters")
    if isinstance(params, dict) and "partial_rotary_factor" not in params and "partial_rotary_factor" not in renamed:
        renamed["partial_rotary_factor"] = 0.25  # transformers' default for GPT-NeoX
    elif params is None and renamed.get("rope_scaling") is None and "partial_rotary_factor" not in renamed:
        renamed["partial_rotary_factor"] = 0.25
    return hf_rope(renamed, partial=True)


def neox_config(raw: dict) -> GPTConfig:
    """GPTConfig from a GPTNeoXForCausalLM's config.json; any field gptscope does not compute is refused."""
    check_fields(raw, "gpt_neox", "GPT-NeoX", ARCHITECTURE, NEOX_FIELDS)
    check_values(raw, {"is_decoder": False})
    act = raw.get("hidden_act", "gelu")
    if act not in GELUS:
        raise ImportFailed(f"config.json field hidden_act is {act!r}; gptscope computes {', '.join(map(repr, GELUS))}")
    bias = hf_flag(raw, "attention_bias", True)
    if not bias:
        raise ImportFailed(
            "config.json field attention_bias is false; gptscope reads GPT-NeoX with its attention biases"
        )
    return config_from(
        "config.json",
        lambda: dict(
            **hf_sizes(raw, kv_heads=False),
            bias=True,
            norm="pre",
            norm_type="layernorm",
            mlp="gelu",
            gelu=GELUS[act],
            ln_eps=hf_number(raw, "", "layer_norm_eps", 1e-5),
            tie_weights=hf_flag(raw, "tie_word_embeddings", False),
            parallel=hf_flag(raw, "use_parallel_residual", True),
            **_rope(raw),
        ),
    )


def _per_head_to_stacked(nh: int, hs: int):
    """query_key_value's rows (nh, 3, hs: each head's q, k, v) -> gptscope's (3, nh, hs): all q, all k, all v."""

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(nh, 3, hs, *t.shape[1:]).transpose(0, 1).reshape(t.shape)

    return fn


def neox_names(cfg: GPTConfig) -> dict[str, list[Piece]]:
    d, dm, hs, V, nh = cfg.d_model, cfg.d_mlp, cfg.d_head, cfg.vocab_size, cfg.n_head
    qkv = _per_head_to_stacked(nh, hs)
    m: dict[str, list[Piece]] = {
        "wte.weight": [("gpt_neox.embed_in.weight", (V, d))],
        "ln_final.weight": [("gpt_neox.final_layer_norm.weight", (d,))],
        "ln_final.bias": [("gpt_neox.final_layer_norm.bias", (d,))],
    }
    for i in range(cfg.n_layer):
        hf, ours = f"gpt_neox.layers.{i}.", f"blocks.{i}."
        for mine, theirs in (("ln1", "input_layernorm"), ("ln2", "post_attention_layernorm")):
            for p in ("weight", "bias"):
                m[ours + f"{mine}.{p}"] = [(hf + f"{theirs}.{p}", (d,))]
        m[ours + "attn.c_attn.weight"] = [(hf + "attention.query_key_value.weight", (3 * d, d), qkv)]
        m[ours + "attn.c_attn.bias"] = [(hf + "attention.query_key_value.bias", (3 * d,), qkv)]
        m[ours + "attn.c_proj.weight"] = [(hf + "attention.dense.weight", (d, d))]
        m[ours + "attn.c_proj.bias"] = [(hf + "attention.dense.bias", (d,))]
        for mine, theirs, shape in (("c_fc", "dense_h_to_4h", (dm, d)), ("c_proj", "dense_4h_to_h", (d, dm))):
            m[ours + f"mlp.{mine}.weight"] = [(hf + f"mlp.{theirs}.weight", shape)]
            m[ours + f"mlp.{mine}.bias"] = [(hf + f"mlp.{theirs}.bias", shape[:1])]
    if not cfg.tie_weights:
        m["lm_head.weight"] = [("embed_out.weight", (V, d))]
    return m


NEOX_LAYOUT = HFLayout(
    "huggingface-gpt-neox",
    "GPT-NeoX",
    embed="gpt_neox.embed_in.weight",
    head="embed_out.weight",
    layers="gpt_neox.layers.",
    first=(
        ("attention.query_key_value.weight", lambda c: (3 * c.d_model, c.d_model), ("3 * hidden_size", "hidden_size")),
        ("mlp.dense_h_to_4h.weight", lambda c: (c.d_mlp, c.d_model), ("intermediate_size", "hidden_size")),
    ),
    buffers=_NEOX_BUFFER,
)


def convert_hf_neox(folder: Path) -> Converted:
    return convert_hf(folder, neox_config, neox_names, NEOX_LAYOUT)
