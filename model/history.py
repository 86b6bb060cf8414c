"""From the perceptron to attention: the short history llm-pretraining-for-generalists.txt tells
before GPT-2, as small live examples. Pure torch, no web code; every run is seeded, so the same
arguments give the same numbers.

    perceptron(data)   Rosenblatt's rule on 2-D points: predict step(w.x + b), and after a
                       mistake move w by lr * (y - y_hat) * x and b by lr * (y - y_hat). It finds a
                       line when one exists ("separable") and never stops making mistakes when none
                       does ("xor", "circles").
    mlp(data)          two weighted sums with a tanh between them, trained by gradient descent on
                       the cross-entropy: each hidden unit is one line, and their sum bends the
                       boundary round the classes a single line cannot split.
    reach(positions)   how far information travels in one layer of each family the text names: how
                       much the last position's output moves when each earlier input moves (the
                       norm of the Jacobian block d out_T / d x_t) for an MLP applied per position,
                       a stack of causal convolutions, an RNN and one causal attention layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DATASETS = ("separable", "xor", "circles")
ARCHITECTURES = ("mlp", "cnn", "rnn", "attention")


def points(data: str, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n labelled points in [-1, 1]^2: (n, 2) float32 and (n,) labels in {0, 1}.

    separable: a tilted line with a margin of 0.1 between the classes; xor: the sign of x1 * x2;
    circles: inside or outside the circle of radius 0.6 (a band of 0.1 round it left empty)."""
    if data not in DATASETS:
        raise ValueError(f"data must be one of {', '.join(DATASETS)}, not {data!r}")
    g = torch.Generator().manual_seed(seed)
    kept: list[torch.Tensor] = []
    while sum(len(k) for k in kept) < n:
        x = torch.rand(4 * n, 2, generator=g) * 2 - 1
        if data == "separable":
            score = x[:, 0] * 0.8 - x[:, 1] * 0.6 + 0.2  # distance to the line 0.8 x1 - 0.6 x2 + 0.2 = 0
        elif data == "xor":
            score = x[:, 0] * x[:, 1]
        else:
            score = 0.6 - x.norm(dim=1)
        kept.append(x[score.abs() > (0.1 if data != "xor" else 0.02)])
    x = torch.cat(kept)[:n]
    y = _label(data, x)
    return x, y


def _label(data: str, x: torch.Tensor) -> torch.Tensor:
    if data == "separable":
        return (x[:, 0] * 0.8 - x[:, 1] * 0.6 + 0.2 > 0).long()
    if data == "xor":
        return (x[:, 0] * x[:, 1] > 0).long()
    return (x.norm(dim=1) < 0.6).long()


def segment(w1: float, w2: float, b: float) -> tuple[list[float], list[float]]:
    """The part of the line w1 x1 + w2 x2 + b = 0 inside [-1, 1]^2, as its two ends' x1s and x2s
    (empty when the line misses the square, or when w = 0 and there is no line)."""
    ends: list[tuple[float, float]] = []
    for edge in (-1.0, 1.0):
        if w2 and abs(x2 := -(w1 * edge + b) / w2) <= 1:  # where it crosses x1 = edge
            ends.append((edge, x2))
        if w1 and abs(x1 := -(w2 * edge + b) / w1) <= 1:  # where it crosses x2 = edge
            ends.append((x1, edge))
    ends = sorted(set(ends))
    if len(ends) < 2:
        return [], []
    (a1, a2), (c1, c2) = ends[0], ends[-1]
    return [a1, c1], [a2, c2]


# --------------------------------------------------------------------------------------------
# The perceptron
# --------------------------------------------------------------------------------------------


@dataclass
class PerceptronEpoch:
    epoch: int  # 1-based
    w: tuple[float, float]  # the weights at the end of the epoch
    b: float
    mistakes: int  # updates made during the epoch (each mistake is one update)
    accuracy: float  # of the line at the end of the epoch, on all the points


