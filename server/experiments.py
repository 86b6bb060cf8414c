"""Small experiments from the seeds that really train: each is a few short runs to compare.

The page starts the variants one after another through POST /api/v1/training; identical requests
are answered from the finished run (cached), so an experiment trains once per app data folder.
"""

from __future__ import annotations

from .schemas.training import Experiment, ExperimentVariant, ModelOverrides, TrainingRequest

BASE = dict(corpus="shakespeare", preset="tiny", vocab_size=512, batch_size=16, max_steps=200, seed=7,
            snapshots=[0.0, 1.0])


def _req(**kw) -> TrainingRequest:
    over = kw.pop("overrides", {})
    return TrainingRequest(**{**BASE, **kw}, overrides=ModelOverrides(**over))


EXPERIMENTS: list[Experiment] = [
    Experiment(
        name="causal-mask", title="Remove the causal mask",
        question="What if every position could see the tokens after it while training?",
        what_to_look_for="Without the mask the training loss falls far below the masked model's: the answer is "
                         "visible one position ahead, so the model learns to copy it. Generation has no future "
                         "to copy from, and its sample falls apart.",
        variants=[ExperimentVariant(label="causal mask (normal)", request=_req(max_steps=600)),
                  ExperimentVariant(label="mask removed", request=_req(max_steps=600, overrides={"causal": False}))]),
    Experiment(
        name="norm-warmup", title="Pre-norm vs post-norm, with and without warmup",
        question="Does where LayerNorm sits change how well training starts at a high learning rate?",
        what_to_look_for="Compare the early loss curves and the per-layer gradient norms: post-norm (GPT-1) "
                         "without warmup starts worst; pre-norm (GPT-2) keeps gradients more even across layers.",
        variants=[ExperimentVariant(label=f"{norm}-norm, {'warmup' if w else 'no warmup'}",
                                    request=_req(max_lr=1e-2, warmup_steps=w, overrides={"norm": norm, "n_layer": 4}))
                  for norm in ("pre", "post") for w in (50, 0)]),
    Experiment(
        name="weight-tying", title="Weight tying",
        question="What do we gain by using the embedding matrix again as the output layer?",
        what_to_look_for="Tying saves one vocabulary-sized matrix (vocab x d parameters: about 38.6 million in "
                         "GPT-2 small, under a third of its size). Compare what the saving costs in validation loss: "
                         "in a model this tiny the separate output matrix is a large share of all parameters, so "
                         "the untied model may do a little better.",
        variants=[ExperimentVariant(label="tied (logits = h W_E^T)", request=_req()),
                  ExperimentVariant(label="untied (separate W_U)", request=_req(overrides={"tie_weights": False}))]),
]
