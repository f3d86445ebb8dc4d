#!/usr/bin/env python
"""Fine-tune a model from a recipe (YAML): train, evaluate, save, write the card, optionally push.

Examples::

    python scripts/finetune.py pipelines/motif/tiny.yaml
    python scripts/finetune.py pipelines/motif/tiny.yaml --resume            # after an interruption
    python scripts/finetune.py pipelines/motif/tiny.yaml --override num_train_epochs=1 learning_rate=1e-4
    accelerate launch --config_file configs/accelerate/cpu_ddp.yaml scripts/finetune.py pipelines/motif/tiny.yaml

Exit codes: 0 success; 1 a user error (invalid recipe or override, output_dir already holding
checkpoints, corrupt checkpoint on --resume), printed as one ``error:`` line without a traceback;
2 invalid command line (argparse); 3 trained and saved locally, but the push to the Hub failed.
"""

from __future__ import annotations

import argparse
import logging
import sys

EXIT_OK, EXIT_USER_ERROR, EXIT_USAGE, EXIT_PUSH_FAILED = 0, 1, 2, 3


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
        "--output_dir",
        default=None,
        help="Where the model, checkpoints and results go (overrides the recipe's output_dir).",
    )
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    """Parse the command line (argparse exits with status 2 on invalid arguments)."""
    return build_parser().parse_args(argv)


def main(argv=None) -> int:
    """Run the recipe; return the exit status (see the module docstring)."""
    args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)

    from hf_sparse.training import CheckpointError, HubPushError, RecipeError, run

    overrides = list(args.override)
    if args.output_dir is not None:
        overrides.append(f"output_dir={args.output_dir}")
    try:
        results = run(args.recipe, overrides, resume=True if args.resume else None)
    except (RecipeError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except HubPushError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_PUSH_FAILED
    logging.getLogger("finetune").info(
        "done: global_step=%s world_size=%s output_dir=%s",
        results.get("global_step"),
        results.get("world_size"),
        results.get("output_dir"),
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