def perceptron(
    data: str = "separable", n: int = 40, epochs: int = 20, lr: float = 0.1, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, list[PerceptronEpoch]]:
    """Rosenblatt's rule, one point at a time in a seeded order; stops after an epoch without a
    mistake (it has converged: every point is on its side of the line)."""
    x, y = points(data, n, seed)
    w, b = torch.zeros(2, dtype=torch.float64), 0.0
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 1))
    history = []
    for epoch in range(1, epochs + 1):
        mistakes = 0
        for i in order.tolist():
            xi = x[i].double()
            y_hat = 1 if float(w @ xi + b) > 0 else 0  # the threshold turns a score into a class
            e = int(y[i]) - y_hat  # 0 when right, +1 or -1 when wrong
            if e:
                w, b, mistakes = w + lr * e * xi, b + lr * e, mistakes + 1
        acc = float((((x.double() @ w + b) > 0).long() == y).double().mean())
        history.append(PerceptronEpoch(epoch, (float(w[0]), float(w[1])), b, mistakes, acc))
        if mistakes == 0:
            break
    return x, y, history


# --------------------------------------------------------------------------------------------
# The two-layer MLP
# --------------------------------------------------------------------------------------------


@dataclass
class MLPRun:
    x: torch.Tensor  # (n, 2) the points
    y: torch.Tensor  # (n,) their labels
    losses: list[float]  # cross-entropy after each logged step
    steps_logged: list[int]
    accuracy: float  # of the trained MLP on the points
    hidden: list[tuple[float, float, float]]  # each hidden unit's line: w1 x1 + w2 x2 + b = 0
    grid: list[float]  # (-1, 1)^2 sampled at grid x grid points, row-major by x2 then x1: P(class 1)
    grid_size: int


