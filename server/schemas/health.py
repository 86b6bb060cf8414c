from __future__ import annotations

from pydantic import BaseModel, Field

from .config import config_field, config_fields, schema_model


class ClassifierInfo(BaseModel):
    """What a fine-tuned classifier (GPT-1's second stage) labels, and how its input is written."""

    task: str
    labels: list[str]
    special_tokens: dict[str, str] = Field(
        description="start, delimiter and extract: the token strings that frame an input, e.g. <|start|>text<|extract|>"
    )
    base: str | None = Field(description="the language model it was fine-tuned from")
    method: str
    lm_weight: float
    n_train: int
    accuracy: float = Field(description="its accuracy on the task's test half when it was saved")
    example: str | None = Field(None, description="a test-half input written with the special tokens")


# the shape of the loaded model: GPTConfig's fields, as plain types (server/schemas/config.py)
_SHAPE = config_fields(
    ("vocab_size", "n_ctx", "n_layer", "n_head", "d_model", "d_mlp", "norm", "gelu"), required=True, loose=True
)
_MODERN = config_fields(
    (
        "pos",
        "norm_type",
        "mlp",
        "n_kv_head",
        "head_dim",
        "window",
        "window_pattern",
        "window_last_full",
        "n_expert",
        "top_k_experts",
        "softcap",
        "qk_norm",
        "qk_norm_all",
        "parallel",
        "rotary_dim",
        "attn_scale",
        "attn_softcap",
        "embed_scale",
        "rope_base",
        "rope_local_base",
    ),
    loose=True,
    describe={
        "pos": dict(description="positions: 'learned' rows (GPT-2), 'rope' (rotary) or 'none'"),
        "norm_type": dict(description="'layernorm' or 'rmsnorm'"),
        "mlp": dict(
            description="'gelu' (GPT-2's MLP), 'swiglu', 'geglu' (Gemma) or 'relu2' (nanochat: relu(x W_up)^2)"
        ),
        "head_dim": dict(description="each head's size when set apart from d_model / n_head (0: d_model / n_head)"),
        "n_kv_head": dict(description="key/value heads; fewer than n_head means grouped-query attention"),
        "window": dict(description="sliding-window attention: keys each query sees (0: all earlier ones)"),
        "window_pattern": dict(
            description="per-layer windows, tiled: 'S' layers use window, 'L' see all ('': every layer window)"
        ),
        "softcap": dict(description="logits = softcap tanh(z / softcap) (nanochat: 15, Gemma 2: 30); 0: none"),
        "window_last_full": dict(description="the last layer sees every key whatever window_pattern says (nanochat)"),
        "qk_norm": dict(description="an RMSNorm over q and k before RoPE (Qwen3, Gemma 3, OLMo 2)"),
        "qk_norm_all": dict(description="qk_norm over every head at once, not head by head (OLMo 2)"),
        "parallel": dict(description="attention and the MLP both read the block's input (GPT-NeoX)"),
        "rotary_dim": dict(description="RoPE turns only each head's first rotary_dim channels (0: all; Pythia: 1/4)"),
        "attn_scale": dict(
            description="scores = q k^T * attn_scale (0: 1/sqrt(d_head); Gemma: query_pre_attn_scalar^-1/2)"
        ),
        "attn_softcap": dict(
            description="scores = attn_softcap tanh(s / attn_softcap) before the mask (Gemma 2: 50); 0: none"
        ),
        "embed_scale": dict(
            description="each token's W_E row times this as it enters the stream (Gemma: sqrt(d_model))"
        ),
        "rope_base": dict(description="RoPE's base (the global layers' where rope_local_base is set)"),
        "rope_local_base": dict(description="the RoPE base of the windowed layers (Gemma 3: 10,000); 0: rope_base"),
        "n_expert": dict(description="mixture of experts: FFNs per block (0: one dense MLP)"),
        "top_k_experts": dict(description="experts each token is sent to"),
    },
)

_ModelInfo = schema_model(
    "ModelInfo",
    __name__,
    name=(str, ...),
    checkpoint=(str, Field(description="folder the weights were loaded from")),
    tokenizer=(
        str,
        Field(
            description="'bpe' (trained on the corpus), 'chars' (one token per character, an imported "
            "nanoGPT char-level model), 'tokenizer.json' (an imported Hugging Face model's own, run by the "
            "tokenizers library) or a public encoding's name"
        ),
    ),
    **_SHAPE,
    causal=config_field(
        "causal",
        required=True,
        description="whether attention masks later positions (False only for a model trained without the mask): views draw the upper triangle only when it is False",
    ),
    params=(int, Field(description="trainable parameters (a tied matrix counted once)")),
    corpus=(str, ...),
    train_steps=(int, ...),
    final_val_loss=(float | None, ...),
    uniform_loss=(float, Field(description="ln(vocab size): the loss of a uniform guess")),
    command=(str, Field(description="the command that produced this checkpoint")),
    **_MODERN,
    extras=(
        list[str],
        Field(
            default_factory=list,
            description="nanochat's stream pieces the model has: smear, x0_mix, value_embed, backout, softcap "
            "(the forward page's stream_extras part shows them)",
        ),
    ),
    switches=(
        list[str],
        Field(
            default_factory=list,
            description="the imported families' block switches the model turns on (parallel, rotary_dim, geglu, "
            "sandwich, norm_out, qk_norm_all, embed_scale, attn_scale, attn_softcap, local_global, rope_local_base, "
            "softcap; the forward page's block_switches part shows them)",
        ),
    ),
    bos=(
        list[int],
        Field(
            default_factory=list,
            description="the beginning-of-text token ids a prompt starts with by default (an imported tokenizer's "
            "tokenizer.json post-processor, as transformers 5 reads it; a nanochat model's <|bos|>, which "
            "nanochat puts before every document); empty for none",
        ),
    ),
    chat_template=(
        bool,
        Field(False, description="whether the tokenizer has a chat template (forward takes messages)"),
    ),
    source=(
        str,
        Field(
            description="'trained' (here, with gptscope train), 'huggingface-gpt2', 'huggingface-llama', "
            "'huggingface-gpt-neox', 'huggingface-gemma', 'huggingface-phi3', 'huggingface-olmo2', "
            "'nanogpt' or 'nanochat' (imported with gptscope import)"
        ),
    ),
    schedule=(
        bool,
        Field(
            False,
            description="whether checkpoint.json records the learning-rate schedule the model was trained with "
            "(GET /schedules/lr?kind=model draws it; an imported model has none)",
        ),
    ),
    classifier=(
        ClassifierInfo | None,
        Field(None, description="a fine-tuned classifier's labels; null for a language model"),
    ),
)


class ModelInfo(_ModelInfo):  # type: ignore[misc,valid-type]  # a class, so that code can name the type
    pass


class Health(BaseModel):
    status: str = "ok"
    version: str
    model: str = Field(description="name of the loaded model")
    device: str
    info: ModelInfo
