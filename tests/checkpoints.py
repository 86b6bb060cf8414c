"""The checkpoints the import docs name, each as a tiny random model built by transformers' own config
class at that checkpoint's structural settings and published dtype (only widths, depths and the
vocabulary shrunk), its tokenizer folder in the published layout (the tokenizer.json pipeline, the
tokenizer_config.json class and flags, a chat template of its format), and its config.json in two
spellings: what transformers 5's save_pretrained writes, and the one the checkpoint is published in
(rope_theta and rope_scaling, torch_dtype, and the inert or alias fields each family's files carry).
Shared by tests/test_import_checkpoints.py; nothing is downloaded. The chat templates are short
templates of each format written here, not the published ones."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from hf_families import SMALL as FAMILY_SMALL

CORPUS = (
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings "
    "and arrows of outrageous fortune, or to take arms against a sea of troubles. 1 2 3 4 5 6 7 8 9 10. "
    "In 2024 there were 12345 of them.\n\nThe end.  Two  spaces.\n"
) * 8
TEXT = "To be, or not to be: 2024 arrows,  12345 troubles.\nThe end"
CHAT = [
    {"role": "system", "content": "Answer in verse."},
    {"role": "user", "content": "To be?"},
    {"role": "assistant", "content": "Or not to be."},
    {"role": "user", "content": "That is the question."},
]
NO_SYSTEM = CHAT[1:]

LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# o200k's split (Phi-4-mini), in short: cased words, numbers of up to three digits, the rest
O200K_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# chat templates of each format (written here): Jinja as tokenizer_config.json carries it
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
GEMMA = (
    "{{ bos_token }}{% for m in messages %}{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "<start_of_turn>{{ role }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
PHI3 = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% else %}{{ eos_token }}{% endif %}"
)
PHI4 = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% else %}{{ eos_token }}{% endif %}"
)
ZEPHYR = (  # TinyLlama chat's format: the role, a newline, the text and </s>
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
MISTRAL = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)


@dataclass(frozen=True)
class Tok:
    """A published tokenizer layout: the tokenizer.json pipeline and tokenizer_config.json's fields."""

    kind: str  # "sp-llama" (Prepend + Replace normaliser), "sp-gemma" (Replace), or "bytes"
    specials: tuple[str, ...]  # the added special tokens, BOS and EOS among them
    bos: str | None  # the token tokenizer.json's post-processor puts first; None: it adds none
    config: dict = field(default_factory=dict)  # tokenizer_config.json (bos_token, class, flags, template)
    split: str | None = None  # bytes: a Split regex before ByteLevel; None: ByteLevel's own (GPT-2's)
    digits: bool = False  # bytes: each digit its own pre-token (SmolLM2)
    nfc: bool = False
    chat: list = field(default_factory=lambda: CHAT)  # the chat the template takes (Gemma's has no system)


@dataclass(frozen=True)
class Checkpoint:
    family: str  # transformers' config class prefix (LlamaConfig -> "Llama")
    fields: dict  # the structural settings, shrunk
    dtype: torch.dtype  # as published
    tok: Tok
    published: dict  # config.json fields as the published file writes them (replacing rope_parameters)
    drop: tuple[str, ...] = ()  # fields save_pretrained writes that the published file lacks
    vocab: int = 400


