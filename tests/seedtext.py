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


# Words by which a text says that what follows is its own reasoning, not the paper's: a fact after them
# in the same paragraph is not credited to the paper the text is about.
DISOWNING = ("does not derive", "the usual reconstruction", "does not say", "not in the paper")
# a citation the texts glue into a sentence: "Szegedy et al.CitationSzegedy et al. Rethinking ... 2015. PDF"
# or "headsSee Joshua Ainslie et al., “GQA: ...” (arXiv, 2023).."
_NOTES = re.compile(r"Citation.{0,300}?\. (?:PDF|arXiv)|See [^“]*“[^”]*”[^)]*\)\.?")


def sentence_of(line: str, quote: str) -> str:
    """The sentence of `line` that holds `quote`, a citation glued into it or after it included."""
    shielded = _NOTES.sub(lambda m: m.group().replace(". ", ".\0"), line)
    at = line.index(quote)
    starts = [0] + [m.end() for m in re.finditer(r"(?<=[.!?])\s+(?=[A-Z$])", shielded)]
    start = max(s for s in starts if s <= at)
    rest = [s for s in starts if s >= at + len(quote)]
    return line[start : rest[0] if rest else len(line)]


# the notes' three posts, each by its references' first line: the papers the post is about
NOTES_POSTS = {
    "Radford, A., et al. (2018)": (("Radford", "2018"), ("Radford", "2019")),
    "Devlin, J., et al. (2018)": (("Devlin", "2018"),),
    "Vaswani, A., et al. (2017)": (("Vaswani", "2017"),),
}
# in the GPT post, which of its two papers a line's figure is from: the model its line or table names
GPT_POST_MODELS = {("Radford", "2018"): re.compile(r"GPT-1\b"), ("Radford", "2019"): re.compile(r"GPT-2")}


def credits(seed: str, quote: str, paper: str) -> bool:
    """Whether the text credits `paper` for the very claim `quote` gives (not merely a paper nearby):
    - its first author and year are in the quote's own sentence, or the citation glued to it;
    - in the notes, the paper is one the quote's post is about (in the GPT post, the one of the model
      the line or its table header names);
    - the whole text is about the paper, and the paragraph has not said, before the quote, that what
      follows is the text's own reasoning (DISOWNING)."""
    surname = paper.split()[0].rstrip(",")
    year = re.search(r"\((?:[^()]*, )?(\d{4})\)", paper).group(1)
    lines = text(seed).splitlines()
    i = next(k for k, line in enumerate(lines) if quote in line)
    sentence = sentence_of(lines[i], quote)
    if surname in sentence and year in sentence:
        return True
    if seed == NOTES:
        j = next(k for k in range(i, len(lines)) if lines[k] == "References")
        about = next((v for k, v in NOTES_POSTS.items() if lines[j + 2].startswith(k)), ())
        listed = next((x for x in lines[j + 2 : j + 6] if x.startswith(surname) and f"({year})" in x), None)
        if listed and (surname, year) not in about:  # another paper the post lists: named by its title
            return listed.split(f"({year}). ")[1].split(":")[0].split(".")[0] in sentence
        if len(about) < 2:
            return (surname, year) in about
        return bool(GPT_POST_MODELS[(surname, year)].search("\n".join([lines[i], *_header(lines, i)])))
    before = lines[i][: lines[i].index(quote)].lower()
    return SUBJECT.get(seed) == (surname, year) and not any(d in before for d in DISOWNING)


def _header(lines: list[str], i: int) -> list[str]:
    """The header row of the table a line of the notes sits in (for the header itself, the first row
    under it), and the heading of its section (the nearest line above that follows a blank one)."""
    k = i
    while k > 0 and "\t" in lines[k - 1]:
        k -= 1
    h = i
    while h > 0 and lines[h - 1].strip():
        h -= 1
    below = lines[i + 1] if i + 1 < len(lines) and "\t" in lines[i] and "\t" in lines[i + 1] else ""
    return [lines[k] if k != i and "\t" in lines[k] else "", below, lines[h - 2] if h >= 2 else ""]