def mlp_forward(params: list[torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (n, 2) -> the hidden units tanh(W1 x + b1) (n, H) and the logit of class 1 (n, 1)."""
    w1, b1, w2, b2 = params
    h = torch.tanh(x @ w1.T + b1)
    return h, h @ w2.T + b2


def mlp_gradients(
    params: list[torch.Tensor], x: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The loss and its gradient for params [W1 (H, 2), b1 (H,), W2 (1, H), b2 (1,)], by the chain
    rule written out (backprop by hand: a thousand steps take milliseconds, not the second that
    autograd's bookkeeping costs at this size)."""
    h, z = mlp_forward(params, x)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(z, target)
    dz = (torch.sigmoid(z) - target) / len(x)  # d loss / d z for the mean cross-entropy
    w2 = params[2]  # (1, H)
    dpre = (dz @ w2) * (1 - h * h)  # back through W2, then tanh' = 1 - tanh^2
    return loss, [dpre.T @ x, dpre.sum(0), dz.T @ h, dz.sum(0)]


def adam_step(params, grads, m, v, t: int, lr: float, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
    """One Adam update in place, as torch.optim.Adam makes it (no weight decay)."""
    b1, b2 = betas
    for p, g, mi, vi in zip(params, grads, m, v):
        mi.mul_(b1).add_(g, alpha=1 - b1)  # the mean of the gradients
        vi.mul_(b2).addcmul_(g, g, value=1 - b2)  # the mean of their squares
        denom = (vi.sqrt() / math.sqrt(1 - b2**t)).add_(eps)
        p.addcdiv_(mi, denom, value=-lr / (1 - b1**t))  # both means bias-corrected


def mlp(
    data: str = "xor",
    hidden: int = 8,
    steps: int = 400,
    lr: float = 0.05,
    n: int = 80,
    grid: int = 41,
    seed: int = 0,
) -> MLPRun:
    """y2 = W2 tanh(W1 x + b1) + b2, trained full-batch with Adam on the binary cross-entropy
    (weights drawn as torch.nn.Linear draws them)."""
    x, y = points(data, n, seed)
    torch.manual_seed(seed)
    first, second = torch.nn.Linear(2, hidden), torch.nn.Linear(hidden, 1)
    drawn = (first.weight, first.bias, second.weight, second.bias)
    # the four tensors are views of one vector, so that Adam updates them all in a few operations
    flat = torch.cat([t.detach().flatten() for t in drawn])
    params = [part.view(t.shape) for part, t in zip(flat.split([t.numel() for t in drawn]), drawn)]
    m, v = torch.zeros_like(flat), torch.zeros_like(flat)
    target = y.float().unsqueeze(1)
    losses, logged = [], []
    every = max(1, steps // 100)
    for step in range(1, steps + 1):
        loss, grads = mlp_gradients(params, x, target)
        adam_step([flat], [torch.cat([g.flatten() for g in grads])], [m], [v], step, lr)
        if step % every == 0 or step == steps:  # the loss before this step's update, as autograd's loop logs it
            logged.append(step)
            losses.append(loss.item())

    def net(pts: torch.Tensor) -> torch.Tensor:
        return mlp_forward(params, pts)[1]  # (k, 1) logits

    acc = float(((net(x).squeeze(1) > 0).long() == y).float().mean())
    axis = torch.linspace(-1, 1, grid)
    g2, g1 = torch.meshgrid(axis, axis, indexing="ij")  # rows: x2, columns: x1
    probs = torch.sigmoid(net(torch.stack([g1.flatten(), g2.flatten()], dim=1))).squeeze(1)
    w1, b1 = params[0], params[1]
    lines = [(float(w[0]), float(w[1]), float(b)) for w, b in zip(w1, b1)]
    return MLPRun(x, y, losses, logged, acc, lines, probs.tolist(), grid)


# --------------------------------------------------------------------------------------------
# How far one layer moves information
# --------------------------------------------------------------------------------------------


def _layer(arch: str, d: int, kernel: int, cnn_layers: int, g: torch.Generator):
    """A random layer of the family, as a function (T, d) -> (T, d); weights scaled so that signals
    neither explode nor vanish in one step (1 / sqrt(fan-in))."""

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) / math.sqrt(shape[0])

    if arch == "mlp":  # the same MLP at each position: nothing crosses between rows
        w1, w2 = w(d, 4 * d), w(4 * d, d)
        return lambda x: torch.tanh(x @ w1) @ w2
    if arch == "cnn":  # causal convolutions: position t reads t - kernel + 1 .. t of the layer below
        ws = [w(kernel * d, d) for _ in range(cnn_layers)]

        def conv(x: torch.Tensor) -> torch.Tensor:
            for wk in ws:
                padded = torch.cat([torch.zeros(kernel - 1, d), x])  # (T + k - 1, d)
                windows = padded.unfold(0, kernel, 1).transpose(1, 2).reshape(len(x), kernel * d)  # (T, k d)
                x = torch.tanh(windows @ wk)
            return x

        return conv
    if arch == "rnn":  # H_t = tanh(x_t W_x + H_{t-1} W_h): one step back per position
        wx, wh = w(d, d), w(d, d) * 0.9  # recurrent weights a little contracting, as trained RNNs often are

        def rnn(x: torch.Tensor) -> torch.Tensor:
            h, out = torch.zeros(d), []
            for t in range(len(x)):
                h = torch.tanh(x[t] @ wx + h @ wh)
                out.append(h)
            return torch.stack(out)

        return rnn
    wq, wk, wv = w(d, d), w(d, d), w(d, d)  # one causal attention head over the whole prefix

    def attention(x: torch.Tensor) -> torch.Tensor:
        scores = (x @ wq) @ (x @ wk).T / math.sqrt(d)  # (T, T)
        mask = torch.triu(torch.ones(len(x), len(x), dtype=torch.bool), diagonal=1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ (x @ wv)

    return attention


def path_length(arch: str, distance: int, kernel: int, cnn_layers: int) -> int | None:
    """Steps a signal takes to go `distance` positions forward, or None where it cannot go at all."""
    if distance == 0:
        return 0
    if arch == "mlp":
        return None
    if arch == "cnn":
        return math.ceil(distance / (kernel - 1)) if distance <= cnn_layers * (kernel - 1) else None
    return distance if arch == "rnn" else 1


def reach(
    positions: int = 16, d: int = 8, kernel: int = 3, cnn_layers: int = 3, seed: int = 0
) -> dict[str, list[float]]:
    """For each architecture, ||d out_T / d x_t|| for t = 1..T (the last position's output against
    each input), from autograd on a random seeded layer."""
    out = {}
    for arch in ARCHITECTURES:
        g = torch.Generator().manual_seed(seed)
        f = _layer(arch, d, kernel, cnn_layers, g)
        x = torch.randn(positions, d, generator=g)
        jac = torch.autograd.functional.jacobian(lambda x, f=f: f(x)[-1], x)  # (d, T, d)
        out[arch] = jac.pow(2).sum(dim=(0, 2)).sqrt().tolist()
    return out
