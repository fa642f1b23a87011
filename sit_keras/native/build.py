"""Compiles the native kernels for this host: ``python -m sit_keras.native.build``.

``make install`` runs it. The library is built with ``-march=native`` against
the installed TensorFlow, so it is tied to both: ``sit_keras.native.library``
loads it only on a host with the same CPU flags (``HOST_FILE`` records them)
and refuses it, with a warning, elsewhere. Without it every layer keeps its
builtin TensorFlow ops.

    python -m sit_keras.native.build            # build (again)
    python -m sit_keras.native.build --check    # say whether the library is built for this host
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sit_keras.native.cpu import NO_VECTOR_UNITS, cpu_flags, vector_lanes

# The kernels' sources, compiled into one library (with kernels.h, what they share).
SOURCES = tuple(sorted(Path(__file__).parent.glob("*.cc")))
# The flags that decide whether the library runs here: the CPU's and TensorFlow's.
HOST_FILE = Path(__file__).with_name("_kernels.host.json")
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-shared", "-fPIC")
# TensorFlow's headers use deprecated absl types; GCC notes the vector ABI of the lane vectors.
QUIET = ("-Wno-deprecated-declarations", "-Wno-psabi")


def host() -> dict[str, object]:
    """What the library is built for: the CPU's instruction-set flags and TensorFlow's version."""
    import tensorflow as tf

    return {"cpu_flags": cpu_flags(), "tensorflow": tf.__version__}


def compile_command(output: Path) -> list[str]:
    import tensorflow as tf

    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise FileNotFoundError("no C++ compiler (g++) on PATH: install g++ (Debian: apt-get install g++)")
    sources = [str(source) for source in SOURCES]
    return [compiler, *FLAGS, *QUIET, *sources, "-o", str(output), *tf.sysconfig.get_compile_flags(),
            *tf.sysconfig.get_link_flags()]  # fmt: skip


def build() -> Path:
    """Compiles ``SOURCES`` into ``LIBRARY`` and records the host; returns the library's path."""
    from sit_keras.native import LIBRARY

    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / LIBRARY.name
        result = subprocess.run(compile_command(output), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            names = ", ".join(source.name for source in SOURCES)
            raise RuntimeError(f"g++ failed to compile {names}:\n{result.stderr.strip()}")
        shutil.move(str(output), LIBRARY)  # whole, so a failed build leaves no half-written library
    HOST_FILE.write_text(json.dumps(host(), indent=1) + "\n")
    return LIBRARY


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="only say whether the library is built for this host"
    )
    args = parser.parse_args(argv)
    from sit_keras import native

    if args.check:
        problem = native.load_problem()
        print(f"native kernels: {problem or 'built for this host and loaded'} ({native.LIBRARY})")
        return 0 if problem is None else 1
    if vector_lanes(host()["cpu_flags"]) is None:
        print(f"sit_keras.native.build: {NO_VECTOR_UNITS}; nothing built, the layers use TensorFlow's ops.")
        return 0
    try:
        path = build()
    except (FileNotFoundError, RuntimeError) as error:
        print(f"sit_keras.native.build: {error}", file=sys.stderr)
        return 1
    print(f"Built {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
