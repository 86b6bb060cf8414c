"""Package data, installed as `gptscope.templates`: the pages' Jinja templates. This file makes it a
regular package, so `importlib.resources.files("gptscope.templates")` is this folder itself, in an
editable install and in an installed wheel alike (server/config.py)."""
