"""Build ``RESULTS.md`` (passed / failed / skipped per test class) from the JUnit XML of a conformance run:

    .venv/bin/python -m pytest -q -n auto -m "not gpu and not hub" tests/conformance --junitxml=conformance.xml
    .venv/bin/python -m tests.conformance.results_table "<command, date, host>" conformance.xml [rerun.xml ...] \
        > tests/conformance/RESULTS.md

A later XML (a rerun of some classes after a fix) replaces the earlier results of the tests it holds.

Skips are split into this project's not-applicable list (``not_applicable.py``, reasons below the table) and
transformers' own skips (the test decides it does not apply: no accelerator, no Flash Attention, not a composite
model, ...), whose most common reasons are listed too.
"""

from __future__ import annotations

import collections
import sys
import xml.etree.ElementTree as ET

import transformers

from .not_applicable import NOT_APPLICABLE, OPEN_DEFECTS

OUTCOMES = (
    "passed",
    "failed",
    "not applicable",
    "skipped by transformers",
    "xfailed (open defect)",
    "xpassed",
)


def outcome(case: ET.Element) -> tuple[str, str]:
    """``(outcome, message)`` of one ``<testcase>``."""
    for child in case:
        if child.tag in ("failure", "error"):
            return "failed", child.get("message", "")
        if child.tag == "skipped":
            message = child.get("message", "")
            if child.get("type") == "pytest.xfail":
                return "xfailed (open defect)", message
            if message.startswith("not applicable:"):
                return "not applicable", message
            return "skipped by transformers", message
    return "passed", ""


def table(xml_paths: list[str]) -> tuple[dict[str, collections.Counter], collections.Counter]:
    results: dict[tuple[str, str], tuple[str, str]] = {}  # (class, test) -> (outcome, message); later wins
    for path in xml_paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            results[case.get("classname", "").rsplit(".", 1)[-1], case.get("name", "")] = outcome(case)
    per_class: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    transformers_skips: collections.Counter = collections.Counter()
    for (cls, _), (kind, message) in results.items():
        per_class[cls][kind] += 1
        if kind == "skipped by transformers":
            transformers_skips[message.split("\n", 1)[0][:110]] += 1
    return per_class, transformers_skips


def render(how: str, xml_paths: list[str]) -> str:
    per_class, skips = table(xml_paths)
    total = sum(per_class.values(), collections.Counter())
    lines = [
        "# transformers' common model tests over hf-sparse's models",
        "",
        f"transformers {transformers.__version__}; {how}.",
        "Tests of `ModelTesterMixin` and `ConfigTester` (transformers' sdist, cached by `make conformance-cache`); "
        "one row per test class (`tests/conformance/`), counting test functions (a parametrized row counts "
        "once; a test that loops over the class's model heads in subtests counts once, as skipped by "
        "transformers when its own check skipped some head). Regenerate with "
        "`python -m tests.conformance.results_table`.",
        "",
        "| class | " + " | ".join(OUTCOMES) + " |",
        "|---|" + "---:|" * len(OUTCOMES),
    ]
    for cls in sorted(per_class):
        lines.append(f"| {cls} | " + " | ".join(str(per_class[cls][k]) for k in OUTCOMES) + " |")
    lines.append("| **total** | " + " | ".join(f"**{total[k]}**" for k in OUTCOMES) + " |")
    lines += ["", "## Not applicable (`not_applicable.py`)", ""]
    for (cls, name), reason in NOT_APPLICABLE.items():
        lines.append(f"- `{cls}` `{name}`: {reason}")
    lines += ["", "## Open defects (strict xfail)", ""]
    lines += [f"- `{c}` `{n}`: {r}" for (c, n), r in OPEN_DEFECTS.items()] or ["None."]
    lines += [
        "",
        "## Most common skips decided by transformers' tests themselves",
        "",
        "| reason | tests |",
        "|---|---:|",
    ]
    for message, n in skips.most_common(25):
        lines.append(f"| {message.replace('|', '/')} | {n} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(
            "usage: python -m tests.conformance.results_table 'how it was run' JUNIT_XML [RERUN_XML ...]"
        )
    sys.stdout.write(render(sys.argv[1], sys.argv[2:]))
