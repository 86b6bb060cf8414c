"""The house rules a reader relies on, checked: short functions, static/js as lib/ plus one folder
per page with one drawing toolkit and one API module, and a small checkpoint.json. (README and docs/
are checked by test_docs.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gptscope.server.pages import PAGE_NAMES

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


JS = ROOT / "static" / "js"
PAGES = PAGE_NAMES  # server/pages.py: one JS folder per declared page


def js_files():
    """static/js's modules by their path there: lib/x.js, forward/main.js, ..."""
    return {p.relative_to(JS).as_posix(): p.read_text(encoding="utf-8") for p in sorted(JS.rglob("*.js"))}


def test_static_js_is_lib_plus_one_folder_per_page_each_started_by_init():
    assert not list(JS.glob("*.js")), "a module outside lib/ and the page folders"
    assert sorted(p.name for p in JS.iterdir() if p.is_dir()) == sorted(["lib", *PAGES])
    for page in PAGES:
        assert re.search(
            r"^export (async )?function init\(\)", (JS / page / "main.js").read_text(encoding="utf-8"), re.M
        ), page
    templates = sorted((ROOT / "templates").glob("*.html"))
    for t in templates:  # the page's only script: base.html's, which imports the entry and calls init()
        assert '<script type="module"' not in t.read_text("utf-8") or t.name == "base.html", t.name
    base = (ROOT / "templates" / "base.html").read_text("utf-8")
    assert base.count('<script type="module">import { init } from "{{ entry }}"; init();</script>') == 1


def test_static_js_has_one_drawing_toolkit_and_one_api_module():
    for name, src in js_files().items():
        if name != "lib/plot.js":
            assert not re.search(r"Plotly\.(react|newPlot)\b", src), f"{name} draws with Plotly directly"
        if name != "lib/dom.js":
            assert not re.search(r"\b(const|let|var|function)\s+\$\s*(=|\()", src), f"{name} defines its own $"
        if name != "lib/api.js":
            assert "AbortController" not in src, f"{name} re-implements wait-then-cancel"
            assert not re.search(r"fetch\(\s*[\"'`]/openapi\.json", src), f"{name} fetches the schema itself"
            assert not re.search(r"function\s+formatDetail\b", src), f"{name} copies formatDetail"


TOP_LEVEL = re.compile(r"^(export\s+)?(?:async\s+)?(?:function\*?|const|let|class)\s+([\w$]+)", re.M)


def test_no_js_name_has_two_meanings():
    """No two modules export one name (a page entry's `init` and a forward panel's `panel` aside: the
    shape every module of that kind exports), a name lib/ exports is not
    defined again elsewhere (a page's own `int` or `fmt`), and lib/'s top-level names are unique in
    lib/: one `renderTokens`, one `hexRgb`, one Viridis table."""
    exported, defined = {}, {}
    for name, src in js_files().items():
        for export, n in TOP_LEVEL.findall(src):
            defined.setdefault(n, []).append(name)
            if export and n not in ("init", "panel"):
                exported.setdefault(n, []).append(name)
    assert not {n: where for n, where in exported.items() if len(where) > 1}
    from_lib = {n for n, where in exported.items() if where[0].startswith("lib/")}
    assert not {n: defined[n] for n in from_lib if len(defined[n]) > 1}
    in_lib = {n: [w for w in where if w.startswith("lib/")] for n, where in defined.items()}
    assert not {n: where for n, where in in_lib.items() if len(where) > 1}


# A JS function starts on a line that ends with "{" and declares one (`function`, an arrow `=>`, or
# a method `name(...) {`); it ends at the first later line that starts with "}" at its indentation
# (static/js is written that way: biome's lint keeps it parseable, this keeps it short).
JS_OPENS = re.compile(r"\{\s*(//.*)?$")
JS_METHOD = re.compile(
    r"^\s*(async\s+|static\s+|get\s+|set\s+)?(?!if\b|for\b|while\b|switch\b|catch\b|else\b|return\b)[\w$]+\s*\(.*\)\s*\{"
)


def js_functions(src):
    """(first line, length in lines, header) of each function in a module's source."""
    lines = src.split("\n")
    for i, line in enumerate(lines):
        code = "" if line.lstrip().startswith("//") else line
        if not JS_OPENS.search(line) or not (re.search(r"\bfunction\b|=>", code) or JS_METHOD.match(code)):
            continue
        indent = " " * (len(line) - len(line.lstrip()))
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(indent + "}")), len(lines))
        yield i + 1, end - i + 1, line.strip()


def test_js_function_lengths_are_measured():
    src = "export function f(a = {}) {\n  g(() => {\n    h();\n  });\n}\nclass C {\n  m(x) {\n    return x;\n  }\n}\n"
    assert [(n, length) for n, length, _ in js_functions(src)] == [(1, 5), (2, 3), (7, 3)]


