"""Push a saved hf-sparse model folder to the Hugging Face Hub.

    python scripts/push_to_hub.py FOLDER REPO_ID [--private] [--token-env NAME] [--revision BRANCH]

Same as ``python -m hf_sparse.hub``. The token comes from ``--token-env`` (default ``HF_TOKEN``) or
the one saved by ``hf auth login`` and is never printed. Only an allow-list of files is sent (model,
tokenizer, card, remote code, results; never checkpoints, TensorBoard runs or pickles), and a file that
holds a token stops the push. Exit code 2 with a one-line ``error:`` message for invalid arguments
(folder, repo id, an unset ``--token-env``); 1 when the Hub cannot be reached (the folder is left as it
was) or rejects the credentials.
"""

from __future__ import annotations

import sys

from hf_sparse.hub import main, parse_args

__all__ = ["main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
