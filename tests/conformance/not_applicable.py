"""The ONE list of transformers common tests that cannot apply to a model of this project, with the reason.

Keys: ``(test class, test name)``; the class may be ``"*"`` (every class in this folder) or a prefix ending in
``"*"`` (``"TestDecoder*"``). ``conftest.py`` skips each listed test with ``not applicable: <reason>``;
``HF_SPARSE_CHECK_NOT_APPLICABLE=1`` runs them instead as strict xfails, so an entry whose test has started to
pass is reported (and must be removed). A reason says why the test's assumption does not hold for the model,
never only that it fails. Failures caused by bugs are not listed here: they are fixed.
"""

from __future__ import annotations

NOT_APPLICABLE: dict[tuple[str, str], str] = {}


def reason_for(cls_name: str, test_name: str) -> str | None:
    """The reason ``test_name`` of ``cls_name`` cannot apply, or None."""
    base = test_name.split("[", 1)[0]
    for (cls_key, name), reason in NOT_APPLICABLE.items():
        if name not in (test_name, base):
            continue
        if (
            cls_key == "*"
            or cls_key == cls_name
            or (cls_key.endswith("*") and cls_name.startswith(cls_key[:-1]))
        ):
            return reason
    return None
