"""What the conformance test modules share: transformers' common tests (or a module-level skip), the name
tables they read, and a ConfigTester run as one pytest test per check."""

from __future__ import annotations

import contextlib
import unittest
from unittest import mock

import pytest
import torch

from .common_tests import Unavailable, load


def common_tests():
    """transformers' ``test_modeling_common`` / ``test_configuration_common`` modules, or skip the calling module."""
    try:
        return load()
    except Unavailable as e:
        pytest.skip(f"transformers' common model tests unavailable: {e}", allow_module_level=True)


def ids_tensor(shape, vocab_size, generator):
    return torch.randint(0, vocab_size, tuple(shape), generator=generator)


# transformers' common tests pick inputs and labels by looking the model class name up in the
# ``MODEL_FOR_*_MAPPING_NAMES`` tables of ``transformers.models.auto.modeling_auto`` (which list only
# transformers' own models; ``AutoModelFor*.register`` does not add to them). Each tester names the tables its
# classes belong in; the names are added for the duration of each test only.
@contextlib.contextmanager
def name_tables(entries: dict[str, dict[str, str]]):
    """``{table name: {model_type: class name}}`` added to ``transformers.models.auto.modeling_auto``."""
    from transformers.models.auto import modeling_auto

    with contextlib.ExitStack() as stack:
        for table, names in entries.items():
            stack.enter_context(mock.patch.dict(getattr(modeling_auto, table), names))
        yield


class NameTablesMixin(unittest.TestCase):
    """Adds the tester's ``name_table_entries`` to transformers' name tables around every test."""

    name_table_entries: dict[str, dict[str, str]] = {}

    def setUp(self):
        super().setUp()
        ctx = name_tables(self.name_table_entries)
        ctx.__enter__()
        self.addCleanup(ctx.__exit__, None, None, None)


def add_config_tests(cls, config_tester_class, make_config_tester):
    """One ``test_config_<check>`` on ``cls`` (a unittest.TestCase) per check ``config_tester_class`` has (its
    ``create_and_test_config_*`` and ``check_config_*`` methods, which ``run_common_tests`` runs together);
    ``make_config_tester(self)`` returns the ConfigTester."""
    checks = [n for n in dir(config_tester_class) if n.startswith(("create_and_test_config", "check_config"))]
    for check in checks:

        def test(self, check=check):
            getattr(make_config_tester(self), check)()

        name = "test_config_" + check.removeprefix("create_and_test_config_").removeprefix("check_config_")
        test.__name__ = name
        setattr(cls, name, test)
    return cls
