"""`python -m gptscope ...`: the `gptscope` command (serve, train, eval, corpus, generate, import, finetune)."""

import sys

from gptscope.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
