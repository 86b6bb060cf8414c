"""Benchmark: today's open models (the LLaMA family) imported and served on this machine.

Builds the exact shapes of SmolLM2-135M (30 layers x 9 heads, 3 key/value heads, d 576, SwiGLU 1,536,
49,152 tokens, tied: 134,515,008 parameters) and Qwen2.5-0.5B (24 layers x 14 heads, 2 key/value heads,
d 896, SwiGLU 4,864, biases on W_Q/W_K/W_V, 151,936 tokens, tied: 494,032,768 parameters) with random
weights through `transformers` (a test extra; nothing can be downloaded here), saved in bfloat16 as the
Hub ships them, with a byte-level BPE tokenizer.json trained here on the built-in plays by `tokenizers`
(as large as the plays allow; the model's vocabulary rows beyond it are unassigned ids, as Qwen's are).
Then `gptscope import` is timed, the app is served and the API timed through real HTTP
(benchmarks/api_latency.py): a 64-token forward trace (every head's attention + next token), a
generation step, and the server's memory. The timings depend on the shapes, not the values.

Targets at SmolLM2-135M's shape on 2 CPU cores: import < 60 s, trace p95 < 1 s, generation step
p95 < 250 ms, server memory < 2.5 GB. Qwen2.5-0.5B's shape has no target (the figures are in README).

    python benchmarks/import_modern.py [--shape smollm2-135m|qwen2.5-0.5b|both] [--n 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

SHAPES = {
    "smollm2-135m": (
        "Llama",
        dict(
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            vocab_size=49152,
            max_position_embeddings=8192,
            rope_theta=100000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
        ),
    ),
    "qwen2.5-0.5b": (
        "Qwen2",
        dict(
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            vocab_size=151936,
            max_position_embeddings=32768,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            use_sliding_window=False,
        ),
    ),
}


def plays_tokenizer(vocab_size: int):
    """A byte-level BPE (Llama 3's and Qwen's kind: a Split regex, then ByteLevel) trained on the plays."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from gptscope.model import corpus

    tok = Tokenizer(models.BPE(ignore_merges=True))
    pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(pattern), behavior="isolated"), pre_tokenizers.ByteLevel(use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([corpus.load("shakespeare").text], trainer)
    return tok


def random_model(shape: str, folder: Path) -> int:
    import torch
    import transformers

    family, fields = SHAPES[shape]
    torch.manual_seed(0)
    m = getattr(transformers, f"{family}ForCausalLM")(getattr(transformers, f"{family}Config")(**fields))
    n = sum(p.numel() for p in m.parameters())
    m.to(torch.bfloat16).save_pretrained(folder)
    plays_tokenizer(fields["vocab_size"]).save(str(folder / "tokenizer.json"))
    return n


def run(shape: str, n: int, tmp: Path) -> dict:
    import api_latency

    folder = tmp / shape
    t = time.perf_counter()
    params = random_model(shape, folder)
    build_s = time.perf_counter() - t
    data = tmp / "data"
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "gptscope", "import", str(folder), "--name", shape, "--data-dir", str(data)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    out = {
        "shape": shape,
        "weights": f"random weights, {shape}'s shape, bfloat16 on disk, float32 in memory",
        "params": params,
        "build_s (transformers, not timed by the target)": round(build_s, 1),
        "import_s": round(time.perf_counter() - t, 1),
    }
    lat = api_latency.main(["--checkpoint", str(data / "models" / shape), "--n", str(n)])
    out.update({k: v for k, v in lat.items() if k != "checkpoint"})
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", choices=[*SHAPES, "both"], default="both")
    p.add_argument("--n", type=int, default=30)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for shape in SHAPES if a.shape == "both" else [a.shape]:
            print(json.dumps(run(shape, a.n, Path(tmp)), indent=1), flush=True)


if __name__ == "__main__":
    main()
