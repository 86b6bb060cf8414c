"""The stages of a forward trace, one model per block of POST /api/v1/forward's answer (which
ones a request gets is `include`: see server/explain/parts.py, the registry of parts)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .arrays import Matrix, Tensor4, Vector
from .genealogy import FactEntry

ContributionKind = Literal["embed", "smear", "head", "attn_bias", "attn", "mlp", "bias"]  # what wrote a contribution


class NextToken(BaseModel):
    id: int
    text: str
    prob: float
    logit: float


class AttentionBlock(BaseModel):
    layers: list[int] = Field(description="layer index of each entry of `pattern`")
    heads: list[int] = Field(description="head index of each entry of `pattern[l]`")
    pattern: Tensor4 = Field(
        description="[layer][head][query][key]: softmax weights, 4 decimals; each row sums to 1. For a causal "
        "model (`causal` true) row q lists keys 0..q only: later keys are masked and get exactly 0, "
        "so they are left out (half the bytes). A model trained without the mask has full rows."
    )


class PermutationCheck(BaseModel):
    """The first block's attention run on this prompt's token rows twice, in the prompt's order and with
    its first and last tokens exchanged ("dog bites man" against "man bites dog"), each token's output
    then compared with its own output from the other run. The causal mask is lifted for the comparison:
    a mask that lets each token see only earlier ones is itself an order."""

    layer: int = Field(0, description="the block whose attention is run (the first)")
    order: list[int] = Field(description="the reordered prompt: order[i] is the prompt position of the token put at i")
    swapped: list[int] = Field(description="the two prompt positions exchanged: the first and the last")
    pos: Literal["learned", "rope", "none"] = Field(description="the model's own position signal")
    without_positions: float = Field(
        description="largest |difference| between a token's attention output in the two orders with no position "
        "signal (no W_P rows added, no RoPE turn): 0 up to float rounding, since attention then ignores order"
    )
    with_positions: float = Field(
        description="the same with the model's own positions (W_P rows added, or q and k turned by RoPE): large, "
        "since each token now sits at a different place; equal to without_positions for a model with none"
    )
    causal_without_positions: float | None = Field(
        description="no position signal but the model's causal mask kept: the mask alone tells order apart "
        "(null for a model trained without the mask)"
    )
    output_scale: float = Field(
        description="largest |attention output| of the prompt's order, with the model's positions and no mask: "
        "what the differences compare with"
    )
    per_token_without: list[float] = Field(description="each prompt position's largest |difference| without positions")
    per_token_with: list[float] = Field(description="the same with the model's positions")
    fact: FactEntry = Field(description="what the texts say of it, with its quote (the Transformer card's fact)")


class EmbeddingsBlock(BaseModel):
    token: Matrix = Field(description="(T, d) rows of W_E for the prompt's token ids")
    pos: Literal["learned", "rope", "none"] = Field(
        "learned",
        description="how the model knows positions: learned rows "
        "added here, or rotary (RoPE, inside attention), or not at all",
    )
    position: Matrix | None = Field(
        description="(T, d) rows of W_P for positions 0..T-1 (null without learned positions)"
    )
    sum: Matrix = Field(description="(T, d) token + position: the residual stream entering block 0")
    token_norms: Vector
    position_norms: Vector | None
    permutation: PermutationCheck | None = Field(
        None, description="attention without positions ignores word order, run on this prompt (null: one token)"
    )


class LayerNormDetail(BaseModel):
    layer: int
    which: str = Field(
        description="ln1 (before attention in a pre-norm model; after the add in post-norm; on attention's output "
        "in a model that normalises each sublayer's output only, OLMo 2's)"
    )
    position: int
    kind: Literal["layernorm", "rmsnorm"] = Field("layernorm", description="RMSNorm subtracts no mean and has no shift")
    input: Vector = Field(description="(d,) the vector entering the LayerNorm")
    mean: float | None = Field(description="the mean LayerNorm subtracts (null for RMSNorm, which keeps it)")
    variance: float = Field(description="LayerNorm: the variance; RMSNorm: the mean of the squares")
    eps: float
    std: float = Field(description="sqrt(variance + eps): LayerNorm's standard deviation, RMSNorm's root mean square")
    normalized: Vector = Field(description="(input - mean) / std (RMSNorm: input / std), before gain and shift")
    gain: Vector
    shift: Vector | None
    output: Vector = Field(description="normalized * gain + shift")


class HeadDetail(BaseModel):
    layer: int
    head: int
    d_head: int
    scale: float = Field(
        description="what q k^T is multiplied by: 1 / sqrt(d_head), or the model's own (Gemma: query_pre_attn_scalar^-1/2)"
    )
    softcap: float = Field(0.0, description="attention softcap c (Gemma 2): scores = c tanh(s / c); 0 for none")
    scores_uncapped: Matrix | None = Field(
        None, description="(T, T) q k^T * scale before the softcap (null without one)"
    )
    q: Matrix = Field(description="(T, d_head) queries of this head (after RoPE's rotation when `rotated`)")
    k: Matrix = Field(description="(T, d_head) keys of its key/value head (after RoPE's rotation when `rotated`)")
    v: Matrix = Field(description="(T, d_head) values of its key/value head")
    kv_head: int = Field(
        0,
        description="the key/value head this query head reads: with grouped-query attention "
        "n_head / n_kv_head query heads share each one",
    )
    rotated: bool = Field(False, description="q and k are shown after RoPE turned them by their positions")
    scores: Matrix = Field(description="(T, T) Q K^T / sqrt(d_head) (capped, with a softcap), before the mask")
    masked_scores: list[list[float | None]] = Field(description="(T, T) after the causal mask; null stands for -inf")
    pattern: Matrix = Field(description="(T, T) softmax of the masked scores")
    z: Matrix = Field(description="(T, d_head) pattern @ V: the weighted sum of values")
    result: Matrix = Field(description="(T, d) this head's output in the residual space: z @ W_O[head]")
    position: int
    resid_pre: Vector = Field(description="(d,) stream entering the block at the selected position")
    attn_out: Vector = Field(description="(d,) all heads' outputs + bias at that position")
    resid_mid: Vector = Field(description="(d,) stream after the attention residual add")


class Histogram(BaseModel):
    edges: Vector
    counts: list[int]


class Neuron(BaseModel):
    index: int
    pre: float
    post: float


class MLPLayer(BaseModel):
    layer: int
    histogram: Histogram = Field(description="pre-activations of every neuron at every position")
    fraction_negative: float
    mean: float
    std: float


class MLPBlock(BaseModel):
    gelu: str = Field(
        description="'exact' x*Phi(x) or 'tanh' approximation, as the model uses; 'silu' for a SwiGLU "
        "MLP (its gate's activation; post = silu(gate) * value); a GeGLU MLP's gate is the GELU named"
    )
    gated: bool = Field(False, description="a gated MLP (SwiGLU, GeGLU): post = act(gate) * value")
    curve_x: Vector
    curve_y: Vector = Field(description="the model's GELU at curve_x (drawn under the histograms)")
    layers: list[MLPLayer]
    layer: int
    position: int
    top_neurons: list[Neuron] = Field(
        description="the neurons with the largest post-GELU value at the selected layer and position"
    )
    d_mlp: int


class ResidualBlock(BaseModel):
    stages: list[str] = Field(description="'embed' then 'block i' for the stream after each block")
    norms: Matrix = Field(description="[stage][position] L2 norm of the residual stream")


class LensCandidate(BaseModel):
    id: int
    text: str
    prob: float


class LogitLensBlock(BaseModel):
    stages: list[str]
    positions: list[int]
    top: list[list[list[LensCandidate]]] = Field(
        description="[stage][position][k] tokens the final norm (none in a post-norm model) + unembedding would predict "
        "from the stream at that stage"
    )
    actual_next_prob: list[list[float | None]] = Field(
        description="[stage][position] probability of the token that really follows (null at the last position)"
    )
    kl_to_final: list[float] = Field(
        description="[stage] KL(p_final || p_lens) in nats, averaged over this prompt's positions (0 at the last stage)"
    )
    top1_agreement: list[float] = Field(
        description="[stage] share of this prompt's positions where the lens's top token is the model's final one"
    )


class PositionLoss(BaseModel):
    position: int
    next_id: int
    next_text: str
    prob: float = Field(description="probability the model gave the token that really came next")
    loss: float = Field(description="-ln(prob), nats")


class PromptLoss(BaseModel):
    positions: list[PositionLoss]
    mean_loss: float | None
    perplexity: float | None = Field(description="exp(mean loss)")
    uniform_loss: float = Field(description="ln(vocab size): a uniform guess's loss")


class Contribution(BaseModel):
    name: str = Field(
        description="embed, smear (nanochat: what the previous token's embedding added), L{l}H{h} (a head), "
        "L{l} attn bias, L{l} attention (a sandwich-norm model's whole normalised attention output), MLP{l}, "
        "or final bias; nanochat: each scaled by how much of it reaches the final norm (lambdas, backout)"
    )
    kind: ContributionKind
    layer: int | None = None
    head: int | None = None
    value: float


class Decomposition(BaseModel):
    position: int
    target_id: int
    target_text: str
    logit: float = Field(description="the model's logit for the target token")
    contributions: list[Contribution]
    total: float = Field(description="sum of the contributions")
    residual_error: float = Field(description="logit - total")
    exact: bool = Field(description="true for pre-norm models (final LayerNorm scale held at its real value)")
    note: str
    softcap: float | None = Field(
        default=None,
        description="a softcapped model's cap c (nanochat: 15): `logit` is then the logit z before the cap, which "
        "the parts add up to, and the model's own logit is c tanh(z / c), `capped_logit`",
    )
    capped_logit: float | None = Field(default=None, description="softcap: the model's own logit, c tanh(z / c)")


class RopeDistanceCheck(BaseModel):
    offset: int = Field(description="the second placement's start position")
    distances: list[int] = Field(description="query position minus key position")
    scores_at_start: list[float] = Field(
        description="score of the selected q and k with the key at position 0 and the query `distance` after it"
    )
    scores_at_offset: list[float] = Field(
        description="the same q and k with the key at `offset`: the same curve, "
        "because RoPE's score depends only on the distance"
    )


class RopeBlock(BaseModel):
    """How RoPE turns a head's queries and keys (selected layer and head)."""

    layer: int
    head: int
    kv_head: int
    base: float = Field(description="the RoPE base of this layer (Gemma 3: its local layers have their own)")
    rotary_dim: int = Field(description="the channels of each head RoPE turns (d_head, or fewer: partial rotary)")
    scaled: str = Field(
        "none",
        description="how this layer's frequencies are stretched: none, linear, llama3 or longrope (LongRoPE: each "
        "pair divided by its own factor, the short set while the pass stays within the original context, the "
        "long set once it goes past it)",
    )
    attention_factor: float = Field(
        1.0,
        description="what cos and sin are multiplied by (LongRoPE's attention factor; 1 otherwise): the turned "
        "channels' part of every score grows by its square, the distance check's included",
    )
    frequencies: list[float] = Field(
        description="(rotary_dim/2,) radians per position for each pair of dimensions: base^(-2i/rotary_dim), "
        "stretched as `scaled` says (LongRoPE: with the factor set this prompt's pass used)"
    )
    angles: Matrix = Field(description="(T, rotary_dim/2) the angle each pair turns by at each position")
    q: Matrix = Field(description="(T, d_head) queries before the rotation")
    q_rotated: Matrix
    k: Matrix = Field(description="(T, d_head) keys of the key/value head before the rotation")
    k_rotated: Matrix
    distance_check: RopeDistanceCheck


