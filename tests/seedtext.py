"""What the tests that read the seed texts share: where the texts are, one text's contents, and
whether a text cites a paper for the fact a quote of it gives."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "seeds"
if not SEEDS.is_dir():
    SEEDS = Path("/work/shared/seeds")

LEARN_TEXT, GPT1_TEXT, GPT2_TEXT = "how-models-learn.txt", "gpt1-genealogy.txt", "llm-pretraining-for-generalists.txt"
NOTES = "gpt-bert-transformer-notes.txt"

# The paper a whole text is about: a fact of that text may name it without the paragraph citing it again.
SUBJECT = {LEARN_TEXT: ("Vaswani", "2017"), GPT1_TEXT: ("Radford", "2018"), GPT2_TEXT: ("Radford", "2019")}


@cache
def text(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


def cites_for(seed: str, quote: str, paper: str) -> bool:
    """Whether the text cites `paper` for the fact `quote` gives: its first author and year are in the
    quote's paragraph, or (the notes) in the references of the post the quote is in, or the paper is
    the one the whole text is about."""
    surname = paper.split()[0].rstrip(",")
    year = re.search(r"\((?:[^()]*, )?(\d{4})\)", paper).group(1)
    lines = text(seed).splitlines()
    i = next(k for k, line in enumerate(lines) if quote in line)
    near = [lines[i]]
    if seed == NOTES:  # each post ends with its references
        j = next(k for k in range(i, len(lines)) if lines[k] == "References")
        near += lines[j + 1 : j + 5]
    if any(surname in line and year in line for line in near):
        return True
    return SUBJECT.get(seed) == (surname, year)