def test_no_js_function_is_longer_than_80_lines():
    long = [
        f"static/js/{name}:{n} {head} ({length} lines)"
        for name, src in js_files().items()
        for n, length, head in js_functions(src)
        if length > MAX_FUNCTION_LINES
    ]
    assert not long, long


def test_builtin_checkpoint_json_is_small_and_its_history_file_drives_the_curves():
    from gptscope.model import checkpoint as ckpt

    folder = ROOT / "model" / "builtin"
    assert (folder / ckpt.META_NAME).stat().st_size <= 100_000
    meta = ckpt.read_meta(folder)
    history = ckpt.read_history(folder, meta)
    assert len(history) == meta.step and {"step", "loss", "lr", "grad_norm"} <= set(history[0])


def test_no_stylesheet_uses_has():
    """A :has() on a page's ancestors makes the browser re-check them on every style change below:
    on the forward page at GPT-2 small's size each plot's drawing spent four times its own work in
    style updates. State that CSS reads is a class the code sets (lib/api.js showError: body.refused)."""
    for css in sorted((ROOT / "static" / "css").glob("*.css")):
        rules = re.sub(r"/\*.*?\*/", "", css.read_text(encoding="utf-8"), flags=re.S)
        assert ":has(" not in rules, f"{css.name} uses :has()"


def imported_modules(path: Path) -> set[str]:
    """The gptscope modules a file imports, as dotted paths from the package root (server.explain.parts)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                head = ".".join((*base, node.module)) if node.module else ".".join(base)
            else:
                head = (node.module or "").removeprefix("gptscope.")
            found.add(head)
            found.update(f"{head}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("gptscope.") for a in node.names)
    return found


# docs/architecture.md: data flows model -> server/explain -> server/schemas -> the routers; no arrow back
LAYERS = {
    "model": ("server",),
    "server/schemas": ("server.explain", "server.routers"),
    "server/explain": ("server.routers",),
}


# server/*.py: the frame (settings, errors, the service, the memory budget, jobs, the wire) sits under
# explain/ and the routers; only the app and the command line assemble the routers, and only these modules
# glue an area's analysis (explain/) to the frame: the Analysis job forms and the job kinds' registry.
SERVER_GLUE = {
    "app",
    "cli",
    "job_kinds",
    "attribution_jobs",
    "circuit_jobs",
    "patch_jobs",
    "steering_jobs",
    "timeline_jobs",
    "token_attribution_jobs",
}


def layer_rules() -> list[tuple[Path, tuple[str, ...]]]:
    """(a module, the packages it may not import) for every module the layering covers."""
    rules = [
        (path, forbidden) for folder, forbidden in LAYERS.items() for path in sorted((ROOT / folder).rglob("*.py"))
    ]
    for path in sorted((ROOT / "server").glob("*.py")):
        if path.stem not in SERVER_GLUE:
            rules.append((path, ("server.explain", "server.routers", "server.app", "server.cli", "server.job_kinds")))
        elif path.stem not in ("app", "cli"):
            rules.append((path, ("server.routers", "server.app", "server.cli")))
    return rules


def test_no_module_imports_against_the_documented_layering():
    against = []
    for path, forbidden in layer_rules():
        for name in imported_modules(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                against.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not against, against
    covered = {path for path, _ in layer_rules()}
    assert covered >= set((ROOT / "server").glob("*.py")) - {ROOT / "server" / "app.py", ROOT / "server" / "cli.py"}


def test_gpt_py_is_under_500_lines_and_one_component_per_module():
    """model/gpt.py reads top to bottom (the block, the model, its forward); each component has a module of
    its own (issue #60), and each class is defined once, in its module, whatever gpt.py re-exports."""
    model = ROOT / "model"
    assert len((model / "gpt.py").read_text(encoding="utf-8").splitlines()) < 500
    homes = {
        "config": {"GPTConfig"},
        "hooks": {"HookPoint"},
        "layers": {"Linear", "LayerNorm", "RMSNorm", "NoNorm"},
        "positions": set(),
        "attention": {"CausalSelfAttention"},
        "mlp": {"MLP", "MoE"},
        "kv_cache": {"KVCache", "LayerKV"},
        "generate": set(),
        "gpt": {"Smear", "Block", "GPT"},
    }
    defined: dict[str, list[str]] = {}
    for path in sorted(model.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(path.relative_to(model).with_suffix("").as_posix())
    for module, classes in homes.items():
        assert (model / f"{module}.py").is_file(), module
        for name in classes:
            assert defined.get(name) == [module], (name, defined.get(name))