class ExpertLayer(BaseModel):
    layer: int
    probs: Matrix = Field(description="(T, n_expert) the router's probabilities for each token")
    choice: list[list[int]] = Field(description="(T, top_k) the experts each token went to")
    load: list[float] = Field(
        description="(n_expert,) share of this prompt's token-to-expert assignments each expert got"
    )


class MoEBlock(BaseModel):
    n_expert: int
    top_k: int
    layers: list[ExpertLayer]


class ClassifierBlock(BaseModel):
    """A served classifier's reading of the prompt: W_y applied to the final hidden state at the last position."""

    task: str
    labels: list[str]
    position: int = Field(description="the position read (the last one)")
    at_extract: bool = Field(
        description="whether the last token is the extract token the classifier was trained to read"
    )
    logits: list[float] = Field(description="one per label: W_y . h_last + b")
    probs: list[float]
    predicted: int = Field(description="index of the winning label")
    attention: list[list[list[float]]] = Field(description="[layer][head][key]: the last position's attention row")
    attention_mean: list[list[float]] = Field(description="[layer][key]: that row averaged over the layer's heads")
    decomposition: Decomposition = Field(
        description="the winning label's logit split into what each component "
        "wrote into the residual stream (target_id is the label index)"
    )


# ---- nanochat's stream: the smear, the lambdas, the value embeddings, the backout, the softcap ----------


