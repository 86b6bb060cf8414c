"""A small uploaded corpus, "small": a few lines of proverbs, enough for a tokenizer and a tiny run
(conftest.py's `tclient` uploads it; tests that measure a run on it read it from here)."""

SMALL_TEXT = (
    "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
    "All that glitters is not gold. Fortune favours the bold. "
) * 60
