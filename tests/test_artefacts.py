"""server/artefacts.py's frame, once per kind (SAEs, transcoder sets, tuned lenses): the command line
trains one with a tiny budget into a folder, records the command, prints the quality it saved, and the
kind's store lists, loads and checks it for the model it was trained on; a name it does not have is a
422 naming the request's field (or a 404 for a path); the built-in model's new ones go to the data
folder, never into the package."""

from __future__ import annotations

import copy
import json

import pytest

from gptscope.server.cli import main
from gptscope.server.config import BUILTIN_CHECKPOINT
from gptscope.server.errors import InputError, NotFound
from gptscope.server.lenses import LENSES
from gptscope.server.saes import SAES
from gptscope.server.transcoders import TRANSCODERS

TINY = ["--max-tokens", "1024", "--batch-tokens", "256", "--eval-sequences", "2", "--threads", "1"]
KINDS = [
    pytest.param(["sae", "--layer", "1", "--expansion", "8", *TINY], SAES, id="sae"),
    pytest.param(["transcoders", "--expansion", "2", *TINY], TRANSCODERS, id="transcoders"),
    pytest.param(["lens", *TINY], LENSES, id="lens"),
]


@pytest.mark.parametrize("argv, store", KINDS)
def test_the_command_line_trains_one_that_its_store_lists_and_serves(tmp_path, service, capsys, argv, store):
    out = tmp_path / store.folder / "from-cli"
    argv = [*argv, "--out", str(out)]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    meta = store.read_meta(out)
    assert printed[store.request_field] == str(out) and printed["quality"] == meta["quality"]
    assert meta["command"] == "gptscope " + " ".join(argv) and meta["steps"] == 4 and meta["tokens"] == 1024
    assert meta["checkpoint"]["weights_sha256"] == service.meta.weights_sha256 and meta["history"]

    mine = copy.copy(service)  # the session's model, with this kind's folder here
    mine.artefact_folders = {store.folder: [out.parent]}
    assert store.listing(mine) == [("from-cli", out)]
    assert store.get(mine, None).path == out and store.get_by_path(mine, "from-cli").path == out
    with pytest.raises(InputError) as e:
        store.get(mine, "nope")
    assert e.value.field == store.request_field and "choose one of ['from-cli']" in e.value.message
    with pytest.raises(NotFound):
        store.get_by_path(mine, "nope")

    assert main(argv) == 2  # the folder is there now: refused, and the one saved is kept
    assert "already exists" in capsys.readouterr().err and store.read_meta(out) == meta


@pytest.mark.parametrize("store", [SAES, TRANSCODERS, LENSES], ids=lambda s: s.folder)
def test_the_builtin_models_new_ones_go_to_the_data_folder(tmp_path, store):
    assert store.folders_for(BUILTIN_CHECKPOINT, tmp_path) == [
        tmp_path / store.folder / "builtin",
        BUILTIN_CHECKPOINT / store.folder,
    ]
    assert store.folders_for(tmp_path / "mine", tmp_path / "data") == [tmp_path / "mine" / store.folder]