class SmearDetail(BaseModel):
    channels: int = Field(description="how many of the embedding's first channels the gate reads")
    lam: float = Field(description="lambda, the gate's learned scale")
    gate: Vector = Field(description="[position] lambda sigmoid(W x_t[:channels]): the share of x_{t-1} added (0 at 0)")
    own_norm: Vector = Field(description="[position] L2 norm of the token's own normalised embedding")
    added_norm: Vector = Field(description="[position] L2 norm of what the smear added, gate * x_{t-1}")


class MixLayer(BaseModel):
    layer: int
    resid_lambda: float = Field(description="r: the stream's factor as the block reads it")
    x0_lambda: float = Field(description="a: the embedding stream x0's factor")
    stream_norm: float = Field(description="|x| at the selected position: the stream before the mix")
    x0_norm: float = Field(description="|x0| at the selected position")
    mixed_norm: float = Field(description="|r x + a x0| at the selected position: what the block reads")
    reaches_final: float = Field(description="how much of what this block writes reaches the final norm")


class ValueEmbedLayer(BaseModel):
    layer: int
    gate: Matrix = Field(description="[position][key/value head] 3 sigmoid(x[:c] W_g), from 0 to 3")
    ve_norm: Matrix = Field(description="[position][key/value head] L2 norm of the token's value-embedding row")
    v_norm: Matrix = Field(description="[position][key/value head] L2 norm of the value after the mix")


