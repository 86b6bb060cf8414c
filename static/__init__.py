"""Package data, installed as `gptscope.static`: the pages' JavaScript (js/) and CSS (css/), served at
/static. This file makes it a regular package, so `importlib.resources.files("gptscope.static")` is
this folder itself, in an editable install and in an installed wheel alike (server/config.py)."""
