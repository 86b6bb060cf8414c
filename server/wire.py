"""The binary form of the heavy answers, by content negotiation: a request whose Accept header
names `application/vnd.gptscope+msgpack` gets the same answer as MessagePack instead of JSON.

Why MessagePack: it is a documented format with decoders in every language, and it keeps the
JSON's tree (maps, lists, strings, numbers, null), so the JSON schema describes both forms. The
numeric arrays, which are nearly all of the bytes, travel as one MessagePack extension value each
(type 1, below) instead of a list of numbers.

Extension type 1, a numeric array, is

    byte 0      layout: 0 dense; 1 lower-triangular rows (the last two dimensions are (T, T) and
                row q holds columns 0..q only: a causal model's attention)
    byte 1      digits d: the array holds the JSON's decimals, value = n / 10^d
    byte 2      ndim
    byte 3      sign: 0 the integers are zigzag-encoded (0, -1, 1, -2 -> 0, 1, 2, 3); 1 none is
                negative and they are written as they are (attention weights, probabilities)
    4 x ndim    the shape, uint32 little-endian
    the rest    the integers n in row-major order (the triangular layout skips the cut-off
                entries), each an unsigned LEB128 varint (7 bits a byte, the high bit set on
                all but the last)

so an attention weight (4 decimals, most of them under 0.0128) takes one byte, where float16 takes
two and the JSON about seven, and every number decodes to exactly the JSON's: n / 10^d is the same
correctly rounded double either way. `decode` below is the whole of a Python reader; the page's is
static/js/lib/msgpack.js.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgpack
import numpy as np
from fastapi import Depends, Request, Response
from pydantic import BaseModel
from starlette.datastructures import Headers
from starlette.middleware.gzip import GZipMiddleware

from .schemas.arrays import Arr

MSGPACK = "application/vnd.gptscope+msgpack"
_ALSO = ("application/msgpack", "application/x-msgpack")  # the other names clients use for it
EXT_ARRAY = 1


def accepts_msgpack(accept: str) -> bool:
    """Whether an Accept header asks for MessagePack (a q=0 refuses it)."""
    for item in accept.split(","):
        kind, *params = (p.strip() for p in item.split(";"))
        if kind.lower() in (MSGPACK, *_ALSO) and not any(p.replace(" ", "") in ("q=0", "q=0.0") for p in params):
            return True
    return False


def wants_msgpack(request: Request, response: Response) -> bool:
    """The dependency: MessagePack when the Accept header asks for it, JSON by default; either
    answer says it varies with Accept (for caches)."""
    response.headers["Vary"] = "Accept"
    return accepts_msgpack(request.headers.get("accept", ""))


Binary = Annotated[bool, Depends(wants_msgpack)]


class ServerTiming:
    """ASGI middleware: every answer says how long the server took, from the request's arrival to
    the answer's first byte (compression included), as `Server-Timing: app;dur=<ms>`. The
    benchmarks read it, and so can a browser's network panel."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed(message) -> None:
            if message["type"] == "http.response.start":
                ms = (time.perf_counter() - start) * 1000
                message["headers"] = [*message.get("headers", []), (b"server-timing", f"app;dur={ms:.2f}".encode())]
            await send(message)

        await self.app(scope, receive, timed)


class Compress:
    """ASGI middleware: gzip for JSON and the pages (a 128-token JSON trace is megabytes of decimals
    and shrinks about 4x), none for a request that asks for the binary form. Its varints are
    already compact: gzip takes a fifth off them and costs about 90 ms per 1.6 MB on one core,
    more than the bytes saved take to send.

    Level 4: GPT-2 small's 128-token JSON trace (8.2 MB) takes 83 ms to 1.90 MB, where level 5
    took 166 ms to 1.84 MB (and level 1, 50 ms to 2.15 MB)."""

    def __init__(self, app, minimum_size: int = 4096, compresslevel: int = 4) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=minimum_size, compresslevel=compresslevel)

    async def __call__(self, scope, receive, send) -> None:
        binary = scope["type"] == "http" and accepts_msgpack(Headers(scope=scope).get("accept", ""))
        await (self.app if binary else self.gzip)(scope, receive, send)


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------


