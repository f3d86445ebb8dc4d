#!/usr/bin/env python
"""Fine-tune a model from a recipe (YAML): train, evaluate, save, write the card, optionally push.

Examples::

    python scripts/finetune.py pipelines/motif/tiny.yaml
    python scripts/finetune.py pipelines/motif/tiny.yaml --resume            # after an interruption
    python scripts/finetune.py pipelines/motif/tiny.yaml --override num_train_epochs=1 learning_rate=1e-4
    accelerate launch --config_file configs/accelerate/cpu_ddp.yaml scripts/finetune.py pipelines/motif/tiny.yaml

Exit codes: 0 success; 2 a user error (invalid command line, recipe, override or value; a data
folder or file that does not exist; output_dir already holding checkpoints or a trained model; a corrupt
checkpoint on --resume, or one that does not fit the recipe's model), printed as one ``error:`` line without a
traceback (``--debug`` shows it); also 2, as one ``error:`` line, files that cannot be written (an output_dir on
a read-only file system or without write permission, found before anything is built; a disk or quota full
during the run, where --resume continues from the latest complete checkpoint); 3 trained and saved locally, but
the push to the Hub failed; 1 anything unexpected (with its traceback).

A rerun over an output_dir that holds checkpoints or a trained model stops before anything is deleted: pass
--resume to continue from the latest checkpoint, or --overwrite_output_dir to delete them (and the earlier
run's card, plots and results) and start over (the deletion is printed).
"""

from __future__ import annotations

import argparse
import errno
import logging
import sys

EXIT_OK, EXIT_UNEXPECTED, EXIT_USER_ERROR, EXIT_PUSH_FAILED = 0, 1, 2, 3
EXIT_USAGE = EXIT_USER_ERROR  # argparse's own status for an invalid command line
# Files that cannot be written: the machine's state, for the user to fix (free space, another folder), not a bug.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def build_parser() -> argparse.ArgumentParser:
    """The command line parser (every flag has a help text)."""
    parser = argparse.ArgumentParser(
        description="Fine-tune a model from an hf-sparse recipe (YAML parsed with HfArgumentParser).",
        epilog="Any recipe key can be overridden: --override key=value [key=value ...].",
    )
    parser.add_argument("recipe", help="Path of the recipe YAML file (e.g. pipelines/motif/tiny.yaml).")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="Resume from the latest checkpoint-N in output_dir (validated first; none yet: start from scratch).",
    )
    parser.add_argument(
        "--override",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="Recipe values to override, typed by the field (e.g. num_train_epochs=1 lora=true "
        "report_to=none lora_target_modules=[query,value]). May be repeated.",
    )
    parser.add_argument(
        "--overwrite_output_dir",
        action="store_true",
        help="Delete the checkpoints and the trained model (with its card, plots and results) already in "
        "output_dir and start from step 0 (without it, and without --resume, such an output_dir is an error and "
        "nothing is deleted).",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="Show the full traceback of a user error instead of the one 'error:' line.",
    )
    parser.add_argument(
        "--output_dir",
        default=None,
        help="Where the model, checkpoints and results go (overrides the recipe's output_dir).",
    )
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    """Parse the command line (argparse exits with status 2 on invalid arguments)."""
    return build_parser().parse_args(argv)


def _one_line(e: BaseException, secrets=()) -> str:
    """The exception's message on one line (an OSError's own, with the file it names), with ``secrets``,
    the secret environment variables' values and ``hf_...`` tokens masked (stderr ends up in CI logs)."""
    from hf_sparse.training.secrets import redact

    text = str(e) if not isinstance(e, KeyError) or not e.args else str(e.args[0])
    return redact(" ".join(text.split()), secrets) or type(e).__name__


def _write_error(e: BaseException) -> OSError | None:
    """The ``OSError`` (disk or quota full, read-only file system) that ``e`` is or was raised from, else None;
    a ``SafetensorError`` naming one (``"No space left on device (os error 28)"``) counts as that ``OSError``
    (a checkpoint's torch files: see ``hf_sparse.training.checkpoints.as_write_error``)."""
    from hf_sparse.training.checkpoints import as_write_error

    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        error = as_write_error(e)
        if error is not None and error.errno in _WRITE_ERRNOS:
            return error
        e = e.__cause__ or e.__context__
    return None


def _override_secrets(overrides) -> list[str]:
    """The values of secret-named overrides (``hub_token=...``), to mask in a printed error."""
    from hf_sparse.training.secrets import is_secret_key

    pairs = (item.partition("=") for item in overrides if isinstance(item, str))
    return [value for key, sep, value in pairs if sep and is_secret_key(key.strip()) and value]


def main(argv=None) -> int:
    """Run the recipe; return the exit status (see the module docstring)."""
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)

    from hf_sparse.training import CheckpointError, HubPushError, RecipeError, run
    from hf_sparse.utils.console import print_error

    overrides = list(args.override)
    if args.output_dir is not None:
        overrides.append(f"output_dir={args.output_dir}")
    if args.overwrite_output_dir:
        if args.resume:
            print("error: --resume and --overwrite_output_dir exclude each other", file=sys.stderr)
            return EXIT_USER_ERROR
        overrides.append("overwrite_output_dir=true")
    # User errors: the recipe's and the checkpoint's own, and paths that do not exist.
    user_errors = (RecipeError, CheckpointError, FileNotFoundError, NotADirectoryError, PermissionError)
    try:
        results = run(args.recipe, overrides, resume=True if args.resume else None)
    except user_errors as e:
        if args.debug:
            raise
        print_error(_one_line(e, _override_secrets(overrides)))
        return EXIT_USER_ERROR
    except HubPushError as e:
        if args.debug:
            raise
        print_error(_one_line(e, _override_secrets(overrides)))
        return EXIT_PUSH_FAILED
    except Exception as e:  # a full disk while saving: the checkpoint being written stays hidden, incomplete
        cause = _write_error(e)
        if args.debug or cause is None:
            raise
        print_error(
            f"cannot write the run's files: {_one_line(cause, _override_secrets(overrides))}; free space "
            "(or choose another --output_dir) and rerun: --resume continues from the latest complete checkpoint"
        )
        return EXIT_USER_ERROR
    logging.getLogger("finetune").info(
        "done: global_step=%s world_size=%s output_dir=%s",
        results.get("global_step"),
        results.get("world_size"),
        results.get("output_dir"),
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
