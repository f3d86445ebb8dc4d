"""Fine-tuning tasks: everything task-specific that a recipe's ``task:`` key names.

A *task* is a small :class:`Task` subclass that tells the generic runner (``runner.py``) how to build
the tokenizer, the model, the datasets, the collator and the metrics for one problem (DNA motif
detection, long-document summarization, dialogue response selection, ...). The runner has no
task-specific branches: everything it does differently per task goes through a method below.

A task's :class:`~hf_sparse.tasks.TaskDescriptor` names its Task class (``task_class``), which is
imported on first use::

    class MotifTask(Task):
        Arguments = MotifArguments          # a dataclass: the task's own recipe keys
        def build_tokenizer(self, args): ...
        def build_model(self, args, tokenizer): ...
        def build_datasets(self, args, tokenizer): return {"train": ..., "validation": ..., "test": ...}

A recipe names a registered task (``task: dna-motif-detection``), or, as ``"package.module:NAME"``, a
Task subclass or a TaskDescriptor of any importable module (importing it may register the task: how
a task defined outside the package, e.g. in a test folder, is run).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, ClassVar

__all__ = [
    "Task",
    "TaskArguments",
    "get_task",
    "list_tasks",
    "metric_prefix",
]


@dataclasses.dataclass
class TaskArguments:
    """Arguments of a task without recipe keys of its own (the default :attr:`Task.Arguments`)."""


def metric_prefix(split: str) -> str:
    """Metric key prefix for a split: ``"validation"`` -> ``"eval"`` (Trainer's), others unchanged."""
    return "eval" if split == "validation" else split


class Task:
    """Base class of a fine-tuning task. Subclass it, set :attr:`Arguments`, override the builders.

    Every method receives the parsed task arguments (an instance of :attr:`Arguments`). Methods marked
    *collective* run on every process of a distributed run (they may call ``trainer.evaluate`` or
    ``trainer.predict``, which need all processes) and must write files only where
    ``trainer.is_world_process_zero()``; the others run where stated.

    Class attributes:
        name: the task's name (set from its descriptor; for a ``"module:Class"`` task without one
            it defaults to the lowercased class name).
        descriptor: the :class:`~hf_sparse.tasks.TaskDescriptor` the task was loaded through (its
            model card, model and pipeline), or None: the card is the generic SparseTransformer one.
        Arguments: dataclass of the task's recipe keys (every field with ``metadata={"help": ...}``;
            mark data paths with :func:`hf_sparse.training.recipe.path_field` so that relative paths
            resolve against the recipe file's folder).
        trainer_class: the ``transformers.Trainer`` subclass to use (e.g. ``Seq2SeqTrainer`` for
            generation metrics). The runner adds atomic checkpoint saves on top of it.
        training_arguments_class: the matching ``TrainingArguments`` class (e.g.
            ``Seq2SeqTrainingArguments``): its fields are recipe keys too.
        lora_task_type: peft ``TaskType`` name (``"SEQ_CLS"``, ``"TOKEN_CLS"``, ``"SEQ_2_SEQ_LM"``,
            ...) or None; with a task type peft also trains the usual head modules.
        model_accepts_loss_kwargs: whether the model's loss honours the Trainer's
            ``num_items_in_batch`` (set on the Trainer; None: the Trainer guesses from the forward
            signature). Default False, because transformers 5.23 guesses True for any ``forward(**kwargs)``
            and then, under DDP with ``average_tokens_across_devices``, multiplies the loss by the world
            size; heads that average their own loss (sequence/token classification, multiple choice,
            most custom heads) then train and report a loss ``world_size`` times too large. False is
            always correct (per-device mean, DDP averages gradients); True is slightly more exact for
            token-level losses that really divide by ``num_items_in_batch`` (causal LMs). The project's own
            models also say it themselves (their ``accepts_loss_kwargs``), for a plain Trainer.
        count_metrics: ``fnmatch`` patterns of the metrics (named without their ``eval_``/``test_`` prefix)
            that count things rather than score the model, such as the turns an accuracy was computed over
            (default ``n_*`` and ``num_*``). The model card lists them as counts, not as evaluation results
            of its ``model-index``; ``all_results.json`` keeps them with the metrics.
        resume_free_arguments: ``fnmatch`` patterns of the :attr:`Arguments` names a resume may change
            (evaluation-only and output settings; default ``max_eval_*``, ``max_test_*``, ``eval_*``,
            ``num_validation``, ``num_test``, ``*_plot``, and ``attention_backend``: the kernels are exact, so a run may
            resume on another device). Every other argument but a path
            (:func:`~hf_sparse.training.recipe.path_field`) defines the data or the model trained on, and is saved
            with each checkpoint: a resume with another value is an error naming it.
    """

    name: ClassVar[str] = ""
    descriptor: ClassVar[Any] = None
    Arguments: ClassVar[type] = TaskArguments
    trainer_class: ClassVar[type | None] = None  # None: transformers.Trainer
    training_arguments_class: ClassVar[type | None] = None  # None: transformers.TrainingArguments
    lora_task_type: ClassVar[str | None] = None
    model_accepts_loss_kwargs: ClassVar[bool | None] = False
    count_metrics: ClassVar[tuple[str, ...]] = ("n_*", "num_*")
    resume_free_arguments: ClassVar[tuple[str, ...]] = (
        "max_eval_*",
        "max_test_*",
        "eval_*",
        "num_validation",
        "num_test",
        "*_plot",
        "attention_backend",
    )
    #: processes of the preprocessing ``datasets.map`` calls (the recipe's ``num_proc``, set by the
    #: runner; None: :data:`hf_sparse.data.loading.DEFAULT_NUM_PROC` where a split is large enough).
    num_proc: int | None = None

    # --- builders (every process) -------------------------------------------------------------

    def check_arguments(self, args) -> None:
        """Checks of the task arguments that need the file system or a registry (data folders and
        files exist, motif names are known), run before anything is built or deleted.

        Raise ``ValueError`` (or ``FileNotFoundError``/``KeyError``) naming the key and the value;
        the runner turns it into one ``error:`` line. Default: nothing to check.
        """

    def build_tokenizer(self, args) -> Any:
        """Return the tokenizer (or processor), or None for a task without one."""
        raise NotImplementedError(f"{type(self).__name__} must implement build_tokenizer(args)")

    def build_model(self, args, tokenizer) -> Any:
        """Return the model to fine-tune (a ``PreTrainedModel``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement build_model(args, tokenizer)")

    def build_datasets(self, args, tokenizer) -> dict[str, Any]:
        """Return ``{"train": ..., "validation": ..., "test": ...}`` (``test`` optional).

        Each value is a torch ``Dataset`` or a ``datasets.Dataset``, already tokenized. The runner
        calls this under ``training_args.main_process_first()``, so the main process preprocesses
        (and fills any cache) before the others.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement build_datasets(args, tokenizer)")

    def limit_samples(self, split: str, dataset, n: int | None) -> Any:
        """The first ``n`` examples of ``split`` (the recipe's ``max_train_samples``, ``max_eval_samples``
        for "validation", ``max_test_samples``; None: all), called after :meth:`build_datasets`.

        Default: the first ``n`` rows. Override where a row is not a whole example (e.g. one chunk of a
        document whose metric needs every chunk) to cut at a whole example instead.
        """
        if n is None or n >= len(dataset):
            return dataset
        if hasattr(dataset, "select"):  # datasets.Dataset
            return dataset.select(range(n))
        import torch.utils.data

        return torch.utils.data.Subset(dataset, range(n))

    def data_collator(self, args, tokenizer) -> Any:
        """Return the collator, or None for the Trainer's default (padding with the tokenizer)."""
        return None

    def compute_metrics(self, args):
        """Return ``fn(EvalPrediction) -> dict`` for the Trainer's evaluations, or None (loss only)."""
        return None

    # --- LoRA ---------------------------------------------------------------------------------

    def lora_target_modules(self, model) -> list[str] | str:
        """Module names LoRA adapts when the recipe sets no ``lora_target_modules``.

        Default: peft's map for ``model.config.model_type`` (``["query", "value"]`` for BERT),
        else ``"all-linear"``.
        """
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as mapping

        model_type = getattr(getattr(model, "config", None), "model_type", None)
        return list(mapping[model_type]) if model_type in mapping else "all-linear"

    def lora_modules_to_save(self, model) -> list[str] | None:
        """Extra modules trained in full (and saved) next to the adapters, e.g. a new task head.

        Default: the adaptive-span modules (``adaptive_span``: one span per head and layer) and the
        mixture-of-experts routers (``router``: one ``(num_experts, hidden)`` matrix per MoE layer), where the
        model has any. LoRA would otherwise freeze them, and their own losses (the span penalty, the router's
        auxiliary and z losses) would train nothing.
        """
        from ..attention.adaptive_span import AdaptiveSpan
        from ..models.sparse_transformer.moe_sparse_transformer import SparseTransformerRouter

        kinds = (AdaptiveSpan, SparseTransformerRouter)
        names = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, kinds)}
        return sorted(names) or None

    def lora_trainable_token_indices(self, model) -> list[int] | dict[str, list[int]] | None:
        """Token ids whose embedding rows train in full next to the adapters (peft's ``trainable_token_indices``:
        a list for the input embeddings, or ``{module name: ids}``), or None for none.

        For rows the task added to a loaded checkpoint's embeddings (marker tokens): LoRA would leave them frozen
        at their initial values. peft trains only those rows, and keeps an embedding tied to the output layer
        (or shared by an encoder and a decoder) tied, which ``lora_modules_to_save`` cannot do. Default: None.
        """
        return None

    # --- evaluation and artifacts --------------------------------------------------------------

    def evaluate(self, trainer, dataset, split: str) -> dict[str, float]:
        """Final evaluation of ``split`` ("validation" or "test"). *Collective.*

        Default: ``trainer.evaluate`` with the metric prefix ``eval_`` for validation and ``test_``
        for test. Override for metrics that need more than logits (generation, span decoding). The
        per-epoch evaluations during training use :meth:`compute_metrics` only.
        """
        return trainer.evaluate(dataset, metric_key_prefix=metric_prefix(split))

    def after_training(self, trainer, args, output_dir: str) -> dict[str, Any]:
        """Extra artifacts after the final model is saved in ``output_dir``. *Collective.*

        E.g. plots or example predictions (the saved model can be loaded from ``output_dir``).
        Returns a JSON-serialisable dict recorded under ``"extras"`` in ``all_results.json``.
        """
        return {}

    def card_info(self, args, metrics: dict[str, Any]) -> dict[str, Any]:
        """Model card fields (``base_model``, ``datasets``, ``dataset_name``, ``pattern``, ``extra``,
        ...). Main process only.

        The returned keys are keyword arguments of ``hf_sparse.hub.render_model_card`` and override
        the runner's defaults (a ``training_config`` dict is merged into the run's instead: the task's settings,
        such as ``block_size``, join it) (``model_name``, ``metrics``, ``training_config``, ``dataset_name``,
        ``pattern`` from ``model.config.attention_pattern``, a spec or a per-layer list, ``base_model`` from
        ``args.model_name_or_path`` when that is a Hub id, not a local folder). The card is public: no
        local paths (a data folder's name, not its path).
        """
        return {}

    def save_extras(self, output_dir: str, tokenizer, model) -> None:
        """Write files the saved model folder needs besides the weights. Main process only.

        Default: the tokenizer's files. Override to add e.g. pipeline registration or remote code
        (call ``super().save_extras(...)`` to keep the tokenizer).
        """
        if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
            tokenizer.save_pretrained(output_dir)


