"""A method package as a lab would publish it: the example adapter (tests/helpers/example_adapter.py)
as module ``cosine_plugin.model``, its torch-free declaration ``cosine_plugin.spec`` and a
pyproject registering it under the entry-point group ``protobench.methods`` (the "Adding a
method" guide shows the same files)."""
from __future__ import annotations

import shutil
from pathlib import Path

HELPERS = Path(__file__).resolve().parent
DISTRIBUTION = "protobench-cosine-plugin"
VERSION = "0.1.0"
METHOD = "cosine_plugin"

PYPROJECT = f"""\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{DISTRIBUTION}"
version = "{VERSION}"
dependencies = ["protobench"]

[project.entry-points."protobench.methods"]
{METHOD} = "cosine_plugin.spec:DECLARATION"

[tool.setuptools]
packages = ["cosine_plugin"]
"""

SPEC = f'''"""Cosine prototypes: what the method declares, read without torch."""
from methods.declaration import MethodDeclaration, count, positive

DECLARATION = MethodDeclaration(
    name="{METHOD}",
    display_name="Cosine prototypes",
    adapter="cosine_plugin.model:CosinePrototypes",
    hyperparameters={{"epochs": count(10), "lr": positive(0.1), "temperature": positive(0.1)}},
    references=("docs/guides/adding-a-method.md",),
)
'''


def write_plugin_package(root: Path) -> Path:
    """The package's source tree under ``root`` (pip installs it from there)."""
    package = root / "cosine_plugin"
    package.mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text('"""Cosine prototypes as an installed protobench method."""\n')
    shutil.copyfile(HELPERS / "example_adapter.py", package / "model.py")
    (package / "spec.py").write_text(SPEC)
    return root
