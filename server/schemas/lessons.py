"""The JSON contract of the /learn page's training lessons (/api/v1/curves/...): initialisation,
dropout, Adam's moments, the embedding scale, BERT's masked LM against GPT's causal LM, teacher
forcing, how the loss reaches a head, tokens per update. Pure functions in model/lessons.py.

Every number is finite; a value with no finite answer is null."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .learn import Histogram


class InitScheme(BaseModel):
    name: str = Field(description="gpt1, xavier or he")
    label: str
    torch_init: str = Field(description="the torch.nn.init call that drew the simulated matrix")
    std: float = Field(description="the weights' standard deviation (768 wide: 0.02, 0.036, 0.051)")
    variance_formula: float = Field(
        description="width * std^2: the variance of one pre-activation w.h when h has unit "
        "variance per coordinate (GPT-1 at 768: 0.307)"
    )
    std_formula: float = Field(description="its square root (GPT-1 at 768: 0.554)")
    band_sigmas: float = Field(description="how many of those standard deviations the band [-2, 2] spans (GPT-1: 3.6)")
    variance_simulated: float = Field(description="the variance of rows x width real pre-activations W h")
    share_in_band_simulated: float = Field(description="share of the simulated pre-activations inside [-2, 2]")
    histogram: Histogram = Field(
        description="the simulated pre-activations on [-4, 4] (values beyond are counted at the ends)"
    )
    density_formula: list[float] = Field(description="N(0, variance_formula) density at the histogram's centres")


class InitResponse(BaseModel):
    width: int
    rows: int
    seed: int
    band: float = Field(description="the half-width of the band where GELU and ReLU differ most (2)")
    schemes: list[InitScheme]


class DropoutResponse(BaseModel):
    p: float
    scale: float = Field(description="1 / (1 - p), what every surviving activation is multiplied by (p = 0.2: 1.25)")
    token_id: int
    token: str = Field(description="the token whose embedding row is the vector shown")
    h: list[float] = Field(description="the first `size` numbers of the loaded model's embedding row W_E[token_id]")
    mask: list[int] = Field(description="1 kept, 0 dropped (seeded)")
    out: list[float] = Field(description="h * mask / (1 - p)")
    kept: int
    trials: int
    average_rescaled: list[float] = Field(
        description="the mean of h * mask / (1 - p) over `trials` fresh masks: close to h"
    )
    average_plain: list[float] = Field(description="the same without the rescale: close to (1 - p) h")
    max_abs_error_rescaled: float = Field(description="max |average_rescaled - h|")
    torch_max_abs_diff: float = Field(
        description="max over survivors of |torch.nn.functional.dropout(h) - h / (1 - p)|: "
        "PyTorch applies the same rescale"
    )


class AdamPreset(BaseModel):
    label: str
    lr: float | None
    beta1: float
    beta2: float
    eps: float
    memory_beta1: float = Field(description="1 / (1 - beta1): steps the first moment remembers")
    memory_beta2: float = Field(
        description="1 / (1 - beta2): steps the second moment remembers (0.999: 1,000; 0.98: 50)"
    )


class AdamResponse(BaseModel):
    beta1: float
    beta2: float
    eps: float
    gradient: float = Field(description="the constant gradient of the bias-correction example")
    memory_beta1: float
    memory_beta2: float
    ages: list[int] = Field(description="how many steps ago a gradient was seen")
    weights_beta1: list[float] = Field(description="(1 - beta1) beta1^age: its weight in the first moment")
    weights_beta2: list[float] = Field(description="(1 - beta2) beta2^age: its weight in the second moment")
    weight_within_memory_beta2: float = Field(
        description="total weight of the last 1/(1 - beta2) steps (about 1 - 1/e)"
    )
    steps: list[int] = Field(description="the first updates, 1-based")
    m: list[float] = Field(description="raw first moment: starts at zero, so it lags the true g")
    m_hat: list[float] = Field(description="m / (1 - beta1^t): exactly g")
    v: list[float]
    v_hat: list[float] = Field(description="v / (1 - beta2^t): exactly g^2")
    step: list[float] = Field(description="Adam's step per unit learning rate (formulas.adam_step): about 1")
    step_uncorrected: list[float] = Field(
        description="the step without bias correction (first: (1 - beta1) / sqrt(1 - beta2))"
    )
    eps_gradients: list[float] = Field(description="steady gradient sizes on a log grid")
    eps_ratio: list[float] = Field(description="m_hat / (sqrt(v_hat) + eps) = g / (g + eps): 1 until g nears eps")
    presets: list[AdamPreset] = Field(description="Kingma and Ba's defaults, the Transformer's, torch.optim.Adam's")


class EmbeddingScaleResponse(BaseModel):
    d_model: int
    sqrt_d_model: float = Field(description="the factor the Transformer multiplies embeddings by (512: 22.6)")
    position_norm_formula: float = Field(
        description="sqrt(d_model / 2): every sinusoidal position vector's length (512: 16)"
    )
    positions: list[int]
    position_norms: list[float] = Field(description="the length of the sinusoidal vector at each position")
    embedding_norms: list[float] = Field(
        description="lengths of random embedding rows initialised N(0, 1/d_model): about 1"
    )
    embedding_norms_scaled: list[float] = Field(description="the same rows times sqrt(d_model): about sqrt(d_model)")
    embedding_norm_mean: float
    embedding_norm_scaled_mean: float
    position_to_embedding: float = Field(
        description="position norm / mean unscaled embedding norm: how far position "
        "would drown identity without the scale"
    )


class TokenText(BaseModel):
    id: int
    text: str


class MaskedLmPosition(BaseModel):
    index: int
    original: TokenText
    action: str | None = Field(description="null: not picked; mask, random or keep")
    shown: str = Field(description="what the model reads there: [MASK], the random token, or the original")
    random_id: int | None = Field(None, description="the random token's id when action = random")


class MaskedLmResponse(BaseModel):
    rate: float
    seed: int
    tokens: list[TokenText] = Field(description="the text in the loaded model's tokenizer")
    causal: list[list[bool]] = Field(description="GPT: may query i see key j? j <= i")
    bidirectional: list[list[bool]] = Field(description="BERT: every query sees every key")
    visible_next_causal: int = Field(
        description="positions whose next token is visible to them under the causal mask (0)"
    )
    visible_next_bidirectional: int = Field(
        description="the same under the full mask (n - 1): predicting the next token would be copying"
    )
    positions: list[MaskedLmPosition]
    picked: int
    shares: dict[str, float] = Field(
        description="the same corruption on 100,000 positions: picked (0.15), and of the "
        "picked: mask (0.8), random (0.1), keep (0.1)"
    )
    cannot_generate: str = Field(description="why a masked-LM encoder does not write text")


class TeacherForcingResponse(BaseModel):
    tokens: list[TokenText]
    inputs: list[TokenText] = Field(description="tokens[:-1]: what the model reads")
    targets: list[TokenText] = Field(description="tokens[1:]: what each position must predict, one position later")
    loss: list[float] = Field(description="-ln p(target) at every position, all from ONE forward pass")
    prob: list[float] = Field(description="p(target) at every position")
    loss_one_prefix_at_a_time: list[float] = Field(description="the same losses from one forward pass per prefix")
    max_abs_diff: float = Field(description="max |loss - loss_one_prefix_at_a_time| (float32 rounding only)")
    mean_loss: float = Field(description="the training loss of this sequence (nats per token)")
    predictions: int = Field(description="next-token problems scored by the one pass (n - 1)")
    forward_passes_one_at_a_time: int


class HeadNorm(BaseModel):
    q: float
    k: float
    v: float
    o: float
    total: float


class HeadGradientsResponse(BaseModel):
    layer: int
    head: int
    tokens: list[TokenText]
    inputs: list[TokenText]
    loss: float = Field(description="mean next-token loss of the text (the scalar that is differentiated)")
    causal: bool
    A: list[list[float]] = Field(description="the head's attention weights (queries x keys)")
    dA: list[list[float]] = Field(
        description="dL/dA by autograd (entries above the diagonal of a causal head never "
        "reach the loss: softmax's backward drops them)"
    )
    V: list[list[float]] = Field(description="the head's value vectors (positions x d_head)")
    dV: list[list[float]] = Field(description="dL/dV by autograd")
    G: list[list[float]] = Field(description="dL/dZ, the gradient arriving at the head's output Z = A V")
    dA_formula_max_abs_diff: float = Field(description="max |dL/dA - G V^T|")
    dV_formula_max_abs_diff: float = Field(
        description="max |dL/dV - A^T G| (summed over heads sharing a key/value head)"
    )
    dV_row_norms: list[float] = Field(
        description="|dL/dV_j| per key position j: a position the head ignored gets little"
    )
    attention_received: list[float] = Field(description="sum over queries of A[i, j] per key position j")
    norms: list[list[HeadNorm]] = Field(
        description="[layer][head]: gradient norm on the head's slice of W_Q, W_K, W_V, W_O"
    )


class TokensRow(BaseModel):
    label: str
    batch: int
    context: int
    per_update: int = Field(description="batch x context: next-token predictions in one update")


class TokensPerUpdateResponse(BaseModel):
    batch: int
    context: int
    per_update: int = Field(description="64 x 512 = 32,768 for GPT-1")
    corpus_tokens: float
    epochs: float
    total_predictions: float = Field(description="corpus_tokens x epochs (GPT-1: about 10^11)")
    updates: float = Field(description="total_predictions / per_update")
    labelled_examples: int = Field(description="the largest labelled set to compare with (SNLI: about 550,000)")
    predictions_per_labelled_example: float
    models: list[TokensRow] = Field(description="GPT-1, GPT-2 and the loaded model's own training batch")
