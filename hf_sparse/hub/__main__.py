"""``python -m hf_sparse.hub FOLDER REPO_ID [--private] [--token-env NAME]``: push a saved folder."""

import sys

from .push import main

sys.exit(main())
