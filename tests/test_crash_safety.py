"""kill -9 in the middle of checkpoint saves, again and again: the latest complete checkpoint
always loads, and nothing half-written is ever taken for a checkpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from gptscope.model import checkpoint as ckpt

# A saver process that imports torch once and forks one child per round (a new interpreter per round
# spent two seconds importing torch): each child saves again and again, the weights of save `step`
# all step % 1000 / 1000, printing each step once its save has returned, until it is killed.
SAVER = textwrap.dedent("""
    import os, sys, torch
    from gptscope.model import checkpoint as ckpt
    from gptscope.model.gpt import GPT, GPTConfig
    torch.set_num_threads(1)
    folder = sys.argv[1]
    for line in sys.stdin:                      # one round: "<last step> <progress file>"
        step, progress = line.split()
        step = int(step)
        pid = os.fork()
        if pid == 0:
            out = open(progress, "w", buffering=1)
            model = GPT(GPTConfig(vocab_size=300, n_ctx=64, n_layer=2, n_head=4, d_model=64))
            while True:
                step += 1
                with torch.no_grad():
                    for p in model.parameters():
                        p.fill_(step % 1000 / 1000)  # every weight tells which save it belongs to
                ckpt.save(folder, model, {"name": "crash", "step": step, "tokenizer": {"kind": "tiktoken", "name": "gpt2"}},
                          optimizer_state={"x": torch.full((50_000,), float(step))})
                out.write(f"{step}\\n")
        print(pid, flush=True)
        os.waitpid(pid, 0)                      # reaped once the test has killed it
        print("gone", flush=True)
""")


def progress(path, at_least: int = 1, timeout: float = 60.0) -> list[int]:
    """The steps a saver child has reported, once it has reported `at_least` of them."""
    deadline = time.monotonic() + timeout
    while True:
        steps = [int(x) for x in path.read_text().split()] if path.exists() else []
        if len(steps) >= at_least:
            return steps
        assert time.monotonic() < deadline, "the saver did not start"
        time.sleep(0.01)


@pytest.mark.slow  # 12 saver children forked and killed
def test_kill_9_during_saves_never_loses_the_last_complete_checkpoint(tmp_path):
    folder = tmp_path / "ckpt"
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # no thread pool before a fork
    rng = random.Random(0)
    last_step = 0
    saver = subprocess.Popen(
        [sys.executable, str(script), str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        for round_ in range(12):
            report = tmp_path / f"progress-{round_}.txt"
            saver.stdin.write(f"{last_step} {report}\n")
            saver.stdin.flush()
            pid = int(saver.stdout.readline())
            progress(report)  # at least one complete save in this round
            time.sleep(rng.uniform(0.0, 0.4))
            os.kill(pid, signal.SIGKILL)
            assert saver.stdout.readline().strip() == "gone"
            printed = progress(report)
            loaded = ckpt.load(folder, with_optimizer=True)  # must never raise
            step = loaded.meta.step
            # the loaded checkpoint is a complete save: at least the last one reported, at most one more
            assert max(printed) <= step <= max(printed) + 1, (round_, printed[-3:], step)
            expect = step % 1000 / 1000
            assert all(torch.allclose(p, torch.full_like(p, expect)) for p in loaded.model.parameters())
            assert torch.all(loaded.optimizer_state["x"] == float(step))
            # the folder never holds more than the current files plus leftovers of the interrupted save
            names = {p.name for p in folder.iterdir()}
            assert {loaded.meta.weights, loaded.meta.optimizer, ckpt.META_NAME} <= names
            last_step = step
    finally:
        saver.kill()
        saver.wait()
    # the next complete save removes whatever an interrupted one left behind
    ckpt.save(folder, loaded.model, loaded.meta.copy(step=last_step + 1))
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted([ckpt.META_NAME, ckpt.read_meta(folder).weights])


@pytest.mark.parametrize("damage", ["truncate_meta", "garbage_meta"])
def test_a_damaged_meta_file_is_a_clear_error(tmp_path, damage, tiny_model):
    folder = ckpt.save(
        tmp_path / "c", tiny_model, {"name": "x", "step": 1, "tokenizer": {"kind": "tiktoken", "name": "gpt2"}}
    )
    meta = folder / ckpt.META_NAME
    meta.write_bytes(meta.read_bytes()[:40] if damage == "truncate_meta" else b"\x00\xff garbage")
    with pytest.raises(ckpt.CheckpointError):
        ckpt.load(folder)
