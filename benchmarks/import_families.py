"""Benchmark: the families issue #45 added, imported and served on this machine.

Builds the exact shapes of Pythia-160M (GPT-NeoX: 12 layers x 12 heads, d 768, GELU MLP 3,072, parallel
attention + MLP, RoPE on a quarter of each head, 50,304 tokens, untied: 162,322,944 parameters) and
Gemma-3-270M (18 layers x 4 heads of 256 sharing 1 key/value head, d 640, GeGLU 2,048, sandwich norms,
q/k norm, 5 local layers (a 512-key window, RoPE base 10,000) per global one (base 1,000,000), a scaled
embedding, 262,144 tokens, tied: 268,098,176 parameters) with random weights through `transformers` (a
test extra; nothing can be downloaded here), saved in bfloat16 as the Hub ships them, with a byte-level
BPE tokenizer.json trained here on the built-in plays by `tokenizers` (as benchmarks/import_modern.py
does: the model's vocabulary rows beyond it are unassigned ids). Then `gptscope import` is timed, the
app is served and the API timed through real HTTP (benchmarks/api_latency.py): a 64-token forward trace
(every head's attention + next token), the trace of every part, a generation step, and the server's memory.
The timings depend on the shapes, not the values.

Targets at both shapes on 2 CPU cores: trace p95 < 1 s, generation step p95 < 250 ms.

    python benchmarks/import_families.py [--shape pythia-160m|gemma-3-270m|both] [--n 30]
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
    "pythia-160m": (
        "GPTNeoX",
        "GPTNeoXForCausalLM",
        dict(
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=12,
            num_attention_heads=12,
            vocab_size=50304,
            max_position_embeddings=2048,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
            use_parallel_residual=True,
            tie_word_embeddings=False,
        ),
    ),
    "gemma-3-270m": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(
            hidden_size=640,
            intermediate_size=2048,
            num_hidden_layers=18,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=256,
            vocab_size=262144,
            max_position_embeddings=32768,
            sliding_window=512,
            query_pre_attn_scalar=256,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        ),
    ),
}


def random_model(shape: str, folder: Path) -> int:
    import torch
    import transformers
    from import_modern import plays_tokenizer

    config, model, fields = SHAPES[shape]
    config = config if config.endswith("Config") else f"{config}Config"
    torch.manual_seed(0)
    m = getattr(transformers, model)(getattr(transformers, config)(**fields))
    n = sum(p.numel() for p in m.parameters())
    m.to(torch.bfloat16).save_pretrained(folder)
    del m
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
    lat = api_latency.main(["--checkpoint", str(data / "models" / shape), "--n", str(n), "--wire-tokens", "64"])
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
