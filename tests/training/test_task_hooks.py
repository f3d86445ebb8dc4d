"""A task's mistakes a user makes in its hooks and card, found before training or reported in one line."""

import dataclasses
import json
from pathlib import Path

import pytest

from hf_sparse.training import RecipeError, load_recipe, run
from tests.tasks.toy import TOY_TASK
from tests.training.helpers import toy_recipe
from tests.training.toy_task import ToyTask

TOY_CARD = Path(TOY_TASK.card.template)


def _with_template(template: str):
    return dataclasses.replace(TOY_TASK, card=dataclasses.replace(TOY_TASK.card, template=template))


class RelativeCardTask(ToyTask):
    descriptor = _with_template("my_package/card.jinja")  # relative: looked up in hf_sparse's model_cards/


class MissingCardTask(ToyTask):
    descriptor = _with_template(str(TOY_CARD.parent / "nope.jinja"))


def _tiny(out, task, **values):
    """One epoch of 2 steps of the toy task (``task``: a class of this module)."""
    recipe = toy_recipe(
        out,
        task=f"{__name__}:{task}",
        num_train_epochs=1,
        per_device_train_batch_size=8,
        num_train=16,
        num_validation=8,
        num_test=8,
    )
    return {**recipe, **values}


@pytest.mark.parametrize(
    "task, problem",
    [
        ("RelativeCardTask", "card template 'my_package/card.jinja' is not in hf_sparse's model_cards/"),
        ("MissingCardTask", "card template '.*nope.jinja' does not exist"),
    ],
)
def test_a_card_template_that_cannot_be_found_is_an_error_before_training(tmp_path, task, problem):
    out = tmp_path / "out"
    with pytest.raises(RecipeError, match=problem):
        run(_tiny(out, task, model_card=True))
    assert not out.exists() or not any(out.iterdir())  # nothing trained
    assert run(_tiny(out, task, model_card=False))["global_step"] == 2  # no card: no check


def test_a_card_template_error_at_the_end_is_a_warning_and_the_results_are_written(tmp_path, caplog):
    """A variable no card has ({{ my_typo_variable }}) shows only when rendering: the card is skipped."""
    from hf_sparse.training.runner import _write_model_card

    template = tmp_path / "card.jinja"
    template.write_text(
        '{% extends "_base.jinja" %}\n{% block limitations %}\n- {{ my_typo_variable }}\n{% endblock %}\n'
    )

    class TypoCardTask(ToyTask):
        descriptor = _with_template(str(template))

    recipe_args, task_args, training_args = load_recipe(toy_recipe(tmp_path / "out"))
    results = {"eval_accuracy": 0.5}
    with caplog.at_level("WARNING"):
        path = _write_model_card(
            TypoCardTask(), task_args, recipe_args, training_args, results, str(tmp_path), None
        )
    assert path is None and not (tmp_path / "README.md").exists()
    assert "'my_typo_variable' is undefined" in results["model_card_error"]
    assert "card.jinja" in results["model_card_error"]
    assert "model card skipped" in caplog.text


class ListDatasets(ToyTask):
    def build_datasets(self, args, tokenizer):
        return list(super().build_datasets(args, tokenizer).values())


class TupleDatasets(ToyTask):
    def build_datasets(self, args, tokenizer):
        d = super().build_datasets(args, tokenizer)
        return (d["train"], d["validation"])


class NoneModel(ToyTask):
    def build_model(self, args, tokenizer):
        return None


class MetricsFloat(ToyTask):
    def compute_metrics(self, args):
        return lambda pred: 0.5


class EvaluateNone(ToyTask):
    def evaluate(self, trainer, dataset, split):
        super().evaluate(trainer, dataset, split)


class MetricsLoss(ToyTask):
    def compute_metrics(self, args):
        return lambda pred: {"loss": 123.0, "acc": 0.5}


