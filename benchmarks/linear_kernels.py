"""Benchmark: the model's matrix multiplies through PyTorch's default BLAS and through oneDNN.

`gptscope.model.layers.Linear` sends an inference-time float32 matmul of at least ONEDNN_MIN_WEIGHTS
weights to oneDNN. This prints, in one process, both kernels on the shapes of GPT-2 small, SmolLM2-135M
and the built-in model (GFLOP/s, median of repeats), then the explain-mode forward of GPT-2 small's
shape (random weights, last position's hidden state, as a trace needs) with the switch off and on,
alternating, so machine drift hits both alike.

    python benchmarks/linear_kernels.py [--tokens 128] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from gptscope.model import gpt, layers

# (rows, in, out): GPT-2 small's W_QKV, W_O, W_up, W_down at 128 tokens and at one (a generation
# step), its unembedding at one row; SmolLM2-135M's; the built-in model's at 64 tokens
SHAPES = {
    "gpt2 qkv 128": (128, 768, 2304),
    "gpt2 W_O 128": (128, 768, 768),
    "gpt2 up 128": (128, 768, 3072),
    "gpt2 down 128": (128, 3072, 768),
    "gpt2 up 1": (1, 768, 3072),
    "gpt2 unembed 1": (1, 768, 50257),
    "smollm2 up 64": (64, 576, 1536),
    "smollm2 down 64": (64, 1536, 576),
    "built-in up 64": (64, 128, 512),
}


def timed(f, n: int) -> float:
    for _ in range(3):
        f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def kernels(n: int) -> dict:
    out = {}
    for name, (m, k, o) in SHAPES.items():
        x, w, b = torch.randn(m, k), torch.randn(o, k), torch.randn(o)
        flop = 2 * m * k * o / 1e9
        blas = timed(lambda x=x, w=w, b=b: F.linear(x, w, b), n)
        dnn = timed(lambda x=x, w=w, b=b: layers._onednn_linear(x, w, b, "none", [], ""), n)
        out[name] = {
            "weights": k * o,
            "blas_gflops": round(flop / blas, 1),
            "onednn_gflops": round(flop / dnn, 1),
            "onednn_used": k * o >= layers.ONEDNN_MIN_WEIGHTS,
        }
    return out


def forward(tokens: int, rounds: int) -> dict:
    torch.manual_seed(0)
    cfg = gpt.GPTConfig(n_layer=12, n_head=12, d_model=768, n_ctx=1024, vocab_size=50257)
    model = gpt.GPT(cfg).eval().set_mode("explain")
    idx = torch.randint(0, cfg.vocab_size, (1, tokens))
    threshold = layers.ONEDNN_MIN_WEIGHTS
    times: dict[str, list[float]] = {"blas": [], "onednn": []}
    with torch.inference_mode():
        for _ in range(rounds):
            for path, th in (("blas", 1 << 62), ("onednn", threshold)):
                layers.ONEDNN_MIN_WEIGHTS = th
                times[path].append(timed(lambda: model.hidden(idx, last_only=True), 5))
    layers.ONEDNN_MIN_WEIGHTS = threshold
    med = {p: statistics.median(v) * 1000 for p, v in times.items()}
    return {
        "tokens": tokens,
        "blas_ms": round(med["blas"], 1),
        "onednn_ms": round(med["onednn"], 1),
        "onednn_over_blas": round(med["onednn"] / med["blas"], 3),
        "rounds_ms": {p: [round(t * 1000) for t in v] for p, v in times.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--n", type=int, default=30, help="repeats per kernel shape")
    a = p.parse_args()
    if layers._onednn_linear is None:
        raise SystemExit("this PyTorch has no oneDNN: Linear always uses the default path")
    print(
        json.dumps(
            {
                "threads": torch.get_num_threads(),
                "min_weights": layers.ONEDNN_MIN_WEIGHTS,
                "kernels": kernels(a.n),
                "gpt2_forward": forward(a.tokens, a.rounds),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
