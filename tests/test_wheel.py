"""gptscope as one installable package: its layout and declared dependencies (fast), and the built
wheel in a fresh virtual environment outside the checkout (slow: builds, installs, serves).

The fresh environment reuses this one's third-party packages (torch is large) through a .pth file
that names this environment's site-packages; the wheel itself is installed with --no-deps before
that file exists, so pip installs it rather than finding this checkout's editable install. The
commands run from an empty folder with a clean environment (no PYTHONPATH), so neither the checkout
nor the editable install's finder is visible there: what runs is the installed wheel.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import site
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
import tomllib

import gptscope
from gptscope.server.pages import PAGES as DECLARED_PAGES

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
# every HTML page, as server/pages.py declares them
PAGES = [p.path for p in DECLARED_PAGES]


# ---- fast: the package's declaration ------------------------------------------------------------


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: list[str]) -> set[str]:
    return {normalize(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in requirements}


def absolute_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_packages_list_is_every_package_folder():
    """pyproject.toml lists the packages by hand (a package-dir mapping has no `find`): it must name
    every folder with an __init__.py under the mapped folders, and nothing else."""
    mapped = SETUPTOOLS["package-dir"]
    found = set()
    for name, folder in mapped.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *rel.parts]))
    assert set(SETUPTOOLS["packages"]) == found
    assert all(name == "gptscope" or name.startswith("gptscope.") for name in mapped)


@pytest.mark.slow  # parses every module of the package and reads every installed distribution's metadata
def test_every_third_party_import_is_a_declared_dependency():
    """Each module the package imports (model/, server/, gptscope/) comes from a distribution named in
    pyproject's dependencies (gptscope/notebook.py and export.py: or the notebook extra); the tests' ones from the
    dependencies or the test extra."""
    project = PYPROJECT["project"]
    base = requirement_names(project["dependencies"])
    extras = {k: requirement_names(v) for k, v in project["optional-dependencies"].items()}
    providers = importlib.metadata.packages_distributions()
    local = {p.stem for p in (ROOT / "tests").rglob("*.py")}
    package = [p for folder in ("model", "server", "gptscope") for p in sorted((ROOT / folder).rglob("*.py"))]
    notebook = {
        ROOT / "gptscope" / "notebook.py",
        ROOT / "gptscope" / "export.py",
    }  # export: playwright, imported lazily
    sources = [(p, (base | extras["notebook"]) if p in notebook else base) for p in package]
    sources += [(p, base | extras["test"]) for p in sorted((ROOT / "tests").rglob("*.py"))]
    undeclared = []
    for path, allowed in sources:
        for name in sorted(absolute_imports(path) - set(sys.stdlib_module_names) - local - {"gptscope"}):
            dists = {normalize(d) for d in providers.get(name, [])}
            if not dists & allowed:
                undeclared.append(f"{path.relative_to(ROOT)}: {name} (from {sorted(dists) or 'nothing installed'})")
    assert not undeclared, undeclared


def test_the_version_is_written_once():
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gptscope.__version__"}
    written = [
        str(p.relative_to(ROOT))
        for folder in ("model", "server", "gptscope")
        for p in (ROOT / folder).rglob("*.py")
        if re.search(r"^__version__\s*=", p.read_text(), re.M)
    ]
    assert written == ["gptscope/__init__.py"]


def test_python_dash_m_gptscope_is_the_command():
    p = subprocess.run([sys.executable, "-m", "gptscope", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "serve" in p.stdout and "generate" in p.stdout and p.stdout.startswith("usage: gptscope")


# ---- slow: the wheel, built from a clean copy and installed in a fresh environment ---------------


def clean_copy(dest: Path) -> Path:
    """The checkout's files as a commit would hold them (tracked and new, not ignored; no build/,
    *.egg-info or caches), so the wheel is built from what the repository holds."""
    try:
        listed = (
            subprocess.run(
                ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                cwd=ROOT,
                capture_output=True,
                check=True,
            )
            .stdout.decode()
            .split("\0")
        )
    except (OSError, subprocess.CalledProcessError) as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the wheel test from a git checkout, and this is none ({e})")
        pytest.skip(f"not a git checkout ({e})")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def build_wheel(src: Path, out: Path) -> Path:
    # No build isolation: this environment's setuptools (the test extra) builds it, offline.
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def fresh_venv(folder: Path, wheel: Path) -> Path:
    """A virtual environment holding only the wheel, then seeing this environment's packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    python = folder / "bin" / "python"
    p = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    theirs = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    installed = sorted(p.name for p in theirs.iterdir())
    assert installed == ["gptscope", f"gptscope-{gptscope.__version__}.dist-info"], installed
    ours = dict.fromkeys(
        [
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"],
            *site.getsitepackages(),
            *([site.getusersitepackages()] if site.ENABLE_USER_SITE else []),
        ]
    )
    (theirs / "zz-reuse-test-environment.pth").write_text("".join(f"{p}\n" for p in ours))
    return folder


