"""The pages' MessagePack decoder (static/js/lib/msgpack.js) in Chromium: each heavy endpoint's
binary answer decodes to a tree deep-equal to JSON.parse of its JSON answer (every number the
same double), and the forward page fetches the binary form."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

COMPARE_IN_PAGE = """async ([path, init]) => {
  const { decode } = await import("/static/js/lib/msgpack.js");
  const ask = (accept) => fetch(path, { ...init, headers: { ...(init.headers || {}), Accept: accept } });
  const rj = await ask("application/json");
  const rb = await ask("application/vnd.gptscope+msgpack");
  const j = await rj.json();
  const bytes = await rb.arrayBuffer();
  const b = decode(bytes);
  let diffs = 0, numbers = 0, first = null;
  const walk = (x, y, where) => {
    if (Array.isArray(x)) {
      if (!Array.isArray(y) || x.length !== y.length) { diffs++; first ??= where; return; }
      x.forEach((v, i) => walk(v, y[i], `${where}[${i}]`));
    } else if (x !== null && typeof x === "object") {
      const kx = Object.keys(x).sort().join(), ky = y && typeof y === "object" ? Object.keys(y).sort().join() : "";
      if (kx !== ky) { diffs++; first ??= where; return; }
      for (const k of Object.keys(x)) walk(x[k], y[k], `${where}.${k}`);
    } else {
      if (typeof x === "number") numbers++;
      if (!Object.is(x, y)) { diffs++; first ??= `${where}: ${x} vs ${y}`; }
    }
  };
  walk(j, b, "");
  return { diffs, numbers, first, type: rb.headers.get("content-type"), binary: bytes.byteLength,
           json: (await (await ask("application/json")).text()).length };
}"""

POST = {"method": "POST", "headers": {"Content-Type": "application/json"}}


@pytest.mark.parametrize(
    "path, init",
    [
        (
            "/api/v1/forward",
            {
                **POST,
                "body": '{"text": "ROMEO:\\nBut soft, what light through yonder window", "include": ["embeddings",'
                ' "attention", "layernorm", "head_detail", "mlp", "residual", "logit_lens", "next_token",'
                ' "prompt_loss", "decomposition"]}',
            },
        ),
        ("/api/v1/heads?text=To%20be%2C%20or%20not%20to%20be&ablate=false", {}),
        ("/api/v1/compare", {**POST, "body": '{"a": "builtin", "b": "builtin", "text": "To be, or not to be"}'}),
    ],
)
def test_the_pages_decoder_gives_the_jsons_tree(page, live_url, path, init):
    page.goto(f"{live_url}/tokenizer")
    got = page.evaluate(COMPARE_IN_PAGE, [path, init])
    assert got["type"] == "application/vnd.gptscope+msgpack"
    assert got["diffs"] == 0, got["first"]
    assert got["numbers"] > 200 and got["binary"] < got["json"]
    assert page.console_errors == []


def test_the_forward_page_fetches_the_binary_form(page, live_url):
    seen = []
    page.on(
        "response",
        lambda r: seen.append((r.url, r.headers.get("content-type", ""))) if "/api/v1/forward" in r.url else None,
    )
    page.goto(f"{live_url}/?text=ROMEO%3A%20But%20soft")
    page.wait_for_selector('body[data-ready="1"]', state="attached")
    traces = [t for u, t in seen if u.endswith("/api/v1/forward")]
    assert traces and all(t == "application/vnd.gptscope+msgpack" for t in traces), seen
    assert page.console_errors == []