class BackoutDetail(BaseModel):
    layer: int = Field(description="the block whose output stream is taken out (n_layer // 2)")
    lam: float = Field(description="lambda_b: how much of it")
    before: Vector = Field(description="[position] |x| after the last block")
    taken: Vector = Field(description="[position] |lambda_b x_mid|")
    after: Vector = Field(description="[position] |x - lambda_b x_mid|: the stream the final norm reads")


class CappedLogit(BaseModel):
    id: int
    text: str
    uncapped: float = Field(description="z, the logit before the cap")
    capped: float = Field(description="c tanh(z / c), the model's logit")


class SoftcapDetail(BaseModel):
    cap: float = Field(description="c: logits stay inside (-c, c)")
    top: list[CappedLogit] = Field(description="the selected position's 10 largest logits, before and after")
    largest_uncapped: float = Field(description="the largest |z| over every position of the prompt")
    curve_x: Vector
    curve_y: Vector = Field(description="c tanh(x / c) at curve_x")


class StreamExtrasBlock(BaseModel):
    position: int
    smear: SmearDetail | None = None
    mixing: list[MixLayer] | None = None
    x0_reaches_final: float | None = Field(default=None, description="how much of x0 reaches the final norm")
    value_embeds: list[ValueEmbedLayer] | None = None
    backout: BackoutDetail | None = None
    softcap: SoftcapDetail | None = None


