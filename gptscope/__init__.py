"""gptscope as a library: `gptscope.notebook` shows the app's panels inside Jupyter and returns the
API's JSON as Python objects. The app itself is in the `server` and `model` packages."""

from server import __version__

__all__ = ["__version__"]
