"""The errors model/ shares: `Cancelled`, raised by a long computation (a training run, a fine-tuning
job, an artefact's training, a patching sweep) whose should_stop / cancel said stop; and
`SettingError(field, message)`, a trainable add-on's setting it cannot train with or folder it cannot
read, naming the field, in the same (field, message) order as the server's InputError (server/
artefacts.py turns it into a 422 naming that field)."""

from __future__ import annotations

from collections.abc import Callable


class Cancelled(Exception):
    """A computation stopped by its caller before it finished."""


def stop_if(should_stop: Callable[[], bool] | None, doing: str) -> None:
    """Raise Cancelled ("cancelled while <doing>") where should_stop is given and says stop."""
    if should_stop is not None and should_stop():
        raise Cancelled(f"cancelled while {doing}")


class SettingError(ValueError):
    """A setting that cannot be trained with, or a folder that cannot be read; `field` names the cause
    (the setting, "name" for the folder, "corpus" for the text, or the kind's own request field)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message
