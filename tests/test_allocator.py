"""model/allocator.py: while a training run lasts, the large tensors freed at each update are reused
without new pages from the kernel, in a job's thread too, and the weights are the same as without it;
overlapping runs keep the setting until the last one leaves; then the memory goes back to the system."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import threading
from pathlib import Path
from unittest import mock

import pytest
import torch
from test_train import assert_same_weights, english, state, tiny_tc

from gptscope.model import allocator
from gptscope.model import train as trainer

pytestmark = pytest.mark.skipif(not allocator.available(), reason="glibc's mallopt (Linux)")

MB16 = 4 * 2**20  # floats: a 16 MB tensor
STEPS = 12  # updates of the runs below; the faults are counted over the last half

# A run in a fresh process, with keep_freed() replaced by nothing: glibc's thresholds as they come (it
# cannot be undone in this process once a run has set them). GPT-2's 50,257 tokens at batch 4 x 32 make
# each update's logits and gradients 26 MB tensors.
RUN = """
import contextlib, json, resource, sys
from pathlib import Path
from unittest import mock
import torch
sys.path.insert(0, sys.argv[1])
from test_allocator import run_updates
from gptscope.model import train as trainer
with mock.patch.object(trainer, "keep_freed", contextlib.nullcontext):
    faults, weights = run_updates(Path(sys.argv[2]))
torch.save(weights, sys.argv[3])
print(json.dumps(faults))
"""


def run_updates(corpus: Path) -> tuple[float, dict]:
    """STEPS updates of a tiny model with GPT-2's vocabulary: page faults per update over the last half
    (minor faults: the kernel mapping and zeroing a page at its first touch), and the final weights."""
    marks: list[int] = []

    def on_event(e: dict) -> None:
        if e["type"] == "step" and e["record"].step in (STEPS // 2, STEPS):
            marks.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)

    torch.set_num_threads(1)
    tc = tiny_tc(
        corpus, max_steps=STEPS, tokenizer="gpt2", vocab_size=0, batch_size=4, log_interval=1, eval_interval=10**9
    )
    model = trainer.train(tc, progress=False, on_event=on_event).model
    return (marks[1] - marks[0]) / (STEPS - STEPS // 2), state(model)


def rss_mb() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024


@pytest.mark.slow
def test_a_run_reuses_its_freed_memory_in_a_job_thread_and_trains_the_same_weights(tmp_path):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text(english(), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(Path(__file__).parent), str(corpus), str(tmp_path / "plain.pt")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    plain_faults = json.loads(out.stdout.strip().splitlines()[-1])
    found: list[tuple[float, dict]] = []
    job = threading.Thread(target=lambda: found.append(run_updates(corpus)))  # as a training job of the app
    job.start()
    job.join()
    kept_faults, kept = found[0]
    assert plain_faults > 1000, f"glibc as it comes: {plain_faults:.0f} page faults per update"
    assert kept_faults < plain_faults / 20, f"{kept_faults:.0f} page faults per update, {plain_faults:.0f} without"
    assert_same_weights(kept, torch.load(tmp_path / "plain.pt"), atol=0)


def test_overlapping_runs_keep_the_setting_until_the_last_one_leaves_then_memory_goes_back():
    calls: list[tuple] = []
    libc = allocator._LIBC
    with mock.patch.object(allocator, "_LIBC", mock.Mock(wraps=libc)) as spy:
        spy.mallopt.side_effect = lambda *a: calls.append(("mallopt", *a)) or libc.mallopt(*a)
        spy.malloc_trim.side_effect = lambda *a: calls.append(("trim", *a)) or libc.malloc_trim(*a)
        with allocator.keep_freed():
            with allocator.keep_freed():
                pass
            assert ("trim", 0) not in calls  # the inner run left, the outer one still trains
            assert ("mallopt", allocator.M_TRIM_THRESHOLD, allocator.KEEP_BYTES) in calls
            held = [torch.ones(MB16) for _ in range(16)]  # 256 MB, then freed inside the run
            del held
        assert calls[-2:] == [("mallopt", allocator.M_TRIM_THRESHOLD, allocator.STEADY_TRIM), ("trim", 0)]
    assert allocator._inside == 0


def test_the_memory_a_run_kept_goes_back_when_it_ends():
    base = rss_mb()
    with allocator.keep_freed():
        held = [torch.ones(MB16) for _ in range(16)]  # 256 MB
        del held
        kept = rss_mb()
    after = rss_mb()
    assert kept - base > 200, f"{kept - base:.0f} MB kept inside the run"
    assert after - base < 50, f"{after - base:.0f} MB still held after the run"
