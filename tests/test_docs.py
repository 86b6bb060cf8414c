"""README.md and docs/ checked where they can go wrong: links and anchors that lead nowhere,
commands and options that do not exist, a Quick start that CI does not run, a front door that grew
back into a manual, a missing screenshot, and a hook table that no longer matches the model."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from functools import cache
from pathlib import Path

import pytest

from gptscope.server import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SCREENSHOT = DOCS / "img" / "forward-page.png"
MAX_README_LINES = 200

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
COMMAND = re.compile(r"(?<![\w./-])gptscope ([a-z][a-z-]*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
# where one command ends on its line: a comment, a pipe into another program, &&, ;, a redirect
COMMAND_END = re.compile(r"\s#|\s\|(?!\s*-)|&&|;|\s[<>]")


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def without_code(text: str) -> str:
    """The prose of a Markdown file: fenced blocks and inline code spans blanked out (a link
    written inside code is not a link), line numbers kept."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return INLINE_CODE.sub("code", text)


def code_of(text: str) -> list[str]:
    """Every line of code in a Markdown file: fenced blocks (continued lines joined) and inline
    code spans."""
    lines = []
    for block in FENCE.findall(text):
        # a shell line continued with a backslash, or a usage line continued by indented [--options]
        lines += re.sub(r"\\\n|\n\s+(?=\[--)", " ", block).splitlines()[1:-1]
    lines += [span.strip("`") for span in INLINE_CODE.findall(FENCE.sub("", text))]
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces
    to hyphens."""
    text = re.sub(r"[`*]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, title in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in LINK.findall(without_code(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}: ({target})"
        if not dest.exists():
            broken.append(f"{where} no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{where} no heading #{anchor} in {dest.relative_to(root)}")
    return broken


def test_slug_matches_githubs_anchors():
    assert slug("Training speed on every CPU (`benchmarks/train_throughput.py`)") == (
        "training-speed-on-every-cpu-benchmarkstrain_throughputpy"
    )
    assert slug("What the built-in model's heads do") == "what-the-built-in-models-heads-do"
    assert slug("Fine-tuning: GPT-1's second stage") == "fine-tuning-gpt-1s-second-stage"


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Has a part\n", encoding="utf-8")
    page.write_text(
        "# Page\n\n[ok](other.md#has-a-part) [here](#page) [gone](missing.md) [no part](other.md#nope)\n"
        "`[in code](missing.md)`\n\n```\n[in a block](missing.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, tmp_path) == [
        "page.md: (missing.md) no such file",
        "page.md: (other.md#nope) no heading #nope in other.md",
    ]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path):
    assert not broken_links(path)


def test_every_page_in_docs_is_linked_from_the_readme():
    readme = without_code(README.read_text(encoding="utf-8"))
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(readme) if not t.startswith("#")}
    missing = [str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if p.resolve() not in linked]
    assert not missing, f"README links to no {missing}: a page only reachable by guessing"


@cache
def help_of(subcommand: str) -> str | None:
    """`gptscope SUBCOMMAND --help` as the CLI prints it, or None if there is no such subcommand."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        cli.main([subcommand, "--help"])
    return out.getvalue() if exit_.value.code == 0 else None


def commands_named() -> list[tuple[str, str, list[str]]]:
    """(file, subcommand, options) for every `gptscope SUBCOMMAND ...` in the code of README and docs/."""
    found = []
    for path in markdown_files():
        for line in code_of(path.read_text(encoding="utf-8")):
            for m in COMMAND.finditer(line):
                rest = COMMAND_END.split(line[m.end() :], maxsplit=1)[0]
                found.append((str(path.relative_to(ROOT)), m.group(1), OPTION.findall(rest)))
    return found


def test_the_cli_check_tells_a_subcommand_from_a_typo():
    assert "--time-budget" in help_of("train")
    assert help_of("serv") is None


def test_every_gptscope_command_in_the_docs_exists_with_its_options():
    found = commands_named()
    assert {"serve", "train", "eval", "corpus", "generate", "import", "finetune"} <= {sub for _, sub, _ in found}
    wrong = []
    for where, sub, options in found:
        text = help_of(sub)
        if text is None:
            wrong.append(f"{where}: gptscope {sub}: no such subcommand")
            continue
        wrong += [
            f"{where}: gptscope {sub} has no option {opt}"
            for opt in options
            if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text)
        ]
    assert not wrong, wrong


def quick_start_commands() -> list[str]:
    section = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = FENCE.search(section).group(0)
    return [line.split("  #", 1)[0].strip() for line in block.splitlines()[1:-1] if line.strip()]


def test_quick_start_is_install_and_serve_then_install_and_test_and_ci_runs_the_second():
    serve, test = quick_start_commands()
    assert serve == "pip install -e . && gptscope serve"
    assert test == "pip install -e '.[test]' && python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test in [line.strip() for line in ci], ".ci/run does not run the README's test command"


def test_readme_is_a_short_front_door():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; the manual belongs in docs/"


def test_the_screenshot_the_readme_shows_is_a_png_of_the_page():
    assert f"]({SCREENSHOT.relative_to(ROOT)})" in README.read_text(encoding="utf-8")
    data = SCREENSHOT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 1000 and height >= 600, (width, height)


@pytest.fixture(scope="module")
def hooks_script():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hook_table(hooks_script) -> str:
    return hooks_script.table()


def test_the_hook_table_is_what_the_model_has(hooks_script, hook_table):
    text = hooks_script.DOC.read_text(encoding="utf-8")
    fresh = f"{hooks_script.BEGIN}\n{hook_table}\n{hooks_script.END}"
    assert fresh in text, "docs/architecture.md's hook table is out of date: run  python docs/hooks.py"
    assert text.count(hooks_script.BEGIN) == 1, "one hook table only"


def test_the_hook_table_names_every_kind_of_hook(hook_table):
    for name in (
        "blocks.{i}.attn.hook_k` | (B, T, n_kv, hs) llama",
        "blocks.{i}.attn.hook_q_rot",
        "blocks.{i}.mlp.hook_gate",
        "blocks.{i}.mlp.hook_router_probs` | (B, T, E)",
        "blocks.{i}.mlp.experts.{e}.hook_post",
        "blocks.{i}.ln1_post.hook_scale",
        "blocks.{i}.attn.hook_pattern` | (B, nh, T, Tk)",
    ):
        assert name in hook_table, name


def test_the_api_page_names_every_part_of_the_forward_trace():
    from gptscope.server.explain.parts import PARTS

    api = (DOCS / "api.md").read_text(encoding="utf-8")
    missing = [part.name for part in PARTS if f"`{part.name}`" not in api]
    assert not missing, f"docs/api.md does not name the forward parts {missing}"