def varints(n: np.ndarray, zigzag: bool) -> bytes:
    """int64s as LEB128 varints, zigzag-encoded first if asked. Vectorised: a (count, width) table
    of every number's 7-bit groups, in the narrowest dtype that holds them, then the groups each
    number needs, in order (width = the groups of the largest)."""
    n = n.astype(np.int64, copy=False)
    z = ((n << 1) ^ (n >> 63)).view(np.uint64) if zigzag else n.view(np.uint64)  # zigzag: small |n| -> small z
    if z.size == 0:
        return b""
    top = int(z.max())
    if top < 0x80:
        return z.astype(np.uint8).tobytes()  # every number one byte, the high bit clear
    width = (top.bit_length() + 6) // 7
    rest = z.astype(np.uint16 if top < 1 << 16 else np.uint32 if top < 1 << 32 else np.uint64)
    groups = np.empty((z.size, width), np.uint8)
    keep = np.empty((z.size, width), bool)
    keep[:, 0] = True
    for k in range(width):
        higher = rest >> 7
        more = higher != 0
        groups[:, k] = (rest & 0x7F).astype(np.uint8) | (more.view(np.uint8) << 7)
        if k + 1 < width:
            keep[:, k + 1] = more
        rest = higher
    return np.compress(keep.reshape(-1), groups.reshape(-1)).tobytes()  # (np.compress: twice a mask index's speed)


def array_payload(a: Arr) -> bytes:
    shape = list(a.tensor.shape)
    flat = Arr(a.kept(), a.digits).scaled().reshape(-1).numpy()  # a triangle first: half the numbers to scale
    unsigned = flat.size == 0 or int(flat.min()) >= 0
    head = bytes([1 if a.tril else 0, a.digits, len(shape), int(unsigned)]) + np.asarray(shape, "<u4").tobytes()
    return head + varints(flat, zigzag=not unsigned)


def _default(obj: Any) -> Any:
    if isinstance(obj, Arr):
        return msgpack.ExtType(EXT_ARRAY, array_payload(obj))
    raise TypeError(f"cannot send {type(obj).__name__} as MessagePack")


def packb(model: BaseModel) -> bytes:
    """The answer as MessagePack: model_dump's tree with each Arr as extension type 1."""
    tree = model.model_dump(mode="python", context={"wire": True})
    return msgpack.packb(tree, default=_default, use_bin_type=True)


def answer(model: BaseModel, binary: bool) -> Any:
    """What an endpoint returns: the model (FastAPI sends its JSON) or its MessagePack form."""
    if not binary:
        return model
    return Response(packb(model), media_type=MSGPACK, headers={"Vary": "Accept"})


def responses(model: type[BaseModel]) -> dict:
    """OpenAPI: the 200 answer's second media type (contract.py gives it the JSON's schema)."""
    return {
        200: {
            "model": model,
            "content": {MSGPACK: {}},
            "description": "JSON by default. With `Accept: application/vnd.gptscope+msgpack`, the same answer as "
            "MessagePack, each numeric array one extension value of type 1 (docs/api.md#binary-answers): the same "
            "numbers in about a fifth of the bytes.",
        }
    }


# --------------------------------------------------------------------------------------------
# Decoding (for tools and the tests; the page's decoder is static/js/lib/msgpack.js)
# --------------------------------------------------------------------------------------------


def decode_varints(buf: bytes, count: int, zigzag: bool) -> np.ndarray:
    """`count` LEB128 varints -> int64 (undoing the zigzag when `zigzag`)."""
    b = np.frombuffer(buf, np.uint8)
    ends = np.flatnonzero(b < 0x80)[:count]
    starts = np.concatenate([[0], ends[:-1] + 1]) if count else ends
    z = np.zeros(len(ends), np.uint64)
    for k in range(int((ends - starts).max(initial=-1)) + 1):
        at = starts + k
        ok = at <= ends
        z[ok] |= (b[at[ok]] & np.uint64(0x7F)).astype(np.uint64) << np.uint64(7 * k)
    if not zigzag:
        return z.astype(np.int64)
    return (z >> np.uint64(1)).astype(np.int64) ^ -(z & np.uint64(1)).astype(np.int64)


def decode_array(data: bytes) -> np.ndarray:
    """Extension type 1 -> a float64 numpy array (a triangular one with zeros past the diagonal)."""
    tril, digits, ndim, unsigned = data[0], data[1], data[2], data[3]
    shape = tuple(int(s) for s in np.frombuffer(data, "<u4", ndim, 4))
    t = shape[-1] if ndim else 1
    count = int(np.prod(shape[:-2], dtype=np.int64)) * t * (t + 1) // 2 if tril else int(np.prod(shape))
    values = decode_varints(data[4 + 4 * ndim :], count, zigzag=not unsigned) / 10**digits
    if not tril:
        return values.reshape(shape)
    out = np.zeros(shape)
    rows, cols = np.tril_indices(t)
    out[..., rows, cols] = values.reshape(*shape[:-2], len(rows))
    return out


def decode(body: bytes) -> Any:
    """A MessagePack answer -> Python: maps, lists, numbers, strings, and numpy arrays."""

    def ext(code: int, data: bytes) -> Any:
        return decode_array(data) if code == EXT_ARRAY else msgpack.ExtType(code, data)

    return msgpack.unpackb(body, ext_hook=ext, raw=False, strict_map_key=False)
