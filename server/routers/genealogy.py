"""The family tree the texts narrate (the /genealogy page's JSON twin). Pure data from
gptscope.model.genealogy. /genealogy/worked recomputes the texts' worked examples at other numbers;
the defaults are the texts'."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from ..explain import genealogy as genealogy_data
from ..schemas import genealogy as schemas
from ..schemas.common import ERROR_RESPONSES

router = APIRouter(tags=["genealogy"])


@router.get(
    "/genealogy",
    response_model=schemas.GenealogyResponse,
    responses=ERROR_RESPONSES,
    summary="The texts' models from the 2017 Transformer to InstructGPT: changes, configs, counted parameters, "
    "data, results and worked examples, each fact with its source text",
)
def genealogy() -> schemas.GenealogyResponse:
    return genealogy_data.genealogy()


@router.get(
    "/genealogy/worked",
    response_model=schemas.WorkedExamples,
    responses=ERROR_RESPONSES,
    summary="The texts' worked examples at your numbers: uniform loss to perplexity, float32 underflow against "
    "the log-sum, one LayerNorm entry, the loss at a probability",
)
def worked(
    vocab: Annotated[int, Query(ge=2, le=10_000_000, description="vocabulary size (GPT-1: 40,478)")] = 40_478,
    perplexity: Annotated[
        float,
        Query(
            ge=1,
            le=10_000_000,
            description="perplexity after training (GPT-1: 18.4); above vocab, the drop is negative",
        ),
    ] = 18.4,
    n: Annotated[int, Query(ge=1, le=100_000, description="tokens multiplied together (the text: 100)")] = 100,
    p: Annotated[float, Query(gt=0, le=1, description="the probability of each of them (the text: 0.1)")] = 0.1,
    x: Annotated[float, Query(ge=-1e6, le=1e6, description="one feature before LayerNorm (the text: 0.099)")] = 0.099,
    mean: Annotated[float, Query(ge=-1e6, le=1e6, description="its vector's mean (the text: -0.005)")] = -0.005,
    var: Annotated[float, Query(ge=0, le=1e12, description="its vector's variance (the text: 0.137)")] = 0.137,
    loss_p: Annotated[
        float, Query(gt=0, le=1, description="a probability on the right token, to mark on -ln p (0.9)")
    ] = 0.9,
) -> schemas.WorkedExamples:
    return genealogy_data.worked(vocab, perplexity, n, p, x, mean, var, loss_p)


@router.get(
    "/genealogy/texts",
    response_model=schemas.TextsResponse,
    responses=ERROR_RESPONSES,
    summary="The texts' numbers no model card carries (each with its quote and, where the app can, its own "
    "computation), their worked examples redone (tokenizers, padding, Adam) and the papers they cite",
)
def texts() -> schemas.TextsResponse:
    return genealogy_data.texts()


Dataset = Annotated[
    Literal["separable", "xor", "circles"],
    Query(description="separable: a line splits the classes; xor and circles: no line does"),
]
Seed = Annotated[int, Query(ge=0, le=2**31 - 1, description="seeds the points, their order and the weights")]


@router.get(
    "/genealogy/perceptron",
    response_model=schemas.PerceptronResponse,
    responses=ERROR_RESPONSES,
    summary="A perceptron learning a boundary by Rosenblatt's rule: its line after each epoch and its mistakes",
)
def perceptron(
    data: Dataset = "separable",
    n: Annotated[int, Query(ge=4, le=200, description="labelled points")] = 40,
    epochs: Annotated[int, Query(ge=1, le=100, description="passes over the points at most")] = 20,
    lr: Annotated[float, Query(gt=0, le=10, description="the learning rate eta")] = 0.1,
    seed: Seed = 0,
) -> schemas.PerceptronResponse:
    return genealogy_data.perceptron(data, n, epochs, lr, seed)


@router.get(
    "/genealogy/mlp",
    response_model=schemas.MLPResponse,
    responses=ERROR_RESPONSES,
    summary="A two-layer MLP bending the boundary a perceptron cannot: loss, hidden units' lines, P(class) on a grid",
)
def mlp(
    data: Dataset = "xor",
    hidden: Annotated[int, Query(ge=1, le=64, description="hidden tanh units")] = 8,
    steps: Annotated[int, Query(ge=1, le=1000, description="full-batch Adam steps")] = 400,
    lr: Annotated[float, Query(gt=0, le=1, description="Adam's learning rate")] = 0.05,
    n: Annotated[int, Query(ge=4, le=200, description="labelled points")] = 80,
    seed: Seed = 0,
) -> schemas.MLPResponse:
    return genealogy_data.mlp(data, hidden, steps, lr, n, seed)


@router.get(
    "/genealogy/reach",
    response_model=schemas.ReachResponse,
    responses=ERROR_RESPONSES,
    summary="How far one layer moves information: the last output's sensitivity to each input for an MLP, "
    "causal convolutions, an RNN and attention",
)
def reach(
    positions: Annotated[int, Query(ge=2, le=64, description="sequence length T")] = 16,
    kernel: Annotated[int, Query(ge=2, le=9, description="the convolution's width")] = 3,
    cnn_layers: Annotated[int, Query(ge=1, le=8, description="stacked causal convolutions")] = 3,
    seed: Seed = 0,
) -> schemas.ReachResponse:
    return genealogy_data.reach(positions, kernel, cnn_layers, seed)


@router.get(
    "/genealogy/moe",
    response_model=schemas.MoEResponse,
    responses=ERROR_RESPONSES,
    summary="Mixture-of-Experts on GPT-2 XL's shape: stored weights against each token's compute, by expert count",
)
def moe(
    top_k: Annotated[int, Query(ge=1, le=8, description="experts each token goes through")] = 2,
) -> schemas.MoEResponse:
    return genealogy_data.moe(top_k)