# ---- the block switches of GPT-NeoX, Gemma 2 and 3, Phi-3 and OLMo 2 ------------------------------------


class SwitchNote(BaseModel):
    name: str = Field(
        description="the switch (GPTConfig.switches): parallel, rotary_dim, geglu, sandwich, norm_out, ..."
    )
    title: str = Field(description="its name in words")
    text: str = Field(description="what it does, with this model's numbers")


class LayerKind(BaseModel):
    layer: int
    window: int = Field(description="the keys each query sees (0: every earlier one: a global layer)")
    rope_base: float | None = Field(description="the RoPE base this layer turns by (null: no RoPE)")
    rope_scaled: bool = Field(description="whether its RoPE frequencies are stretched (rope_scaling)")


class SublayerNorms(BaseModel):
    layer: int
    attn_raw: float = Field(description="|attention's output| at the selected position, before any output norm")
    attn_added: float = Field(description="|what attention adds to the stream| (after the output norm, if one)")
    mlp_raw: float | None = Field(description="|the MLP's output| before any output norm (null for experts)")
    mlp_added: float = Field(description="|what the MLP adds to the stream|")
    mlp_reads: Literal["block input", "after attention"] = Field(
        description="which stream the MLP's norm reads: the block's input (parallel) or the stream after attention"
    )
    resid_pre: float = Field(description="|the stream entering the block|")
    resid_post: float = Field(description="|the stream leaving the block|")


class ScoreCapLayer(BaseModel):
    layer: int
    largest_uncapped: float = Field(
        description="the largest |q k^T * scale| of any head, over the prompt's allowed cells"
    )
    changed_share: float = Field(description="share of the allowed scores the cap moved by more than 10%")


class AttnSoftcapDetail(BaseModel):
    cap: float = Field(description="c: scores = c tanh(s / c) before the mask and the softmax")
    layers: list[ScoreCapLayer]
    layer: int = Field(description="the selected layer")
    head: int = Field(description="the selected head")
    keys: list[int] = Field(description="the key positions the selected position reads (the mask's allowed ones)")
    uncapped: Vector = Field(description="[key] the selected head's scores at the selected position, before the cap")
    capped: Vector = Field(description="[key] ... and after it (the softmax reads these)")
    curve_x: Vector
    curve_y: Vector = Field(description="c tanh(x / c) at curve_x")


class EmbedScaleDetail(BaseModel):
    scale: float = Field(description="what each token's row of W_E is multiplied by as it enters the stream")
    row_norm: Vector = Field(description="[position] |W_E row| of the token")
    scaled_norm: Vector = Field(description="[position] |scale * W_E row|: the stream entering block 0")


class BlockSwitchesBlock(BaseModel):
    position: int
    switches: list[SwitchNote] = Field(description="each switch this model's block turns on, with its numbers")
    layers: list[LayerKind] | None = Field(
        None, description="local and global layers: each layer's window and RoPE base (null without them)"
    )
    sublayers: list[SublayerNorms] | None = Field(
        None, description="parallel blocks and norms on a sublayer's output: what each sublayer wrote, before and after"
    )
    attn_softcap: AttnSoftcapDetail | None = None
    embed_scale: EmbedScaleDetail | None = None
    softcap: SoftcapDetail | None = Field(
        None, description="the logits' softcap (Gemma 2), as nanochat's stage shows it"
    )
    rotary_dim: int | None = Field(None, description="partial rotary: the channels of each head RoPE turns")
    d_head: int
