"""Benchmark: two answers at GPT-2 small's shape against the way they were made before (issue #67).

A random checkpoint of GPT-2 small's shape (12 layers of 12 heads, width --width, 50,257 tokens, GPT-2's
tokenizer; common.random_service) is saved to a temporary folder and served by a ModelService in this process. Then, each the
better of --repeat runs, on the server's torch threads:

  - the embedding projection's axes (GET /embeddings/projection's work): the app's, from the d x d Gram
    matrix's eigenvectors, against a full SVD of the centred V x d table (the way before), with the
    largest difference between their coordinates once each axis is signed alike;
  - a trace with the logit lens (POST /forward, include=logit_lens) of a --tokens-token prompt: the app's
    lens, against the lens as it was before (every stage's table exponentiated twice and the final one
    again per stage), with whether the two answers are the same.

    python benchmarks/gpt2_shape.py [--width 768] [--tokens 126] [--repeat 3]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from common import random_service

from gptscope.model.gpt import GPTConfig
from gptscope.server.digits import VALUE
from gptscope.server.explain import embeddings, stages
from gptscope.server.explain import forward as explain_forward
from gptscope.server.explain.common import token_text
from gptscope.server.schemas.forward import ForwardRequest


def svd_axes(w: torch.Tensor) -> torch.Tensor:
    """The way before: a full SVD of the centred table; the coordinates (V, 2), each axis signed as the app's."""
    w = w - w.mean(0, keepdim=True)
    _, _, v = torch.linalg.svd(w, full_matrices=False)
    axes = v[:2].T
    return w @ (axes * torch.sign(axes.gather(0, axes.abs().argmax(0, keepdim=True))))


def lens_before(t, read):
    """stages._lens as it was before this benchmark's change (the same fields, more passes)."""
    ids, T = t.ids, len(t.ids)
    nxt = torch.tensor([*ids[1:], 0])
    logps = [torch.log_softmax(read(s, i).float(), -1) for i, s in enumerate(t.streams)]
    final = logps[-1]
    top_all, actual, kl, agree = [], [], [], []
    for logp in logps:
        probs = logp.exp()
        top = torch.topk(probs, stages.LENS_K, dim=-1)
        vals, idx = top.values.tolist(), top.indices.tolist()
        top_all.append(
            [
                [stages.LensCandidate(id=i, text=token_text(t.service, i), prob=round(p, VALUE)) for p, i in zip(v, x)]
                for v, x in zip(vals, idx)
            ]
        )
        pa = probs[torch.arange(T), nxt]
        actual.append([round(float(pa[q]), VALUE) if q < T - 1 else None for q in range(T)])
        kl.append(round(float((final.exp() * (final - logp)).sum(-1).mean()), VALUE))
        agree.append(round(float((logp.argmax(-1) == final.argmax(-1)).float().mean()), VALUE))
    return dict(
        stages=stages.stage_names(t.cfg),
        positions=list(range(T)),
        top=top_all,
        actual_next_prob=actual,
        kl_to_final=kl,
        top1_agreement=agree,
    )


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--tokens", type=int, default=126, help="about this many tokens of prompt")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    cfg = GPTConfig(vocab_size=50257, n_ctx=1024, n_layer=12, n_head=12, d_model=a.width, gelu="tanh")
    with tempfile.TemporaryDirectory(prefix="gptscope-gpt2-shape-") as tmp:
        svc = random_service(cfg, Path(tmp), "gpt2-shaped", "benchmarks/gpt2_shape.py")
        torch.set_num_threads(svc.threads)
        w = svc.model.wte.weight.detach().float()
        gram_s, (coords, _) = best(lambda: embeddings._pca.__wrapped__(svc), a.repeat)
        svd_s, ref = best(lambda: svd_axes(w), a.repeat)
        text = " ".join(["the quick brown fox jumps over the lazy dog"] * 60)
        ids = svc.encoding.encode_ordinary(text)[: a.tokens]
        plan = explain_forward.prepare(svc, ForwardRequest(ids=ids, include=["logit_lens"]))
        explain_forward.build(svc, plan)  # warm
        now_s, now = best(lambda: explain_forward.build(svc, plan), a.repeat)
        kept = stages._lens
        try:
            stages._lens = lens_before
            before_s, before = best(lambda: explain_forward.build(svc, plan), a.repeat)
        finally:
            stages._lens = kept
    print(
        json.dumps(
            {
                "shape": {"n_layer": 12, "n_head": 12, "d_model": a.width, "vocab": 50257},
                "torch_threads": torch.get_num_threads(),
                "projection": {
                    "svd_s": round(svd_s, 3),
                    "gram_s": round(gram_s, 3),
                    "speedup": round(svd_s / gram_s, 2),
                    "largest_coordinate_difference": float((coords - ref).abs().max()),
                },
                "logit_lens_trace": {
                    "tokens": len(ids),
                    "before_s": round(before_s, 3),
                    "now_s": round(now_s, 3),
                    "speedup": round(before_s / now_s, 2),
                    "same_answer": now.model_dump() == before.model_dump(),
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
