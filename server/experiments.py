"""Small experiments from the seeds that really train: each is a few short runs to compare.

The page starts the variants one after another through POST /api/v1/training; identical requests
are answered from the finished run (cached), so an experiment trains once per app data folder.
"""

from __future__ import annotations

from gptscope.model.timeline import TIMELINE_SNAPSHOTS

from .schemas.training import Experiment, ExperimentVariant, ModelOverrides, TrainingRequest

BASE = dict(
    corpus="shakespeare", preset="tiny", vocab_size=512, batch_size=16, max_steps=200, seed=7, snapshots=[0.0, 1.0]
)


def _req(**kw) -> TrainingRequest:
    over = kw.pop("overrides", {})
    return TrainingRequest(**{**BASE, **kw}, overrides=ModelOverrides(**over))


EXPERIMENTS: list[Experiment] = [
    Experiment(
        name="causal-mask",
        title="Remove the causal mask",
        question="What if every position could see the tokens after it while training?",
        what_to_look_for="Without the mask the training loss falls far below the masked model's: the answer is "
        "visible one position ahead, so the model learns to copy it. Generation has no future "
        "to copy from, and its sample falls apart.",
        variants=[
            ExperimentVariant(label="causal mask (normal)", request=_req(max_steps=600)),
            ExperimentVariant(label="mask removed", request=_req(max_steps=600, overrides={"causal": False})),
        ],
    ),
    Experiment(
        name="norm-warmup",
        title="Pre-norm vs post-norm, with and without warmup",
        question="Does where LayerNorm sits change how well training starts at a high learning rate?",
        what_to_look_for="Compare the early loss curves and the per-layer gradient norms: post-norm (GPT-1) "
        "without warmup starts worst; pre-norm (GPT-2) keeps gradients more even across layers.",
        variants=[
            ExperimentVariant(
                label=f"{norm}-norm, {'warmup' if w else 'no warmup'}",
                request=_req(max_lr=1e-2, warmup_steps=w, overrides={"norm": norm, "n_layer": 4}),
            )
            for norm in ("pre", "post")
            for w in (50, 0)
        ],
    ),
    Experiment(
        name="dropout",
        title="Dropout on and off",
        question="Does dropping a tenth of the activations while training (the Transformer's 0.1) help?",
        what_to_look_for="Compare the training and validation losses. Dropout makes training harder on purpose, so "
        "its training loss is higher; what it can buy is a smaller gap to validation once a model starts to "
        "memorise its data. A run this short on a model this small may not get that far, so the help the "
        "Transformer's ablation found may not show here.",
        variants=[
            ExperimentVariant(label="no dropout", request=_req(max_steps=600, overrides={"dropout": 0.0})),
            ExperimentVariant(label="dropout 0.1", request=_req(max_steps=600, overrides={"dropout": 0.1})),
        ],
    ),
    Experiment(
        name="weight-tying",
        title="Weight tying",
        question="What do we gain by using the embedding matrix again as the output layer?",
        what_to_look_for="Tying saves one vocabulary-sized matrix (vocab x d parameters: about 38.6 million in "
        "GPT-2 small, under a third of its size). Compare what the saving costs in validation loss: "
        "in a model this tiny the separate output matrix is a large share of all parameters, so "
        "the untied model may do a little better.",
        variants=[
            ExperimentVariant(label="tied (logits = h W_E^T)", request=_req()),
            ExperimentVariant(label="untied (separate W_U)", request=_req(overrides={"tie_weights": False})),
        ],
    ),
]

# The run the timeline's README finding reads (tests/test_timeline_api.py trains it again): the tiny model,
# the built-in model's BPE size (so the shipped pairs fit it), the default log-spaced snapshots, float32 on
# every machine (a machine's bf16 path would give other numbers).
INDUCTION = dict(
    BASE, vocab_size=2048, batch_size=32, max_steps=1500, snapshots=list(TIMELINE_SNAPSHOTS), precision="fp32"
)

EXPERIMENTS.append(
    Experiment(
        name="induction-heads",
        title="Watch an induction head form",
        question="When does a model start to copy from what it has read, and what changes in it when it does?",
        what_to_look_for="An induction head finds the earlier place where the current token appeared and predicts "
        "the token that followed it there. On natural text a model needs billions of tokens to grow one; here every "
        "training sequence repeats a random span of itself somewhere later, so copying pays from the first step. "
        "Open each run's timeline: with repeats, the best induction score jumps within a few hundred steps (a "
        "phase change), a previous-token head grows just before it, and the circuit for a name copied from "
        "earlier in a scene changes; on the text as it is, nothing of the kind happens in this budget.",
        variants=[
            ExperimentVariant(label="text as it is", request=TrainingRequest(**INDUCTION)),
            ExperimentVariant(label="every sequence repeats a span", request=TrainingRequest(**INDUCTION, repeats=1.0)),
        ],
    )
)

# --- from GPT-2 to modern LLMs: each switch against GPT-2's block, same size, same wall clock -------

MODERN = dict(corpus="shakespeare", preset="cpu", batch_size=8, time_budget=60.0, seed=7, snapshots=[0.0, 1.0])


def _modern(**kw) -> TrainingRequest:
    over = kw.pop("overrides", {})
    return TrainingRequest(**{**MODERN, **kw}, overrides=ModelOverrides(**over))


