"""Labelled tasks for fine-tuning (GPT-1's second stage): built from the plays, or from a CSV.

Every task has a fixed train half and test half that never share a text, nor a line of verse.
The built-in ones come from the 90% of the corpus the built-in model was pretrained on: the plays
that reach into the held-out 10% (see corpus.py) are left out of both halves, so the text the
language model is scored on stays unseen, and a "tragedy" cannot be told apart from the others
merely by being text the model never read.

- genre:   which kind of play a passage comes from (comedy, history, tragedy); whole plays are
           either train or test, so the model cannot learn a play's characters and call it style.
- speaker: who speaks a passage of Hamlet, among its four largest parts; passages are split by
           a hash of their text.
- form:    verse or prose. The plays' text breaks prose at the page's width, so a prose line
           after the first usually goes on mid-sentence in lower case, while every line of verse
           begins with a capital: a passage of at least three lines whose later lines all begin
           with a capital is verse, one where at least half of them begin in lower case is prose,
           and the rest (mixed, or too short to tell) are left out. Whole plays are train or test,
           as for genre.

An example is a passage: up to four consecutive lines of one speech, at least 40 characters.
"""

from __future__ import annotations

import csv
import hashlib
import io
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from . import corpus as corpus_mod

MAX_CSV_ROWS = 100_000
MAX_LABELS = 32
MAX_TEXT_CHARS = 2_000
PASSAGE_LINES = 4
MIN_PASSAGE_CHARS = 40

GENRES = {"comedies": "comedy", "histories": "history", "tragedies": "tragedy", "roman": "tragedy"}
GENRE_TEST_PLAYS = ("twelfth-night", "henry-v", "julius-caesar")  # one whole play of each kind
GENRE_PER_LABEL = (2000, 300)  # at most this many passages of each label in (train, test)
SPEAKER_PLAY = "hamlet"
SPEAKERS = ("HAMLET", "HORATIO", "KING CLAUDIUS", "LORD POLONIUS")
SPEAKER_TEST_EVERY = 5  # a passage is in the test half when the hash of its text is 0 mod 5
FORMS = ("verse", "prose")
FORM_MIN_LINES = 3  # a shorter passage cannot be told by its line starts


class TaskError(ValueError):
    """A task that cannot be built or found; the message names the row or the field."""


@dataclass(frozen=True)
class Example:
    text: str
    label: int
    text_b: str | None = None
    play: str = ""


@dataclass
class Task:
    name: str
    source: str  # "builtin" or "csv"
    description: str
    labels: list[str]
    train: list[Example]
    test: list[Example]
    train_plays: list[str] = field(default_factory=list)
    test_plays: list[str] = field(default_factory=list)
    excluded_plays: list[str] = field(default_factory=list)

    def counts(self, half: list[Example]) -> dict[str, int]:
        out = dict.fromkeys(self.labels, 0)
        for ex in half:
            out[self.labels[ex.label]] += 1
        return out

    @property
    def chance(self) -> float:
        """Accuracy of always answering the test half's most common label."""
        return max(self.counts(self.test).values()) / max(1, len(self.test))

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        for half in (self.train, self.test):
            for ex in half:
                h.update(f"{ex.label}\x00{ex.text}\x00{ex.text_b or ''}\x01".encode())
            h.update(b"\x02")
        h.update("\x00".join(self.labels).encode("utf-8"))
        return h.hexdigest()


# --- the plays ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Play:
    name: str
    kind: str  # the folder: comedies, histories, ...
    text: str
    held_out: bool  # reaches into the corpus's last 10%


@lru_cache(maxsize=1)
def plays() -> tuple[Play, ...]:
    """The plays in corpus order, each marked held out when any of it lies in the validation 10%."""
    full = corpus_mod.shakespeare().text
    cut = len(full) - len(corpus_mod.shakespeare().split()[1])
    out, offset = [], 0
    for p in corpus_mod.shakespeare_paths():
        text = corpus_mod.plain_play(p.read_text(encoding="utf-8").strip())
        start = full.index(text, offset)
        offset = start + len(text)
        out.append(Play(p.stem, p.parent.name, text, held_out=offset > cut))
    return tuple(out)


_SPEAKER_LINE = re.compile(r"^([A-Z][A-Z0-9 .,'&-]*):$")


