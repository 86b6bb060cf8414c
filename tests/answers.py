"""The app's answers on the built-in model, to show a refactor changed none of them.

    python tests/answers.py record before.json   # on the code before the change
    python tests/answers.py record after.json    # on the code after it
    python tests/answers.py diff before.json after.json

`record` serves the built-in model in process (a fresh data folder), asks every kind of question
a page or a tool asks (the forward trace with several selections and its GET twin, the logit lens,
/compare against a run's snapshot, patching at once and as a job, the SAE's features, the health and
model answers, the OpenAPI document, every page's HTML) and runs every kind of background job to its
end (a training run, a fine-tuning job, an SAE training job, a patching job), keeping each answer's
bytes. What differs between two runs of the same code is masked before it is kept: a job's id and
its clock readings (elapsed, ETA, throughput). Not a test (pytest does not collect it): it takes
about a minute, and its use is the before/after comparison of one change.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

# the trainer's precision is measured (a speed ratio in its answer) unless it is forced
os.environ.setdefault("GPTSCOPE_PRECISION", "fp32")

from fastapi.testclient import TestClient

from gptscope.server.app import create_app
from gptscope.server.config import Settings
from gptscope.server.pages import PAGES as DECLARED_PAGES

CLOCK = {"elapsed", "elapsed_s", "eta_s", "tokens_per_s", "started", "finished", "seconds", "ms_per_step"}
PROMPT = "KING HENRY V:\nOnce more unto the breach, dear friends, once"
PAGES = (*(p.path for p in DECLARED_PAGES), "/docs")  # server/pages.py, and the API's own


def masked(value, ids: dict[str, str]):
    """A JSON value with job ids renamed by order of appearance and clock readings set to 0."""
    if isinstance(value, dict):
        return {k: (0 if k in CLOCK and isinstance(v, int | float) else masked(v, ids)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, ids) for v in value]
    if isinstance(value, str):
        for real, name in ids.items():
            value = value.replace(real, name)
    return value


class Recorder:
    def __init__(self, client: TestClient, data: str) -> None:
        self.client, self.answers, self.ids = client, {}, {data: "<data>"}

    def ask(self, key: str, method: str, url: str, only: tuple[str, ...] = (), **kw):
        """Ask and keep the answer under key; `only`: keep just these fields of a JSON object (for an
        answer that races its job: a fully cached patch sweep can be done before its 202 is written)."""
        r = self.client.request(method, url, **kw)
        body = r.content
        ctype = r.headers.get("content-type", "")
        if "json" in ctype:
            data = r.json()
            if isinstance(data, dict) and isinstance(data.get("id"), str) and re.fullmatch(r"[0-9a-f]{12}", data["id"]):
                self.ids.setdefault(data["id"], f"<job{len(self.ids)}>")
            kept = {k: data[k] for k in only} if only and isinstance(data, dict) else data
            text = json.dumps(masked(kept, self.ids), sort_keys=False)
        elif "html" in ctype:
            text = body.decode()
            for real, name in self.ids.items():
                text = text.replace(real, name)
        else:
            text = hashlib.sha256(body).hexdigest()
        self.answers[key] = {"status": r.status_code, "body": text}
        if r.status_code >= 400:
            print(f"{key}: {r.status_code} {text[:300]}", file=sys.stderr)
        return r

    def finish(self, key: str, url: str, limit: float = 600) -> dict:
        """Poll a job until it is no longer going; its last answer is kept under key."""
        end = time.time() + limit
        while time.time() < end:
            data = self.client.get(url).json()
            if data["status"] not in ("starting", "running"):
                break
            time.sleep(0.2)
        return self.ask(key, "GET", url).json()


def record(out: Path) -> None:
    with tempfile.TemporaryDirectory() as data:
        app = create_app(Settings(data_dir=Path(data), allow_hosts=["testserver"]))
        with TestClient(app) as client:
            rec = Recorder(client, data)
            api = "/api/v1"
            rec.ask("openapi", "GET", "/openapi.json")
            for url in ("/health", "/forward/parts", "/params/presets", "/checkpoints", "/patch/pairs"):
                rec.ask(url, "GET", api + url)
            rec.ask("params", "GET", api + "/params?n_layer=2&n_head=2&d_model=64")
            for include in (
                None,
                ["attention"],
                ["mlp", "residual"],
                ["embeddings", "next_token", "logit_lens"],
                ["layernorm", "head_detail", "prompt_loss", "decomposition", "sae_features"],
            ):
                body = {"text": PROMPT, **({"include": include} if include else {})}
                rec.ask(f"forward {include}", "POST", api + "/forward", json=body)
            rec.ask("forward layer 1 head 2", "POST", api + "/forward", json={"text": PROMPT, "layer": 1, "head": 2})
            rec.ask("forward GET", "GET", api + "/forward", params={"text": PROMPT})
            rec.ask("logit lens POST", "POST", api + "/logit-lens", json={"text": PROMPT})
            rec.ask("next-token", "POST", api + "/next-token", json={"text": PROMPT, "seed": 1})
            pair = client.get(api + "/patch/pairs").json()[0]
            patch = {"clean": pair["clean"], "corrupted": pair["corrupted"]}
            rec.ask("patch", "POST", api + "/patch", json=patch)
            job = rec.ask("patch job", "POST", api + "/patch/jobs", only=("id", "total"), json=patch).json()
            rec.finish("patch job done", f"{api}/patch/jobs/{job['id']}")
            saes = rec.ask("saes", "GET", api + "/saes").json()
            name = saes["saes"][0]["name"]
            rec.ask("sae", "GET", f"{api}/saes/{name}")
            rec.ask("sae features", "GET", f"{api}/saes/{name}/features", params={"sort": "density", "limit": 20})
            rec.ask("sae feature 3", "GET", f"{api}/saes/{name}/features/3")
            text = ("The quick brown fox jumps over the lazy dog. A stitch in time saves nine. " * 80).encode()
            rec.ask("corpus", "POST", api + "/corpora", files={"file": ("t.txt", text)}, data={"name": "small"})
            tiny = {"preset": "tiny", "vocab_size": 300, "batch_size": 8, "corpus": "small", "max_steps": 6}
            run = rec.ask("training", "POST", api + "/training", json={**tiny, "snapshots": [0.5]}).json()
            done = rec.finish("training done", f"{api}/training/{run['id']}")
            rec.ask("training list", "GET", api + "/training")
            step = done["snapshots"][0]
            rec.ask("replay", "GET", f"{api}/training/{run['id']}/replay", params={"step": step, "tokens": 20})
            rec.ask("checkpoints after", "GET", api + "/checkpoints")
            other = f"{run['id']}/step-{step:06d}"
            rec.ask("compare", "POST", api + "/compare", json={"a": "builtin", "b": other, "text": PROMPT})
            ft = {"task": "genre", "methods": ["probe", "finetune"], "sizes": [16], "steps": 3}
            job = rec.ask("finetune", "POST", api + "/finetune", json=ft).json()
            rec.finish("finetune done", f"{api}/finetune/{job['id']}")
            sae = {"layer": 0, "k": 4, "batch_tokens": 256, "max_tokens": 1024, "eval_sequences": 8, "ce_sequences": 4}
            job = rec.ask("sae job", "POST", api + "/saes", json={**sae, "name": "answers"}).json()
            rec.finish("sae job done", f"{api}/saes/jobs/{job['id']}")
            rec.ask("sae jobs", "GET", api + "/saes/jobs")
            for page in PAGES:
                rec.ask(f"page {page}", "GET", page)
    out.write_text(json.dumps(rec.answers, indent=1), encoding="utf-8")
    bad = {k: v["status"] for k, v in rec.answers.items() if v["status"] >= 400}
    print(f"{len(rec.answers)} answers in {out}" + (f"; refused: {bad}" if bad else ""))


def diff(a: Path, b: Path) -> int:
    before, after = (json.loads(p.read_text(encoding="utf-8")) for p in (a, b))
    changed = [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)]
    for k in sorted(changed):
        x, y = before.get(k, {}).get("body", ""), after.get(k, {}).get("body", "")
        at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        print(
            f"DIFFERS {k}: at char {at}\n  before: {x[max(0, at - 80) : at + 120]!r}\n  after:  {y[max(0, at - 80) : at + 120]!r}"
        )
    print(
        f"{len(before.keys() & after.keys()) - len(changed)} of {len(before.keys() | after.keys())} answers identical"
    )
    return 1 if changed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["record"]:
        record(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["diff"]:
        sys.exit(diff(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
