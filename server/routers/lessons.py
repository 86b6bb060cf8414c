"""The /learn page's training lessons: initialisation, dropout, Adam's moments, the embedding scale,
BERT's masked LM against GPT's causal LM, teacher forcing, how the loss reaches a head, tokens per
update. Pure functions in model/lessons.py; a limit that depends on the loaded model is a 422
naming the field (each field's description says which)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Service
from ..explain import lessons
from ..schemas import lessons as schemas
from ..schemas.common import ERROR_RESPONSES

router = APIRouter(tags=["curves"])

DEFAULT_SENTENCE = "Once more unto the breach, dear friends, once more"
Seed = Annotated[int, Query(ge=0, le=2**31 - 1, description="seed of the random draws (same seed, same numbers)")]
LessonText = Annotated[
    str,
    Query(
        min_length=1,
        max_length=400,
        description=(
            f"a short text: in the loaded model's tokenizer it must be 2 to {lessons.MAX_LESSON_TOKENS} tokens "
            "(and at most the model's context + 1); masked-lm accepts 1 token"
        ),
    ),
]


@router.get(
    "/curves/initialisation",
    response_model=schemas.InitResponse,
    responses=ERROR_RESPONSES,
    summary="N(0, 0.02) against Xavier and He: weight scale, the variance of a pre-activation, and a simulation",
)
def initialisation(
    width: Annotated[int, Query(ge=2, le=1024, description="the layer's width (fan-in = fan-out); GPT-1: 768")] = 768,
    rows: Annotated[
        int, Query(ge=1, le=256, description="random LayerNorm'd hidden vectors pushed through each matrix")
    ] = 128,
    seed: Seed = 0,
) -> schemas.InitResponse:
    return lessons.initialisation(width, rows, seed)


@router.get(
    "/curves/dropout",
    response_model=schemas.DropoutResponse,
    responses=ERROR_RESPONSES,
    summary="Inverted dropout on a real vector (an embedding row of the loaded model): mask, 1/(1-p), expectation kept",
)
def dropout(
    service: Service,
    p: Annotated[
        float, Query(ge=0, lt=1, description="drop probability (GPT-2's text example: 0.2; the Transformer: 0.1)")
    ] = 0.2,
    size: Annotated[
        int, Query(ge=1, le=64, description="how many numbers of the row to show; at most the loaded model's d_model")
    ] = 16,
    token_id: Annotated[
        int | None,
        Query(
            ge=0,
            le=10_000_000,
            description="whose embedding row (default: the token ' the'); must be below the loaded model's vocab_size",
        ),
    ] = None,
    seed: Seed = 0,
    trials: Annotated[int, Query(ge=1, le=20_000, description="fresh masks averaged to show the expectation")] = 5000,
) -> schemas.DropoutResponse:
    return lessons.dropout(service, p, size, token_id, seed, trials)


@router.get(
    "/curves/adam",
    response_model=schemas.AdamResponse,
    responses=ERROR_RESPONSES,
    summary="Adam's moving averages: memory 1/(1-beta), bias correction in the first steps, epsilon",
)
def adam(
    beta1: Annotated[float, Query(ge=0, le=0.9999)] = 0.9,
    beta2: Annotated[float, Query(ge=0, le=0.9999)] = 0.999,
    eps: Annotated[float, Query(ge=1e-12, le=1)] = 1e-8,
    gradient: Annotated[
        float, Query(ge=1e-6, le=1e3, description="the constant gradient of the bias-correction example")
    ] = 1.0,
    steps: Annotated[int, Query(ge=1, le=2000, description="first updates shown")] = 60,
    ages: Annotated[
        int, Query(ge=2, le=5000, description="how far back the weights of past gradients are drawn")
    ] = 3000,
) -> schemas.AdamResponse:
    return lessons.adam(beta1, beta2, eps, gradient, steps, ages)


@router.get(
    "/curves/embedding-scale",
    response_model=schemas.EmbeddingScaleResponse,
    responses=ERROR_RESPONSES,
    summary="Embeddings times sqrt(d_model) against the sinusoidal position vector's norm sqrt(d_model/2)",
)
def embedding_scale(
    d_model: Annotated[int, Query(ge=2, le=4096)] = 512,
    positions: Annotated[int, Query(ge=1, le=2048)] = 128,
    tokens: Annotated[int, Query(ge=1, le=1024, description="random embedding rows")] = 128,
    seed: Seed = 0,
) -> schemas.EmbeddingScaleResponse:
    return lessons.embedding_scale(d_model, positions, tokens, seed)


@router.get(
    "/curves/masked-lm",
    response_model=schemas.MaskedLmResponse,
    responses=ERROR_RESPONSES,
    summary="BERT against GPT: bidirectional and causal masks on one text; masked-LM corruption (15%: 80/10/10)",
)
def masked_lm(
    service: Service,
    text: LessonText = DEFAULT_SENTENCE,
    seed: Seed = 0,
    rate: Annotated[float, Query(gt=0, le=1, description="share of positions picked (BERT: 0.15)")] = 0.15,
) -> schemas.MaskedLmResponse:
    return lessons.masked_lm(service, text, seed, rate)


@router.get(
    "/curves/teacher-forcing",
    response_model=schemas.TeacherForcingResponse,
    responses=ERROR_RESPONSES,
    summary="Inputs and targets one position apart; one forward pass of the loaded model scores every position",
)
def teacher_forcing(service: Service, text: LessonText = DEFAULT_SENTENCE) -> schemas.TeacherForcingResponse:
    return lessons.teacher_forcing(service, text)


@router.get(
    "/curves/head-gradients",
    response_model=schemas.HeadGradientsResponse,
    responses=ERROR_RESPONSES,
    summary="How the loss reaches an attention head: real dL/dA, dL/dV of one head and every head's weight-gradient norm",
)
def head_gradients(
    service: Service,
    text: LessonText = DEFAULT_SENTENCE,
    layer: Annotated[int, Query(ge=0, le=1000, description="below the loaded model's n_layer")] = 0,
    head: Annotated[int, Query(ge=0, le=1024, description="below the loaded model's n_head")] = 0,
) -> schemas.HeadGradientsResponse:
    return lessons.head_gradients(service, text, layer, head)


@router.get(
    "/curves/tokens-per-update",
    response_model=schemas.TokensPerUpdateResponse,
    responses=ERROR_RESPONSES,
    summary="Predictions per update (batch x context) and over pretraining, against a labelled data set",
)
def tokens_per_update(
    service: Service,
    batch: Annotated[int, Query(ge=1, le=1_000_000, description="sequences per update (GPT-1: 64)")] = 64,
    context: Annotated[int, Query(ge=1, le=1_000_000, description="tokens per sequence (GPT-1: 512)")] = 512,
    corpus_tokens: Annotated[
        float, Query(ge=1, le=1e15, description="tokens in the pretraining corpus (GPT-1: about 1e9)")
    ] = 1e9,
    epochs: Annotated[float, Query(gt=0, le=1e4, description="passes over it (GPT-1: 100)")] = 100,
    labelled_examples: Annotated[
        int, Query(ge=1, le=10**12, description="the labelled set (SNLI: about 550,000)")
    ] = 550_000,
) -> schemas.TokensPerUpdateResponse:
    return lessons.tokens_per_update(service, batch, context, corpus_tokens, epochs, labelled_examples)