SP_LLAMA = ("<unk>", "<s>", "</s>")
NEWER = ("layer_types", "use_bidirectional_attention")  # written by transformers after the file was published
PHI3_SPECIALS = (*SP_LLAMA, "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
PHI3_TOK = Tok(
    "sp-llama",
    PHI3_SPECIALS,
    "<s>",
    dict(
        tokenizer_class="LlamaTokenizer",
        add_bos_token=False,  # while the post-processor adds <s>: transformers 5 adds it
        legacy=False,
        bos_token="<s>",
        eos_token="<|endoftext|>",
        unk_token="<unk>",
        chat_template=PHI3,
    ),
)
GEMMA_TOK = Tok(
    "sp-gemma",
    ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"),
    "<bos>",
    dict(
        tokenizer_class="GemmaTokenizer", add_bos_token=True, bos_token="<bos>", eos_token="<eos>", chat_template=GEMMA
    ),
    chat=NO_SYSTEM,
)
CHATML_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def short_long(r: int, seed: int) -> dict:
    """LongRoPE's per-pair factors (r/2 each), as Phi-3's files write them."""
    g = torch.Generator().manual_seed(seed)
    short = (1 + torch.rand(r // 2, generator=g)).tolist()
    long = (1 + 8 * torch.rand(r // 2, generator=g)).sort().values.tolist()
    return {"short_factor": [round(x, 4) for x in short], "long_factor": [round(x, 4) for x in long]}


HS = 16  # every shrunk model's head size
GEMMA2 = dict(
    num_key_value_heads=2,
    head_dim=HS,
    sliding_window=5,
    attn_logit_softcapping=50.0,
    final_logit_softcapping=30.0,
    hidden_activation="gelu_pytorch_tanh",
    tie_word_embeddings=True,
)
GEMMA3 = dict(
    num_hidden_layers=7,  # six layers a pattern (five local, one global) and a local one after
    num_key_value_heads=1,
    head_dim=HS,
    query_pre_attn_scalar=HS,
    sliding_window=5,
    layer_types=["sliding_attention"] * 5 + ["full_attention", "sliding_attention"],
    tie_word_embeddings=True,
)
GEMMA3_PUBLISHED = dict(rope_theta=1000000.0, rope_local_base_freq=10000.0, rope_scaling=None, sliding_window_pattern=6)


def gemma3_rope(scaling: dict | None) -> dict:
    full = {"rope_type": "default", "rope_theta": 1000000.0, **(scaling or {})}
    return {
        "rope_parameters": {
            "full_attention": full,
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        }
    }


def phi3_longrope(partial: float = 1.0, seed: int = 0) -> dict:
    r = int(HS * partial)
    return {"rope_type": "longrope", "rope_theta": 10000.0, **short_long(r, seed)}


PHI3 = dict(num_key_value_heads=4, hidden_act="silu", tie_word_embeddings=False, original_max_position_embeddings=16)
CHECKPOINTS: dict[str, Checkpoint] = {
    "gemma-2-2b": Checkpoint(
        "Gemma2",
        {**GEMMA2, "query_pre_attn_scalar": HS},
        torch.float32,
        GEMMA_TOK,
        dict(rope_theta=10000.0, cache_implementation="hybrid", hidden_act="gelu_pytorch_tanh"),
        drop=NEWER,
    ),
    "gemma-2-9b": Checkpoint(
        "Gemma2",
        {**GEMMA2, "query_pre_attn_scalar": 12},  # 9B: hidden / heads (224), not the head size (256)
        torch.bfloat16,
        GEMMA_TOK,
        dict(rope_theta=10000.0, cache_implementation="hybrid", hidden_act="gelu_pytorch_tanh", sliding_window_size=5),
        drop=NEWER,
    ),
    "gemma-3-270m": Checkpoint(
        "Gemma3Text",
        {**GEMMA3, **gemma3_rope(None)},
        torch.bfloat16,
        GEMMA_TOK,
        dict(GEMMA3_PUBLISHED, _sliding_window_pattern=6),
    ),
    "gemma-3-1b": Checkpoint(
        "Gemma3Text", {**GEMMA3, **gemma3_rope(None)}, torch.bfloat16, GEMMA_TOK, GEMMA3_PUBLISHED, drop=NEWER
    ),
    "gemma-3-4b-text": Checkpoint(
        "Gemma3Text",
        {**GEMMA3, "num_key_value_heads": 2, **gemma3_rope({"rope_type": "linear", "factor": 8.0})},
        torch.bfloat16,
        GEMMA_TOK,
        {**GEMMA3_PUBLISHED, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
        drop=NEWER,
    ),
    "phi-3-mini-4k": Checkpoint(
        "Phi3",
        {**PHI3, "sliding_window": 7, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        torch.bfloat16,
        PHI3_TOK,
        dict(rope_theta=10000.0, rope_scaling=None, embd_pdrop=0.0, resid_pdrop=0.0),
    ),
    "phi-3-mini-128k": Checkpoint(
        "Phi3",
        {**PHI3, "sliding_window": 48, "rope_parameters": phi3_longrope(seed=1)},
        torch.bfloat16,
        PHI3_TOK,
        dict(rope_theta=10000.0, rope_scaling={"type": "longrope", **short_long(HS, 1)}, embd_pdrop=0.0),
    ),
    "phi-3.5-mini": Checkpoint(
        "Phi3",
        {**PHI3, "sliding_window": 48, "rope_parameters": phi3_longrope(seed=2)},
        torch.bfloat16,
        PHI3_TOK,
        dict(rope_theta=10000.0, rope_scaling={"type": "longrope", **short_long(HS, 2)}, resid_pdrop=0.0),
    ),
    "phi-4-mini": Checkpoint(
        "Phi3",
        {
            **PHI3,
            "num_key_value_heads": 2,
            "tie_word_embeddings": True,
            "sliding_window": 48,
            "rope_parameters": {**phi3_longrope(0.75, seed=3), "partial_rotary_factor": 0.75},
        },
        torch.bfloat16,
        Tok(
            "bytes",
            ("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
            None,
            dict(
                tokenizer_class="GPT2Tokenizer",
                bos_token="<|endoftext|>",
                eos_token="<|endoftext|>",
                chat_template=PHI4,
            ),
            split=O200K_SPLIT,
        ),
        dict(
            rope_theta=10000.0,
            partial_rotary_factor=0.75,
            rope_scaling={"type": "longrope", **short_long(12, 3)},
        ),
    ),
    "pythia": Checkpoint(
        "GPTNeoX",
        dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}),
        torch.float16,
        Tok(
            "bytes",
            ("<|endoftext|>", "<|padding|>"),
            None,
            dict(tokenizer_class="GPTNeoXTokenizer", bos_token="<|endoftext|>", eos_token="<|endoftext|>"),
            nfc=True,
        ),
        dict(rotary_pct=0.25, rotary_emb_base=10000, use_parallel_residual=True, classifier_dropout=0.1),
        drop=("attention_bias",),  # Pythia's files predate it (true: biases on q, k, v)
    ),
    "olmo-2": Checkpoint(
        "Olmo2",
        dict(
            num_key_value_heads=4, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}
        ),
        torch.float32,
        Tok(
            "bytes",
            ("<|endoftext|>", "<|pad|>", "<|user|>", "<|assistant|>"),
            None,
            dict(tokenizer_class="GPT2Tokenizer", bos_token="<|endoftext|>", eos_token="<|endoftext|>"),
            split=LLAMA3_SPLIT,
        ),
        dict(rope_theta=500000.0, rope_scaling=None),
    ),
    "qwen3": Checkpoint(
        "Qwen3",
        dict(
            num_key_value_heads=2,
            head_dim=24,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        torch.bfloat16,
        Tok(
            "bytes",
            CHATML_SPECIALS,
            None,
            dict(tokenizer_class="Qwen2Tokenizer", bos_token=None, eos_token="<|im_end|>", chat_template=CHATML),
            split=QWEN_SPLIT,
            nfc=True,
        ),
        dict(
            rope_theta=1000000.0, rope_scaling=None, use_sliding_window=False, sliding_window=None, max_window_layers=2
        ),
        drop=NEWER,
    ),
    "llama-3.2": Checkpoint(
        "Llama",
        dict(
            num_key_value_heads=2,
            tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        ),
        torch.bfloat16,
        Tok(
            "bytes",
            ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
            "<|begin_of_text|>",
            dict(
                tokenizer_class="PreTrainedTokenizerFast",
                bos_token="<|begin_of_text|>",
                eos_token="<|eot_id|>",
                chat_template=LLAMA3,
            ),
            split=LLAMA3_SPLIT,
        ),
        dict(
            rope_theta=500000.0,
            rope_scaling={
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
                "rope_type": "llama3",
            },
            pretraining_tp=1,
            mlp_bias=False,
            attention_bias=False,
        ),
    ),
    "mistral": Checkpoint(
        "Mistral",
        dict(
            num_key_value_heads=2,
            sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        torch.bfloat16,
        Tok(
            "sp-llama",
            (*SP_LLAMA, "[INST]", "[/INST]"),
            "<s>",
            dict(
                tokenizer_class="LlamaTokenizer",
                add_bos_token=True,
                legacy=False,
                bos_token="<s>",
                eos_token="</s>",
                chat_template=MISTRAL,
            ),
            chat=NO_SYSTEM,
        ),
        dict(rope_theta=1000000.0, sliding_window=None),
        drop=("head_dim",),
    ),
    "smollm2": Checkpoint(
        "Llama",
        dict(
            num_key_value_heads=2,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        ),
        torch.bfloat16,
        Tok(
            "bytes",
            CHATML_SPECIALS,
            None,
            dict(
                tokenizer_class="GPT2Tokenizer", bos_token="<|im_start|>", eos_token="<|im_end|>", chat_template=CHATML
            ),
            digits=True,
        ),
        dict(rope_theta=100000.0, rope_scaling=None, pretraining_tp=1, mlp_bias=False),
    ),
    "tinyllama-chat": Checkpoint(
        "Llama",
        dict(num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        torch.bfloat16,
        Tok(
            "sp-llama",
            SP_LLAMA,
            "<s>",
            dict(
                tokenizer_class="LlamaTokenizer",
                add_bos_token=True,
                legacy=False,
                bos_token="<s>",
                eos_token="</s>",
                chat_template=ZEPHYR,
            ),
        ),
        dict(rope_theta=10000.0, rope_scaling=None, pretraining_tp=1),
        drop=("head_dim", "mlp_bias"),
    ),
}
# hf_families' widths and depths (initializer_range 0.1: logits of order 1); each checkpoint's own vocabulary
SMALL = {k: v for k, v in FAMILY_SMALL.items() if k != "vocab_size"}


def tokenizer(t: Tok, vocab: int):
    """A tokenizer.json of the layout, trained here by `tokenizers` on CORPUS."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    if t.kind.startswith("sp-"):
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        space = normalizers.Replace(" ", "▁")
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), space]) if t.kind == "sp-llama" else space
        tail = [decoders.Strip(" ", 1, 0)] if t.kind == "sp-llama" else []
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), *tail])
        initial = [f"<0x{i:02X}>" for i in range(256)]
        trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[*t.specials, *initial], show_progress=False)
    else:
        parts = [pre_tokenizers.Digits(individual_digits=True)] if t.digits else []
        if t.split:
            parts.append(pre_tokenizers.Split(Regex(t.split), behavior="isolated"))
        parts.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=t.split is None))
        tok = Tokenizer(models.BPE(ignore_merges=bool(t.split)))
        tok.pre_tokenizer = parts[0] if len(parts) == 1 else pre_tokenizers.Sequence(parts)
        tok.normalizer = normalizers.NFC() if t.nfc else None
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=list(t.specials), initial_alphabet=alphabet, show_progress=False
        )
    tok.train_from_iterator([CORPUS], trainer)
    if t.bos:
        bid = tok.token_to_id(t.bos)
        template = processors.TemplateProcessing(
            single=f"{t.bos}:0 $A:0", pair=f"{t.bos}:0 $A:0 {t.bos}:1 $B:1", special_tokens=[(t.bos, bid)]
        )
        tok.post_processor = (
            template if t.kind != "bytes" else processors.Sequence([processors.ByteLevel(trim_offsets=False), template])
        )
    elif t.kind == "bytes":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def build(name: str, folder: Path, seed: int = 0):
    """The checkpoint's tiny random model saved as save_pretrained writes it in its published dtype, with
    its tokenizer folder; returns transformers' float32 model of the saved file (eager attention)."""
    import transformers

    c = CHECKPOINTS[name]
    torch.manual_seed(seed)
    ids = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg = getattr(transformers, f"{c.family}Config")(**{**SMALL, **ids, "vocab_size": c.vocab, **c.fields})
    cls = "Gemma3ForCausalLM" if c.family == "Gemma3Text" else f"{c.family}ForCausalLM"
    m = getattr(transformers, cls)(cfg).eval()
    with torch.no_grad():  # random norm gains and biases, so a wrong mapping cannot hide
        for n, p in m.named_parameters():
            if "norm" in n or n.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    m.to(c.dtype).save_pretrained(folder)
    tokenizer(c.tok, c.vocab).save(str(folder / "tokenizer.json"))
    tok_cfg = {k: v for k, v in c.tok.config.items() if v is not None}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    return reference(folder, cls)


def reference(folder: Path, cls: str):
    import transformers

    return getattr(transformers, cls).from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()


def published(name: str, src: Path, dest: Path) -> None:
    """A copy of the saved folder whose config.json is written as the checkpoint is published."""
    import shutil

    shutil.copytree(src, dest)
    c = CHECKPOINTS[name]
    raw = json.loads((src / "config.json").read_text())
    raw.pop("rope_parameters", None)
    raw["torch_dtype"] = raw.pop("dtype", str(c.dtype).removeprefix("torch."))
    raw["transformers_version"] = "4.44.0"
    for k in c.drop:
        raw.pop(k, None)
    raw.update(c.published)
    (dest / "config.json").write_text(json.dumps(raw, indent=2))