def list_tasks() -> list[str]:
    """Names of the registered tasks (``import hf_sparse`` registers the package's own)."""
    import hf_sparse  # noqa: F401  (registers the package's tasks)
    from hf_sparse.tasks import registry

    return registry.names()


def get_task(name: str) -> type[Task]:
    """The :class:`Task` subclass for a registered name or a ``"package.module:NAME"`` path (NAME: a Task
    subclass or a :class:`~hf_sparse.tasks.TaskDescriptor`, which is registered).

    Raises:
        ValueError: ``name`` is not a non-empty string.
        KeyError: no task by that name (the message lists the registered ones), or the module/class
            of a ``"module:Class"`` path cannot be found.
        TypeError: a ``"module:Class"`` path names something that is not a :class:`Task` subclass.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"task must be a registered task name or 'module:ClassName', got {name!r}")
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            raise KeyError(f"task {name!r}: cannot import module {module_name!r} ({e})") from e
        cls = getattr(module, attr, None)
        if cls is None:
            raise KeyError(f"task {name!r}: module {module_name!r} has no attribute {attr!r}")
        from hf_sparse.tasks import TaskDescriptor, register

        if isinstance(cls, TaskDescriptor):
            return _task_class(register(cls))
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise TypeError(f"task {name!r} is {cls!r}, not a subclass of hf_sparse.training.Task")
        if not cls.name:
            cls.name = cls.__name__.lower()
        return cls
    import hf_sparse  # noqa: F401  (registers the package's tasks)
    from hf_sparse.tasks import registry

    try:
        descriptor = registry.get(name)
    except KeyError as e:
        raise KeyError(f"{e.args[0]} (or use 'package.module:NAME')") from None
    return _task_class(descriptor)


def _task_class(descriptor) -> type[Task]:
    cls = descriptor.load_task_class()
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(
            f"task {descriptor.name!r}: {descriptor.task_class} is not a subclass of hf_sparse.training.Task"
        )
    return cls
