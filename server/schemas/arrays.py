"""Numeric arrays in answers: a field typed with `array(...)` holds either nested lists (as any
pydantic field) or an `Arr`, a tensor on its way to the client that is turned into lists only if
the answer is sent as JSON. In the binary form (server/wire.py) it goes straight from the tensor to
bytes, with no Python float per number. Either way the numbers are the same: the tensor rounded to
`digits` decimals. The JSON schema is the list type's, unchanged."""

from __future__ import annotations

from typing import Annotated, Any

import torch
from pydantic import PlainSerializer, SerializationInfo, TypeAdapter, WithJsonSchema, WrapValidator


class Arr:
    """A tensor rounded to `digits` decimals for an answer. `tril`: the last two dimensions are
    (T, T) and row q ends at column q, as a causal model's attention rows do (the masked keys are
    exactly 0 and are left out)."""

    __slots__ = ("digits", "tensor", "tril")

    def __init__(self, tensor: torch.Tensor, digits: int, tril: bool = False) -> None:
        self.tensor, self.digits, self.tril = tensor.detach(), digits, tril

    def scaled(self) -> torch.Tensor:
        """round(x * 10^digits) as int64: the decimal digits the JSON shows (NaN and inf as 0)."""
        t = self.tensor.to(torch.float64, copy=True).mul_(10**self.digits).round_()
        t.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
        return t.to(torch.int64)

    def kept(self) -> torch.Tensor:
        """The numbers the answer carries: the tensor, or for a triangular array each matrix's lower
        triangle, row after row ((..., n(n+1)/2)): the cut-off half is never converted or sent."""
        if not self.tril:
            return self.tensor
        n = self.tensor.size(-1)
        rows, cols = torch.tril_indices(n, n)
        return self.tensor[..., rows, cols]

    def tolist(self) -> list:
        """Nested lists of floats: the JSON form (float64 rounded, so 0.6031 prints as 0.6031; + 0.0
        turns a -0.0 into 0.0, as the integer the binary form sends has no sign)."""
        t = torch.nan_to_num(self.kept().double(), nan=0.0, posinf=0.0, neginf=0.0)
        out = (torch.round(t, decimals=self.digits) + 0.0).tolist()
        return _cut(out, self.tensor.dim() - 1, self.tensor.size(-1)) if self.tril else out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Arr):
            other = other.tolist()
        return self.tolist() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Arr({tuple(self.tensor.shape)}, digits={self.digits}, tril={self.tril})"


def _cut(flat: list, depth: int, n: int) -> list:
    """Each innermost list (an n x n matrix's lower triangle, row by row) cut into its n rows: row q
    ends at column q."""
    if depth == 1:
        return [flat[q * (q + 1) // 2 : (q + 1) * (q + 2) // 2] for q in range(n)]
    return [_cut(x, depth - 1, n) for x in flat]


def _keep(value: Any, handler):
    return value if isinstance(value, Arr) else handler(value)


def _dump(value: Any, info: SerializationInfo) -> Any:
    """JSON (and model_dump): lists. The binary encoder asks for the Arr itself (context wire)."""
    if isinstance(value, Arr):
        return value if (info.context or {}).get("wire") else value.tolist()
    return value


def array(tp: Any) -> Any:
    """The annotated field type: `tp`'s validation and JSON schema, an Arr accepted as it is."""
    return Annotated[
        tp,
        WrapValidator(_keep),
        PlainSerializer(_dump, return_type=Any),
        WithJsonSchema(TypeAdapter(tp).json_schema()),
    ]


Vector = array(list[float])
Matrix = array(list[list[float]])
Matrices = array(list[list[list[float]]])  # [head][query][key] or [layer][key] ...
Tensor4 = array(list[list[list[list[float]]]])  # [layer][head][query][key]
