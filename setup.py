"""Packaging beyond what pyproject.toml can say: the model card templates live in the top-level
``model_cards/`` folder and ship inside the package as ``hf_sparse.model_cards`` (editable and wheel
installs alike), so there is one copy to edit, where the repository layout puts it."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["hf_sparse", "hf_sparse.*"]), "hf_sparse.model_cards"],
    package_dir={"hf_sparse.model_cards": "model_cards"},
)
