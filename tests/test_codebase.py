"""The house rules a reader relies on, checked: short functions, one drawing toolkit and one API
module in static/js, and a small checkpoint.json. (README and docs/ are checked by test_docs.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80


def python_files():
    for folder in ("model", "server"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_function_in_model_or_server_is_longer_than_80_lines():
    long = []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long


def js_files():
    return {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "static" / "js").glob("*.js"))}


def test_static_js_has_one_drawing_toolkit_and_one_api_module():
    for name, src in js_files().items():
        if name != "viz.js":
            assert not re.search(r"Plotly\.(react|newPlot)\b", src), f"{name} draws with Plotly directly"
            assert not re.search(r"\b(const|let|var|function)\s+\$\s*(=|\()", src), f"{name} defines its own $"
        if name != "api.js":
            assert "AbortController" not in src, f"{name} re-implements wait-then-cancel"
            assert not re.search(r"fetch\(\s*[\"'`]/openapi\.json", src), f"{name} fetches the schema itself"
            assert not re.search(r"function\s+formatDetail\b", src), f"{name} copies formatDetail"


def test_builtin_checkpoint_json_is_small_and_its_history_file_drives_the_curves():
    from gptscope.model import checkpoint as ckpt

    folder = ROOT / "model" / "builtin"
    assert (folder / ckpt.META_NAME).stat().st_size <= 100_000
    meta = ckpt.read_meta(folder)
    history = ckpt.read_history(folder, meta)
    assert len(history) == meta["step"] and {"step", "loss", "lr", "grad_norm"} <= set(history[0])