def passages(text: str) -> list[tuple[str, str]]:
    """(speaker, passage) for every run of up to PASSAGE_LINES lines of one speech."""
    out: list[tuple[str, str]] = []
    speaker: str | None = None
    lines: list[str] = []

    def flush() -> None:
        for i in range(0, len(lines), PASSAGE_LINES):
            chunk = "\n".join(lines[i : i + PASSAGE_LINES])
            if len(chunk) >= MIN_PASSAGE_CHARS:
                assert speaker is not None  # lines are only kept under a speaker, and flushed before it changes
                out.append((speaker, chunk))
        lines.clear()

    for line in text.splitlines():
        if (m := _SPEAKER_LINE.match(line)) is not None:
            flush()
            speaker = m.group(1)
        elif not line.strip() or line.startswith("["):
            flush()  # a direction or a blank line ends the run of lines
            if not line.strip():
                speaker = None
        elif speaker is not None:
            lines.append(line.strip())
    flush()
    return out


def _stable_hash(s: str) -> int:
    return int.from_bytes(hashlib.sha256(s.encode("utf-8")).digest()[:8], "big")


def _disjoint(train: list[Example], test: list[Example]) -> list[Example]:
    """The training examples that share no line (and so no text) with the test half."""
    test_lines = {line for ex in test for line in (ex.text + "\n" + (ex.text_b or "")).splitlines() if line}
    return [
        ex for ex in train if not any(line in test_lines for line in (ex.text + "\n" + (ex.text_b or "")).splitlines())
    ]


def _cap(examples: list[Example], n_labels: int, per_label: int, seed: int) -> list[Example]:
    """At most per_label examples of each label (a seeded choice), in a seeded order."""
    rng = random.Random(seed)
    by = [[e for e in examples if e.label == i] for i in range(n_labels)]
    out = [e for group in by for e in rng.sample(group, min(per_label, len(group)))]
    rng.shuffle(out)
    return out


def _whole_plays(
    name: str,
    description: str,
    labels: list[str],
    taken: Callable[[Play], bool],
    label_of: Callable[[Play, str], int | None],
) -> Task:
    """A task whose halves are whole plays (GENRE_TEST_PLAYS the test half): every passage of the plays
    `taken` that `label_of` labels (None: left out), the held-out plays excluded, capped per label."""
    train: list[Example] = []
    test: list[Example] = []
    train_plays: list[str] = []
    test_plays: list[str] = []
    excluded: list[str] = []
    for play in plays():
        if not taken(play):
            continue
        if play.held_out:
            excluded.append(play.name)
            continue
        half, names = (test, test_plays) if play.name in GENRE_TEST_PLAYS else (train, train_plays)
        names.append(play.name)
        for _, text in passages(play.text):
            if (label := label_of(play, text)) is not None:
                half.append(Example(text, label, play=play.name))
    test = _cap(test, len(labels), GENRE_PER_LABEL[1], seed=1)
    train = _cap(_disjoint(train, test), len(labels), GENRE_PER_LABEL[0], seed=0)
    return Task(name, "builtin", description, labels, train, test, train_plays, test_plays, excluded)


def genre_task() -> Task:
    labels = ["comedy", "history", "tragedy"]
    return _whole_plays(
        "genre",
        "Which kind of play is this passage from: comedy, history or tragedy (Roman "
        "plays count as tragedies)? Whole plays are either training or test: "
        f"{', '.join(GENRE_TEST_PLAYS)} are the test half.",
        labels,
        lambda play: play.kind in GENRES,  # problem plays and romances: their kind is argued over
        lambda play, _text: labels.index(GENRES[play.kind]),
    )


def speaker_task() -> Task:
    play = next(p for p in plays() if p.name == SPEAKER_PLAY)
    assert not play.held_out, "the speaker task's play must come from the pretraining text"
    labels = [s.title() for s in SPEAKERS]
    examples = [
        Example(text, SPEAKERS.index(who), play=play.name) for who, text in passages(play.text) if who in SPEAKERS
    ]
    test = [e for e in examples if _stable_hash(e.text) % SPEAKER_TEST_EVERY == 0]
    train = _disjoint([e for e in examples if _stable_hash(e.text) % SPEAKER_TEST_EVERY], test)
    random.Random(0).shuffle(train)
    return Task(
        "speaker",
        "builtin",
        f"Who speaks this passage of Hamlet: {', '.join(labels)}? One passage in five "
        "(chosen by a hash of its text) is in the test half.",
        labels,
        train,
        test,
        [play.name],
        [play.name],
        [p.name for p in plays() if p.held_out],
    )


_FIRST_LETTER = re.compile(r"^[^A-Za-z]*([A-Za-z])")


