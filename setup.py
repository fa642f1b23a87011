"""Build script for sit-keras.

The repository keeps ``agents/`` and ``export/`` as top-level folders, but they
are installed as subpackages of ``sit_keras`` (``sit_keras.agents``,
``sit_keras.export``): top-level ``agents`` / ``export`` import names would
collide with other distributions.
"""

from __future__ import annotations

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent

# Installed name -> folder in this repository. Subfolders with an __init__.py
# (e.g. agents/foo/) are found below and mapped to sit_keras.agents.foo.
PACKAGE_ROOTS = {
    "sit_keras": "sit_keras",
    "sit_keras.agents": "agents",
    "sit_keras.export": "export",
    "sit_keras.commands": "commands",
}


def read_version() -> str:
    """Reads ``__version__ = "..."`` from sit_keras/__init__.py without importing it."""
    text = (HERE / "sit_keras" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.MULTILINE)
    if match is None:
        raise RuntimeError("No __version__ = '...' line in sit_keras/__init__.py")
    return match.group(1)


def read_requirements(name: str) -> list[str]:
    """Requirement lines of ``name``, without comments, blank lines or pip options."""
    requirements = []
    for line in (HERE / name).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            requirements.append(line)
    return requirements


def read_readme() -> str:
    readme = HERE / "README.md"
    return readme.read_text(encoding="utf-8") if readme.exists() else ""


def packages_and_dirs() -> tuple[list[str], dict[str, str]]:
    """Every package under PACKAGE_ROOTS, with an explicit folder for each."""
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for name, folder in PACKAGE_ROOTS.items():
        packages.append(name)
        package_dir[name] = folder
        for sub in find_packages(where=folder):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return packages, package_dir


PACKAGES, PACKAGE_DIR = packages_and_dirs()

setup(
    name="sit-keras",
    version=read_version(),
    description="Symmetry-aware attention (SiT) for reinforcement learning, in TensorFlow / Keras 2.",
    long_description=read_readme(),
    long_description_content_type="text/markdown",
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    python_requires=">=3.10,<3.12",
    install_requires=read_requirements("requirements.txt"),
    extras_require={"dev": read_requirements("requirements-dev.txt")},
    entry_points={
        "console_scripts": [
            "sit-demo = sit_keras.commands.entry_points:sit_demo",
            "sit-check-encoders = sit_keras.commands.entry_points:sit_check_encoders",
            "sit-train = sit_keras.commands.entry_points:sit_train",
            "sit-eval = sit_keras.commands.entry_points:sit_eval",
            "sit-train-supervised = sit_keras.commands.entry_points:sit_train_supervised",
            "sit-export = sit_keras.commands.entry_points:sit_export",
            "sit-distill = sit_keras.commands.entry_points:sit_distill",
        ]
    },
    # configs/*.gin (top-level folder) is not packaged yet.
    include_package_data=False,
    zip_safe=False,
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
