"""Trainer callbacks shared by every recipe run."""

from __future__ import annotations

import os

from transformers import TrainerCallback

from .checkpoints import write_json_atomic

__all__ = ["BestMetricCheckCallback", "LogHistoryCallback", "loss_series"]


def loss_series(log_history) -> dict[str, list[tuple[int, float]]]:
    """Train and eval loss points from a Trainer ``log_history``: ``{"train": [(step, loss)], "eval": [...]}``.

    This is the input of ``hf_sparse.viz.plot_curves``.
    """
    series = {"train": [], "eval": []}
    for entry in log_history or ():
        step = entry.get("step")
        if step is None:
            continue
        if "loss" in entry:
            series["train"].append((int(step), float(entry["loss"])))
        if "eval_loss" in entry:
            series["eval"].append((int(step), float(entry["eval_loss"])))
    return series


class LogHistoryCallback(TrainerCallback):
    """Keeps ``output_dir/log_history.json`` up to date during training and counts this run's steps.

    After every log event (training loss, evaluation, final metrics) the main process rewrites the
    file atomically with the Trainer's whole ``state.log_history`` (which, after a resume, starts with
    the history restored from the checkpoint), so a killed run leaves a valid file describing it up to
    its last log. ``start_step`` (the global step when training began: > 0 after a resume) and
    ``steps_this_run`` (optimizer steps taken by this process) prove what a run actually did.
    """

    def __init__(self, output_dir: str, filename: str = "log_history.json"):
        self.path = os.path.join(os.fspath(output_dir), filename)
        self.start_step: int | None = None
        self.steps_this_run = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start_step = state.global_step
        self.steps_this_run = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.steps_this_run += 1

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero:
            write_json_atomic(self.path, state.log_history)

    def series(self, state) -> dict[str, list[tuple[int, float]]]:
        """Loss points for the plot, from the Trainer state (see :func:`loss_series`)."""
        return loss_series(state.log_history)


class BestMetricCheckCallback(TrainerCallback):
    """At the first evaluation during training, checks that ``metric_for_best_model`` is one of its metrics.

    A task's metric names are known only once its metric function has run (they may depend on the data, e.g.
    one ``span_f1_<motif>`` per motif), so this is the earliest check: one
    :class:`~hf_sparse.training.recipe.RecipeError` listing the metrics, raised before that step's checkpoint is
    saved, instead of the ``KeyError`` transformers raises there. As in transformers, a name without the
    ``eval_`` prefix gets it.
    """

    def __init__(self, source: str | None = None):
        self.source = source
        self.training = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.training = True

    def on_train_end(self, args, state, control, **kwargs):
        self.training = False  # the final evaluations (eval_ and test_ prefixes) are not checked

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        name = args.metric_for_best_model
        if not self.training or name is None or metrics is None:
            return
        self.training = False  # once
        key = name if name.startswith("eval_") else f"eval_{name}"
        if key not in metrics:
            from .recipe import RecipeError

            found = ", ".join(
                sorted(
                    k
                    for k in metrics
                    if k.startswith("eval_") and not k.endswith(("_runtime", "_per_second"))
                )
            )
            raise RecipeError(
                f"{self.source}: metric_for_best_model={name!r} is not a metric of this task's evaluation "
                f"(it reports {found}); set metric_for_best_model to one of them"
            )