def form_of(passage: str) -> str | None:
    """verse, prose or None (not told): by the first letter of each line after the first."""
    lines = passage.split("\n")
    if len(lines) < FORM_MIN_LINES:
        return None
    firsts = [_FIRST_LETTER.match(line) for line in lines[1:]]
    if any(m is None for m in firsts):
        return None
    lower = sum(m.group(1).islower() for m in firsts if m is not None)
    if lower == 0:
        return "verse"
    return "prose" if 2 * lower >= len(firsts) else None


def form_task() -> Task:
    labels = list(FORMS)
    return _whole_plays(
        "form",
        "Is this passage verse or prose? Told from the text's line breaks: a prose line runs on "
        "to the page's width, so the next line usually begins in lower case, while each line of verse "
        "begins with a capital (passages of at least three lines; mixed ones are left out). Whole "
        f"plays are either training or test: {', '.join(GENRE_TEST_PLAYS)} are the test half.",
        labels,
        lambda _play: True,
        lambda _play, text: None if (form := form_of(text)) is None else labels.index(form),
    )


BUILTIN_TASKS = {"genre": genre_task, "speaker": speaker_task, "form": form_task}


@lru_cache(maxsize=4)
def builtin(name: str) -> Task:
    if name not in BUILTIN_TASKS:
        raise TaskError(f"no built-in task {name!r}; the built-in tasks are {', '.join(BUILTIN_TASKS)}")
    return BUILTIN_TASKS[name]()


# --- a user's CSV -------------------------------------------------------------------------


def _csv_rows(data: bytes) -> tuple[list[str], list[tuple[int, list[str]]]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        row = data[: e.start].count(b"\n") + 1
        raise TaskError(f"csv row {row}: not valid UTF-8 (byte {e.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = [h.strip().lower() for h in next(reader, [])]
        rows = [(reader.line_num, r) for r in reader if r and any(c.strip() for c in r)]
    except csv.Error as e:
        raise TaskError(f"csv row {reader.line_num}: {e}") from None
    if header not in (["text", "label"], ["text", "label", "text_b"]):
        raise TaskError(
            f"csv row 1: the header must be text,label or text,label,text_b (found {','.join(header) or 'nothing'})"
        )
    return header, rows


def _csv_example(row: int, fields: list[str], n_cols: int) -> tuple[str, str, str | None]:
    if len(fields) != n_cols:
        raise TaskError(f"csv row {row}: {len(fields)} fields, the header has {n_cols}")
    text, label = fields[0].strip(), fields[1].strip()
    text_b = fields[2].strip() if n_cols == 3 else None
    if not text:
        raise TaskError(f"csv row {row}: text is empty")
    if not label:
        raise TaskError(f"csv row {row}: label is empty")
    for name, value in (("text", text), ("text_b", text_b or "")):
        if len(value) > MAX_TEXT_CHARS:
            raise TaskError(f"csv row {row}: {name} is {len(value):,} characters; the limit is {MAX_TEXT_CHARS:,}")
    return text, label, text_b


def from_csv(data: bytes, name: str) -> Task:
    """A task from CSV bytes (header text,label[,text_b]). One example in five, chosen by a hash of
    its text, is in the test half; a bad row is refused with its row number."""
    header, rows = _csv_rows(data)
    if len(rows) > MAX_CSV_ROWS:
        raise TaskError(f"csv has {len(rows):,} rows; the limit is {MAX_CSV_ROWS:,}")
    parsed = [_csv_example(row, fields, len(header)) for row, fields in rows]
    labels = sorted({label for _, label, _ in parsed})
    if len(labels) < 2:
        raise TaskError("csv needs at least 2 different labels")
    if len(labels) > MAX_LABELS:
        raise TaskError(f"csv has {len(labels)} labels; the limit is {MAX_LABELS}")
    examples = [Example(t, labels.index(lab), b) for t, lab, b in parsed]
    test = [e for e in examples if _stable_hash(e.text + "\x00" + (e.text_b or "")) % 5 == 0]
    train = _disjoint([e for e in examples if _stable_hash(e.text + "\x00" + (e.text_b or "")) % 5], test)
    if not train or not test:
        raise TaskError(f"csv has {len(examples)} usable rows: too few for both a training and a test half")
    return Task(
        name,
        "csv",
        f"Your CSV ({len(examples)} rows, {len(labels)} labels); one row in five, chosen by a "
        "hash of its text, is in the test half.",
        labels,
        train,
        test,
    )
