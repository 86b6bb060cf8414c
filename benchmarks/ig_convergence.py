"""Benchmark: integrated gradients' completeness error against steps, per baseline and quadrature rule,
on the built-in model and on tiny random imports of each Hugging Face family (issue #62: the zero
baseline does not converge on models with no added position embedding).

For each model, a prompt's last position (its top prediction's logit) and the same position's logit
difference against another token: the worst relative completeness error |sum_k w_k (x - x') . df(p(a_k))
- (f(x) - f(x'))| / |f(x) - f(x')| of the rules left, right, midpoint, trapezoid and Gauss-Legendre, at
8 to 1,024 points, for the zero and the mean baselines, in float32 (the path's directional derivative is
all completeness needs, so the table is the error of IG's sum at those settings). The families are
built offline by tests/hf_families.py (transformers needed); nothing is downloaded.

    python benchmarks/ig_convergence.py [--models builtin llama3 gemma2 gemma3 pythia olmo2 phi3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gptscope.model import checkpoint as ckpt
from gptscope.model import importers
from gptscope.model import token_attribution as ta
from gptscope.server.config import BUILTIN_CHECKPOINT

CAESAR = "First Lord:\nWhat news of Caesar?\n\nSecond Lord:\nMy lord, Caesar is dead.\n\nFirst Lord:\nAlas, poor"
STEPS = (8, 16, 32, 64, 256, 1024)
RULES = ("left", "right", "midpoint", "trapezoid", "gauss_legendre")


def load(name: str, root: Path):
    """(the model, the prompt's ids) of the built-in model or a tiny import of a family."""
    if name == "builtin":
        from gptscope.server.service import ModelService

        return ckpt.load(BUILTIN_CHECKPOINT).model.eval(), ModelService(BUILTIN_CHECKPOINT).encoding.encode_ordinary(
            CAESAR
        )
    from hf_families import PROMPT, build

    _, tok = build(name, root / name)
    model = importers.convert(root / name, None, None).model.eval()
    return model, tok.encode(PROMPT, add_special_tokens=False).ids


def points(rule: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A rule's points on [0, 1] and their weights (n parts, or n Gauss-Legendre points)."""
    k = torch.arange(n, dtype=torch.float64)
    if rule == "left":
        return k / n, torch.full((n,), 1 / n)
    if rule == "right":
        return (k + 1) / n, torch.full((n,), 1 / n)
    if rule == "trapezoid":
        w = torch.full((n + 1,), 1 / n)
        w[0] = w[-1] = 0.5 / n
        return torch.linspace(0, 1, n + 1, dtype=torch.float64), w
    return ta.quadrature(rule, n)


def slope(model, ids: torch.Tensor, x, base, row: ta.Row, alphas: torch.Tensor) -> torch.Tensor:
    """d f(x' + a (x - x')) / da at each a (float64)."""
    out = []
    for a in alphas.float().split(128):
        rows_in = (base + a[:, None, None] * (x - base)).requires_grad_(True)
        f = ta.run_rows(model, ids.expand(len(a), len(ids)), rows_in, [row] * len(a))
        (g,) = torch.autograd.grad(f.sum(), rows_in)
        out.append((g * (x - base)).sum((1, 2)).double())
    return torch.cat(out)


def table(name: str, model, ids: list[int]) -> None:
    t = torch.tensor(ids)
    with torch.no_grad():
        x = model.wte(t)
        top = int(model.unembed(model.hidden(t[None])[0, -1]).argmax())
    rows = [ta.Row(len(ids) - 1, top), ta.Row(len(ids) - 1, top, (top + 7) % model.cfg.vocab_size)]
    cfg = model.cfg
    default = ta.default_baseline(cfg)[0]
    for baseline in ta.BASELINES:
        base = ta.baseline_rows(model, x, baseline)
        worst: dict[tuple[str, int], float] = {}
        for row in rows:
            f_x, f_b = (float(ta.at_rows(model, t, r, [row])[0][0]) for r in (x, base))
            for n in STEPS:
                for rule in RULES:
                    a, w = points(rule, n)
                    err = abs(float((slope(model, t, x, base, row, a) * w.double()).sum()) - (f_x - f_b)) / abs(
                        f_x - f_b
                    )
                    worst[rule, n] = max(worst.get((rule, n), 0.0), err)
        mark = " (default)" if baseline == default else ""
        print(f"\n{name}: {cfg.norm_type}, pos={cfg.pos}, baseline {baseline}{mark}; worst error %, 2 rows")
        print(f"  {'rule':15s}" + "".join(f"{n:>10d}" for n in STEPS))
        for rule in RULES:
            print(f"  {rule:15s}" + "".join(f"{100 * worst[rule, n]:>10.3g}" for n in STEPS), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["builtin", "llama3", "gemma2", "gemma3", "pythia"])
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            model, ids = load(name, Path(tmp))
            table(name, model, ids)


if __name__ == "__main__":
    main()