def _pair(name: str, title: str, question: str, look: str, variants: list[tuple[str, dict]]) -> Experiment:
    return Experiment(
        name=name,
        title=title,
        question=question,
        what_to_look_for=look,
        variants=[ExperimentVariant(label=label, request=_modern(**kw)) for label, kw in variants],
    )


EXPERIMENTS += [
    _pair(
        "positions",
        "Learned positions vs RoPE vs none",
        "Does rotating queries and keys by position (RoPE) beat GPT-2's learned position rows, can a model with no "
        "position encoding at all (NoPE) keep up, and what happens past the context the model trained on?",
        "All three train on 64-token windows of a 128-position model. Compare validation losses: the model with no "
        "positions still has the causal mask, from which order can be worked out (how many tokens a position can "
        "see). Then open the checkpoints side by side on /compare with a prompt longer than 64 tokens: learned rows "
        "64..127 were never trained, while RoPE's scores depend only on distance.",
        [
            ("learned positions (GPT-2)", {"seq_len": 64}),
            ("RoPE", {"seq_len": 64, "overrides": {"pos": "rope"}}),
            ("no positions (NoPE)", {"seq_len": 64, "overrides": {"pos": "none"}}),
        ],
    ),
    _pair(
        "window",
        "Full causal attention vs a sliding window",
        "What does a query lose when it may look back only a fixed number of tokens?",
        "The window model's queries see their last 16 keys; the other's see every earlier one. Compare validation "
        "losses. In this app the window is a mask: it changes what each query can see, not the time a step takes "
        "(a kernel built for windows would skip the masked work, and a KV cache would keep only 16 positions).",
        [("full causal attention", {}), ("sliding window of 16", {"overrides": {"window": 16}})],
    ),
    _pair(
        "rmsnorm",
        "LayerNorm vs RMSNorm",
        "Does dropping LayerNorm's mean and shift cost anything?",
        "RMSNorm only rescales; it is a little cheaper per step, so in the same wall clock it gets slightly more "
        "updates. Compare the validation losses and the steps each run reached.",
        [("LayerNorm", {}), ("RMSNorm", {"overrides": {"norm_type": "rmsnorm"}})],
    ),
    _pair(
        "swiglu",
        "GELU MLP vs SwiGLU",
        "Does a gated MLP learn more per parameter?",
        "SwiGLU has three matrices 8d/3 wide instead of two 4d wide: the same parameter count. Compare validation loss.",
        [("GELU MLP (GPT-2)", {}), ("SwiGLU", {"overrides": {"mlp": "swiglu"}})],
    ),
    _pair(
        "gqa",
        "Multi-head vs grouped-query vs multi-query attention",
        "How much do shared key/value heads cost in loss, and what do they save in the KV cache?",
        "4 query heads with 4, 2 or 1 key/value heads: the KV cache shrinks 2x and 4x (see /learn's KV-cache panel); "
        "the model has fewer parameters too. Compare validation losses.",
        [
            ("MHA: 4 KV heads", {}),
            ("GQA: 2 KV heads", {"overrides": {"n_kv_head": 2}}),
            ("MQA: 1 KV head", {"overrides": {"n_kv_head": 1}}),
        ],
    ),
    _pair(
        "moe",
        "Dense FFN vs mixture of experts",
        "Do four small experts beat one FFN of the same total size?",
        "The MoE has 4 experts of width 128 (the dense FFN is 512 wide: the same parameters), each token uses one: a "
        "quarter of the FFN compute per token. Compare validation loss and steps reached.",
        [("dense FFN", {}), ("4 experts, top-1", {"overrides": {"n_expert": 4, "top_k_experts": 1, "d_mlp": 128}})],
    ),
    _pair(
        "muon",
        "AdamW vs Muon",
        "Does orthogonalising the updates of the weight matrices (Muon) train faster?",
        "Muon updates the blocks' 2-D matrices with an orthogonalised momentum; AdamW still updates embeddings, "
        "biases and gains. Compare the loss curves at equal wall clock.",
        [("AdamW", {"optimizer": "adamw"}), ("Muon + AdamW", {"optimizer": "muon"})],
    ),
    _pair(
        "llama-style",
        "GPT-2's block vs today's",
        "All the modern choices together, at the same size:",
        "gpt2-style: learned positions, LayerNorm, GELU MLP, multi-head attention, biases. llama-style: RoPE, RMSNorm, "
        "SwiGLU, grouped-query attention, no biases; within 0.1% of the same parameter count.",
        [("gpt2-style", {"preset": "gpt2-style"}), ("llama-style", {"preset": "llama-style"})],
    ),
    _pair(
        "nanochat",
        "GPT-2's block vs nanochat's",
        "nanochat's block (Karpathy's successor to nanoGPT) against GPT-2's, on the same budget:",
        "nanochat-tiny: GPT-2's width and depth with RoPE, RMSNorm without gains, a ReLU² MLP, QK-norm, an untied head, "
        "the smear, x0 mixed back in before every block, value embeddings, sliding windows, the backout and a softcap "
        "of 15. The untied head and the value embeddings make it larger; compare the loss at equal wall clock.",
        [("gpt2-style", {"preset": "gpt2-style"}), ("nanochat-tiny", {"preset": "nanochat-tiny"})],
    ),
]