class MetricsPrefixed(ToyTask):
    def compute_metrics(self, args):
        return lambda pred: {"eval_acc": 0.25}


class EvaluateNoPrefix(ToyTask):
    def evaluate(self, trainer, dataset, split):
        return {"acc": 0.75}


@pytest.mark.parametrize(
    "task, error, message",
    [
        ("ListDatasets", TypeError, "build_datasets must return a dict of split name .* got list"),
        ("TupleDatasets", TypeError, "build_datasets must return a dict of split name .* got tuple"),
        ("NoneModel", TypeError, r"build_model must return the model \(a torch.nn.Module.*got NoneType"),
        ("MetricsFloat", TypeError, "compute_metrics must return a dict of metric name -> value, got float"),
        (
            "EvaluateNone",
            TypeError,
            "evaluate must return a dict of metrics.*got NoneType for the 'validation'",
        ),
        (
            "MetricsLoss",
            ValueError,
            "compute_metrics returned the key 'loss', which would replace the model's",
        ),
        ("MetricsPrefixed", ValueError, "compute_metrics returned the key 'eval_acc'.*return 'acc'"),
        (
            "EvaluateNoPrefix",
            ValueError,
            "evaluate returned the key 'acc' for the 'validation' split.*'eval_'",
        ),
    ],
)
def test_a_hook_that_returns_the_wrong_thing_is_named_with_what_it_returned(tmp_path, task, error, message):
    """Were deep tracebacks (dict() of a list, None.to(device)), or results silently replaced: a 'loss' metric
    overwrote eval_loss, test metrics without a prefix overwrote the validation ones."""
    with pytest.raises(error, match=f"task 'toy': {message}"):
        run(_tiny(tmp_path / "out", task))


def test_the_default_evaluate_and_a_plain_compute_metrics_pass_the_checks(tmp_path):
    results = run(_tiny(tmp_path / "out", "MissingCardTask"))  # no card: the toy task as it is
    assert {"eval_loss", "eval_accuracy", "test_loss", "test_accuracy"} <= set(results)
    assert (
        json.loads((tmp_path / "out" / "all_results.json").read_text())["test_accuracy"]
        == results["test_accuracy"]
    )


class BatchEvalMetricsTask(ToyTask):
    def compute_metrics(self, args):
        hits = []

        def accuracy(
            pred, compute_result
        ):  # transformers' batch_eval_metrics form: a dict on the last batch only
            hits.extend((pred.predictions.argmax(-1) == pred.label_ids).tolist())
            if not compute_result:
                return None
            out = {"accuracy": sum(hits) / len(hits)}
            hits.clear()
            return out

        return accuracy


def test_batch_eval_metrics_returns_its_dict_on_the_last_batch_only(tmp_path):
    recipe = _tiny(
        tmp_path / "out", "BatchEvalMetricsTask", batch_eval_metrics=True, per_device_eval_batch_size=4
    )
    result = run(recipe)  # two evaluation batches per split: the first call returns None
    assert 0.0 <= result["eval_accuracy"] <= 1.0 and 0.0 <= result["test_accuracy"] <= 1.0


@pytest.mark.parametrize(
    "task, keys",
    [
        ("dna-motif-detection", ["span_decoding"]),
        ("abstractive-summarization", ["num_beams", "length_penalty", "rouge_tokenizer"]),
        ("dialogue-state-tracking", ["act_threshold", "tune_act_thresholds"]),
        ("dialogue-response-selection", ["n_negatives"]),
    ],
)
def test_evaluation_settings_of_each_task_may_change_on_resume(task, keys):
    from hf_sparse.training import get_task

    cls = get_task(task)
    fields = {f.name for f in dataclasses.fields(cls.Arguments)}
    assert set(keys) <= set(cls.resume_free_arguments)
    # every name a task frees is one of its arguments (a typo would free nothing)
    assert {k for k in cls.resume_free_arguments if "*" not in k} - {"num_validation", "num_test"} <= fields
