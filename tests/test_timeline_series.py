"""A run's snapshots brought in as one series (`gptscope import --series`, model/importers/series.py) and read
by /timeline: a command-line run's folder, and Pythia-style step folders (transformers' own random GPT-NeoX
models, saved one folder per step as the Hub publishes Pythia's revisions). Refusals name what is wrong."""

from __future__ import annotations

import json
import time

import pytest
from hf_families import build

from gptscope.model import checkpoint as ckpt
from gptscope.model import train as train_mod
from gptscope.model.importers import ImportFailed, import_series
from gptscope.server import cli

CHEAP = {"sae_tokens": 0, "lens_tokens": 0, "pair": None}


def until_done(c, url: str, timeout: float = 120.0) -> dict:
    end = time.time() + timeout
    while time.time() < end:
        body = c.get(url).json()
        if body["status"] not in ("queued", "running"):
            return body
        time.sleep(0.1)
    raise AssertionError(f"{url} did not finish")


@pytest.fixture(scope="module")
def series_client(tmp_path_factory, service):
    from fastapi.testclient import TestClient

    from gptscope.server.app import create_app
    from gptscope.server.config import BUILTIN_CHECKPOINT, Settings

    data = tmp_path_factory.mktemp("series-data")
    app = create_app(
        Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=data, allow_hosts=["testserver"]), service=service
    )
    with TestClient(app) as c:
        yield c, data


def test_a_command_line_run_imports_as_a_series_and_reads_on_the_timeline(series_client, tmp_path, capsys):
    c, data = series_client
    out = tmp_path / "run"
    tc = train_mod.TrainConfig(
        preset="tiny", vocab_size=300, batch_size=4, max_steps=8, snapshots=(0.0, 0.5, 1.0), precision="fp32", seed=3
    )
    train_mod.train(tc, out=out, progress=False)
    assert cli.main(["import", str(out), "--name", "cli-run", "--series", "--data-dir", str(data)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == [0, 4, 8]
    folder = data / "models" / "cli-run"
    assert ckpt.load(folder).meta.step == 8  # the last step is the series' own checkpoint
    for step in (0, 4, 8):  # each step's weights are the run's snapshot's own
        a = ckpt.load(out / "snapshots" / f"step-{step:06d}").model.state_dict()
        b = ckpt.load(folder / "snapshots" / f"step-{step:06d}").model.state_dict()
        assert all((a[k] == b[k]).all() for k in a)
    assert {"run": "models/cli-run", "steps": [0, 4, 8]} in c.get("/api/v1/timeline/runs").json()
    r = c.post("/api/v1/timeline/jobs", json={"run": "models/cli-run", **CHEAP})
    job = until_done(c, f"/api/v1/timeline/jobs/{r.json()['id']}")
    assert job["status"] == "done", job["error"]
    t = job["result"]
    assert t["steps"] == [0, 4, 8] and t["features"] is None and t["edges"] == []
    assert all(s["sae"] is None and s["circuit"] is None and s["lens"][0]["tuned_kl"] is None for s in t["snapshots"])


def test_pythia_style_step_folders_import_and_read(series_client, tmp_path):
    c, data = series_client
    src = tmp_path / "pythia"
    for i, step in enumerate((0, 1000, 2000)):
        build("pythia", src / f"step{step}", seed=i)
    dest, summary = import_series(src, "pythia-steps", data)
    assert summary["steps"] == [0, 1000, 2000] and (dest / "snapshots" / "step-001000" / ckpt.META_NAME).is_file()
    r = c.post("/api/v1/timeline/jobs", json={"run": "models/pythia-steps", **CHEAP, "lens_tokens": 1024})
    job = until_done(c, f"/api/v1/timeline/jobs/{r.json()['id']}")
    assert job["status"] == "done", job["error"]
    snaps = job["result"]["snapshots"]
    assert [s["step"] for s in snaps] == [0, 1000, 2000] and all(s["lens"][0]["tuned_kl"] is not None for s in snaps)
    assert len({s["loss"] for s in snaps}) == 3  # three different models, each read


def test_a_series_that_is_not_one_run_or_too_short_is_refused_naming_why(tmp_path):
    src = tmp_path / "mixed"
    build("pythia", src / "step-1", seed=0)
    with pytest.raises(ImportFailed, match="at least 2"):
        import_series(src, "one-step", tmp_path / "data")
    build("pythia", src / "step-2", seed=1, num_hidden_layers=3)
    with pytest.raises(ImportFailed, match=r"step 2 .* not the same model as step 1: \['n_layer'\]"):
        import_series(src, "mixed", tmp_path / "data")
    assert not (tmp_path / "data" / "models" / "mixed").exists()  # nothing half-written
    assert not any((tmp_path / "data" / "models").glob(".*"))
    with pytest.raises(ImportFailed, match="not valid"):
        import_series(src, "../x", tmp_path / "data")