def clean_env(venv: Path, home: Path) -> dict[str, str]:
    return {
        "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "GPTSCOPE_DATA_DIR": str(home / "data"),
        "PYTHONNOUSERSITE": "1",
        "OMP_NUM_THREADS": "1",
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, venv, env, cwd): the wheel built from a clean copy, installed in a fresh venv; the
    commands run in `cwd`, an empty folder, with `env`."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(clean_copy(tmp / "src"), tmp / "dist")
    venv = fresh_venv(tmp / "venv", wheel)
    (tmp / "home").mkdir()
    (tmp / "empty").mkdir()
    return wheel, venv, clean_env(venv, tmp / "home"), tmp / "empty"


def run(installed, *cmd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    _, venv, env, cwd = installed
    exe = str(venv / "bin" / cmd[0]) if cmd[0] in ("python", "gptscope") else cmd[0]
    return subprocess.run([exe, *cmd[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def expected_files() -> set[str]:
    """Where each file the repository holds for the package lands in the wheel."""
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    out = set()
    for name, folder in SETUPTOOLS["package-dir"].items():
        prefix = name.replace(".", "/")
        out |= {
            prefix + rel.removeprefix(folder)
            for rel in tracked
            if rel.startswith(folder + "/") and (ROOT / rel).is_file()
        }
    return out


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package_with_its_data(installed):
    wheel = installed[0]
    assert wheel.name == f"gptscope-{gptscope.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert top == {"gptscope", f"gptscope-{gptscope.__version__}.dist-info"}, top
    missing = expected_files() - set(names)
    assert not missing, f"the wheel lacks {sorted(missing)}"
    assert any(n.startswith("gptscope/model/builtin/weights-") for n in names)
    dist = f"gptscope-{gptscope.__version__}.dist-info"
    entry = zipfile.ZipFile(wheel).read(f"{dist}/entry_points.txt").decode()
    assert "gptscope = gptscope.server.cli:main" in entry
    meta = zipfile.ZipFile(wheel).read(f"{dist}/METADATA").decode()
    assert {"notebook", "test"} <= set(re.findall(r"^Provides-Extra: (\S+)$", meta, re.M))
    assert "Requires-Dist: regex" in meta


@pytest.mark.slow
def test_installed_wheel_sees_neither_the_checkout_nor_old_top_level_names(installed):
    for name in ("model", "server"):
        p = run(installed, "python", "-c", f"import {name}")
        assert p.returncode != 0 and "ModuleNotFoundError" in p.stderr, (name, p.stderr)
    p = run(
        installed,
        "python",
        "-c",
        "import gptscope, gptscope.server.config as c, json; "
        "print(json.dumps([gptscope.__file__, str(c.BUILTIN_CHECKPOINT), "
        "str(c.STATIC_DIR), str(c.TEMPLATES_DIR)]))",
    )
    assert p.returncode == 0, p.stderr
    venv = installed[1].resolve()
    for path in json.loads(p.stdout):
        assert venv in Path(path).resolve().parents, path


@pytest.mark.slow
def test_installed_extras_are_satisfied(installed):
    """`pip install 'gptscope[notebook,test]'` from the installed wheel: the extras are declared and
    every requirement they name is already here (--no-index: nothing is downloaded)."""
    _, venv, env, cwd = installed
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-index",
            "gptscope[notebook,test]",
        ],
        cwd=cwd,
        env={**env, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Requirement already satisfied: gptscope[notebook,test]" in p.stdout
    p = run(installed, "python", "-c", "import gptscope.notebook, IPython, nbclient")
    assert p.returncode == 0, p.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.status, r.headers.get("content-type", ""), r.read()


def wait_up(proc: subprocess.Popen, url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"gptscope serve exited ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        try:
            get(url + "/api/v1/health")
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("gptscope serve did not answer /api/v1/health in time")


@pytest.mark.slow
def test_installed_wheel_serves_every_page_from_an_empty_folder(installed):
    _, venv, env, cwd = installed
    port = free_port()
    proc = subprocess.Popen(
        [str(venv / "bin" / "gptscope"), "serve", "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(proc, url)
        health = json.loads(get(url + "/api/v1/health")[2])
        builtin = json.loads((ROOT / "model" / "builtin" / "checkpoint.json").read_text(encoding="utf-8"))
        assert (health["model"], health["version"]) == (builtin["name"], gptscope.__version__), health
        checkpoints = json.loads(get(url + "/api/v1/checkpoints")[2])
        assert [c["name"] for c in checkpoints if c["loaded"]] == ["builtin"], checkpoints
        assert len(PAGES) == 11, PAGES
        linked = set()
        for page in [*PAGES, "/docs"]:
            status, ctype, body = get(url + page)
            assert status == 200 and ctype.startswith("text/html"), page
            linked |= set(re.findall(r'(?:src|href)="(/(?:static|vendor)/[^"?#]+)', body.decode()))
        assert {
            "/vendor/plotly.min.js",
            "/static/css/gptscope.css",
            "/vendor/swagger-ui/swagger-ui-bundle.js",
            "/vendor/swagger-ui/swagger-ui.css",
        } <= linked, linked
        ours = {
            "/static/" + str(p.relative_to(ROOT / "static"))
            for p in (ROOT / "static").rglob("*.*")
            if p.suffix in (".js", ".css")
        }  # every module a page imports, not only those it links
        for asset in sorted(linked | ours | {"/openapi.json", "/vendor/swagger-ui/favicon-32x32.png"}):
            status, _, body = get(url + asset)
            assert status == 200 and body, asset
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "ERROR" not in err, err[-3000:]


@pytest.mark.slow
def test_installed_wheel_generates_and_evaluates(installed):
    _, _, env, _ = installed
    p = run(installed, "gptscope", "generate", "--prompt", "ROMEO:", "--max-new-tokens", "8")
    assert p.returncode == 0 and p.stdout.startswith("ROMEO:"), p.stderr[-3000:]
    text = Path(env["HOME"]) / "text.txt"
    text.write_text("ROMEO:\nBut soft, what light through yonder window breaks?\n", encoding="utf-8")
    builtin = run(
        installed, "python", "-c", "from gptscope.server.config import BUILTIN_CHECKPOINT; print(BUILTIN_CHECKPOINT)"
    ).stdout.strip()
    p = run(installed, "gptscope", "eval", "--checkpoint", builtin, "--text", str(text))
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["bits_per_char"] > 0


@pytest.mark.slow
def test_installed_python_dash_m_gptscope_is_the_command(installed):
    p = run(installed, "python", "-m", "gptscope", "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: gptscope"), p.stderr
