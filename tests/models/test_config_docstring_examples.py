"""The ``Example:`` of each task config's docstring runs as written (imports included)."""

import doctest

import pytest

from hf_sparse.tasks.dialogue.configuration_dialogue import LongformerDialogueConfig
from hf_sparse.tasks.motif.configuration_motif import LongformerMotifConfig
from hf_sparse.tasks.summarization.configuration_summarization import (
    LEDSummarizationConfig,
    LongformerExtractiveSummarizationConfig,
)


@pytest.mark.parametrize(
    "config_class",
    [
        LongformerDialogueConfig,
        LongformerMotifConfig,
        LEDSummarizationConfig,
        LongformerExtractiveSummarizationConfig,
    ],
    ids=lambda c: c.__name__,
)
def test_docstring_example_runs(config_class):
    examples = doctest.DocTestParser().get_examples(config_class.__doc__)
    assert examples, f"{config_class.__name__} has no >>> example"
    namespace = {}
    for example in examples:  # the source lines only: the closing ``` fence is no expected output
        exec(compile(example.source, f"<{config_class.__name__} example>", "exec"), namespace)
    assert isinstance(namespace["config"], config_class)
