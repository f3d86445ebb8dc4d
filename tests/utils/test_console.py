import sys

from tqdm import tqdm

from hf_sparse.utils.console import print_error


def test_the_error_line_starts_a_line_of_its_own_after_open_progress_bars(capsys):
    """An error raised during an evaluation leaves the Trainer's bars open (the evaluation bar under the training
    bar); ``error:`` must still start a line, for a reader and for ``grep '^error:'`` in a CI log."""
    outer = tqdm(total=4, file=sys.stderr)
    inner = tqdm(total=2, file=sys.stderr, position=1, leave=False)
    outer.update(2)
    inner.update(1)
    print_error("metric_for_best_model='bogus' is not a metric")
    err = capsys.readouterr().err
    assert "error: metric_for_best_model='bogus' is not a metric" in err.split("\n")
    assert not tqdm._instances
