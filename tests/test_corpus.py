"""The built-in corpus as plain play text, the package's markdown kept for the benchmark, and the
`gptscope corpus` command that writes exactly the text a run trains on and holds out."""

from __future__ import annotations

import re

import pytest

from gptscope.model import corpus
from gptscope.server.cli import main as cli_main


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("corpus-cli")
    out = {}
    for split in ("train", "val", "all"):
        path = folder / f"{split}.txt"
        assert cli_main(["corpus", "shakespeare", "--split", split, "--out", str(path)]) == 0
        out[split] = path.read_text(encoding="utf-8")
    return out


def test_the_plain_corpus_has_no_markdown_left(written):
    text = written["all"]
    lines = text.splitlines()
    assert "**" not in text and "_" not in text and "#" not in text and "\\" not in text
    assert not any(line.endswith("  ") for line in lines)
    assert not any(line.endswith(" ") for line in lines)
    speakers = [line for line in lines if re.fullmatch(r"[A-Z][A-Za-z .,'&-]*:", line)]
    assert len(speakers) > 10_000
    assert "ROMEO:" in speakers and "JULIET:" in speakers and "HAMLET:" in speakers
    directions = [line for line in lines if line.startswith("[")]
    assert len(directions) > 3_000 and all(d.endswith("]") for d in directions)
    assert "ACT I" in lines and "SCENE I. Athens. The palace of THESEUS." in lines
    assert "[Enter THESEUS, HIPPOLYTA, PHILOSTRATE, and Attendants]" in lines


def test_the_splits_are_exactly_what_a_run_trains_on_and_holds_out(written):
    train_text, val_text = corpus.shakespeare().split(corpus.VAL_FRACTION)
    assert written["train"] == train_text and written["val"] == val_text
    assert written["all"] == train_text + val_text == corpus.load("shakespeare").text
    # a file of the whole text, given to the trainer, splits at the same character
    assert corpus.Corpus("f", written["all"]).split(corpus.VAL_FRACTION) == (train_text, val_text)
    assert len(written["val"]) == pytest.approx(0.1 * len(written["all"]), abs=1)


def test_markdown_is_the_package_text_as_it_ships(tmp_path, capsys):
    md = corpus.load("shakespeare-markdown").text
    assert md.startswith("# A Midsummer Night's Dream") and "**THESEUS**  \n" in md
    assert (
        corpus.plain_play("**ROMEO**  \nBut soft!  \n_Enter JULIET, above_")
        == "ROMEO:\nBut soft!\n[Enter JULIET, above]"
    )
    # a direction that wraps onto the next line, and inline markup
    assert (
        corpus.plain_play("_Enter THESEUS and\nHIPPOLYTA_\n**PUCK**\n__\\[Awaking]_  ")
        == "[Enter THESEUS and HIPPOLYTA]\nPUCK:\n[Awaking]"
    )
    assert cli_main(["corpus", "shakespeare-markdown", "--split", "val", "--out", "-"]) == 0
    assert capsys.readouterr().out == corpus.Corpus("m", md).split()[1]
