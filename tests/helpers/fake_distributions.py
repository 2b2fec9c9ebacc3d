"""Installed distributions without pip: a ``NAME-VERSION.dist-info`` folder (METADATA and
entry_points.txt, the files ``importlib.metadata`` reads) beside the package's source, in a folder
that goes on ``sys.path`` (PYTHONPATH of a subprocess). A distribution is found there exactly as
one pip installed into site-packages, so the plugin tests need no build and no network."""
from __future__ import annotations

from pathlib import Path

#: a method declaration module in the shape of tests/helpers/plugin_package.py's (no torch)
DECLARATION = '''"""{display}: what the method declares, read without torch."""
{prelude}
from methods.declaration import MethodDeclaration, count, positive

DECLARATION = MethodDeclaration(
    name="{name}",
    display_name="{display}",
    adapter="{package}.model:CosinePrototypes",
    hyperparameters={{"epochs": count(10), "lr": positive(0.1), "temperature": positive(0.1)}},
)
'''
HELPERS = Path(__file__).resolve().parent


def install_fake_distribution(site: Path, distribution: str, version: str, package: str,
                              methods: dict[str, str], *, prelude: str = "", spec_attr: str = "DECLARATION") -> Path:
    """A distribution ``distribution`` ``version`` under ``site`` whose package ``package`` declares
    each of ``methods`` (entry-point name → display name) in ``package/spec_<name>.py``, its adapter
    the example adapter (tests/helpers/example_adapter.py) as ``package.model``. ``prelude`` goes
    at the top of every declaration module (a marker, a raise); ``spec_attr``: the attribute the
    entry points name (a typo makes them fail to load). Returns ``site``."""
    folder = site / package
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text(f'"""{distribution}."""\n')
    (folder / "model.py").write_text((HELPERS / "example_adapter.py").read_text())
    points = []
    for name, display in methods.items():
        (folder / f"spec_{name}.py").write_text(DECLARATION.format(name=name, display=display, package=package,
                                                                   prelude=prelude))
        points.append(f"{name} = {package}.spec_{name}:{spec_attr}")
    info = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[protobench.methods]\n" + "\n".join(points) + "\n")
    (info / "top_level.txt").write_text(package + "\n")
    return site
