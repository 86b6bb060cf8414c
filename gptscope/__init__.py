"""gptscope: a small GPT and a local web app that shows what happens inside it.

One import namespace, over the repository's top-level folders (pyproject.toml maps them):

    gptscope.model      model/      the GPT, its trainer, tokenizers and checkpoints (torch only, no web code)
    gptscope.server     server/     the FastAPI app, /api/v1, the pages, the `gptscope` command
    gptscope.notebook               the app's panels and the API's JSON inside Jupyter
    gptscope.static     static/     the pages' JavaScript and CSS (package data)
    gptscope.templates  templates/  the pages' Jinja templates (package data)

`python -m gptscope` is the `gptscope` command.
"""

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it from here)

__all__ = ["__version__"]
