"""Tiny random models of the Hugging Face families issue #45 added (GPT-NeoX, Gemma 2, Gemma 3, Phi-3,
OLMo 2), built by `transformers` offline and saved as the Hub publishes them, with a byte-level BPE
tokenizer.json trained here by `tokenizers`: shared by tests/test_import_families.py, the browser test
and benchmarks/import_families.py. Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import torch

CORPUS = (
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings "
    "and arrows of outrageous fortune, or to take arms against a sea of troubles. 1 2 3 4 5 6 7 8 9 10. "
) * 8
SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
PROMPT = "To be, or not to be, that is the question: whether 'tis nobler in the mind"

# initializer_range 0.1 (not 0.02): logits of order 1, so a 1e-4 agreement says something
SMALL = dict(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    initializer_range=0.1,
)
# name -> (transformers' config and model class names, config fields); each family's options on
ARCHS = {
    # Pythia: parallel attention + MLP, RoPE on a quarter of each head (16 channels: 4 of them turn)
    "pythia": (
        "GPTNeoX",
        dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}),
    ),
    # Gemma 2: GeGLU, sandwich norms, both softcaps (small, so they bite), local/global layers, scaled embedding
    "gemma2": (
        "Gemma2",
        dict(
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=5,
            query_pre_attn_scalar=24,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0,
        ),
    ),
    # Gemma 3: q/k norm, local layers with their own RoPE base, the last layer local (pattern "SL" of 3)
    "gemma3": (
        "Gemma3Text",
        dict(
            num_hidden_layers=3,
            num_key_value_heads=1,
            head_dim=24,
            sliding_window=5,
            query_pre_attn_scalar=24,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
            },
        ),
    ),
    # Phi-3: fused qkv and gate/up, partial rotary (Phi-4-mini's kind), a sliding window
    "phi3": (
        "Phi3",
        dict(
            num_key_value_heads=2,
            sliding_window=6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        ),
    ),
    # OLMo 2: norms after attention and the MLP, q/k norm over every head at once
    "olmo2": ("Olmo2", dict(num_key_value_heads=2)),
    # Llama 3's kind of folder (issue #45's BOS and chat template): tokenizer.json's post-processor adds
    # <|begin_of_text|>, tokenizer_config.json names it and holds the chat template
    "llama3": ("Llama", dict(num_key_value_heads=2)),
}
BOS = "<|begin_of_text|>"
# Llama 3's chat template, in its few lines: the BOS, then each message between its header and <|eot_id|>
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
TOKEN_IDS = dict(bos_token_id=1, eos_token_id=0, pad_token_id=0)


def byte_level_tokenizer(vocab_size: int = 300, bos: str | None = None):
    """A byte-level BPE as Llama 3, Pythia, Qwen and OLMo ship it (a Split regex, then ByteLevel);
    with `bos`, a post-processor that puts that token before every text, as Llama 3's tokenizer.json does."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIALS),
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS], trainer)
    if bos is not None:
        bid = tok.token_to_id(bos)
        tok.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, bid)]
                ),
            ]
        )
    return tok


def build(arch: str, folder: Path, seed: int = 0, **over):
    """A random transformers model of `arch` saved as the Hub publishes it (config.json,
    model.safetensors, tokenizer.json); returns (the model in eager attention and float32, the tokenizer)."""
    import torch
    import transformers

    family, fields = ARCHS[arch]
    tok = byte_level_tokenizer(bos=BOS if arch == "llama3" else None)
    torch.manual_seed(seed)
    cfg = getattr(transformers, f"{family}Config")(**{**SMALL, **TOKEN_IDS, **fields, **over})
    cfg._attn_implementation = "eager"
    cls = "Gemma3ForCausalLM" if family == "Gemma3Text" else f"{family}ForCausalLM"
    m = getattr(transformers, cls)(cfg).eval()
    with torch.no_grad():  # random norm gains and biases, so a wrong mapping cannot hide
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    m.save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    if arch == "llama3":
        config = {"bos_token": BOS, "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE}
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return m, tok


def edit_json(path: Path, fn) -> None:
    c = json.loads(path.read_text()) if path.exists() else {}
    fn(c)
    path.write_text(json.dumps(c))


def reference_logits(m, ids: list[int]) -> torch.Tensor:
    """transformers' logits of one prompt, (T, V)."""
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0]


def ours(model, ids: list[int]) -> torch.Tensor:
    """gptscope's logits of one prompt, (T, V)."""
    with torch.no_grad():
        return model(torch.tensor([ids]))[0][0]
