"""Compiles the native kernels for this host: ``python -m sit_keras.native.build``.

``make install`` runs it. The library is built with ``-march=native`` against
the installed TensorFlow, so it is tied to both: ``sit_keras.native.library``
loads it only on a host with the same CPU flags (``HOST_FILE`` records them)
and refuses it, with a warning, elsewhere. Without it every layer keeps its
builtin TensorFlow ops.

Where LLVM's headers are installed (Debian: ``apt-get install llvm-19-dev``;
XLA's headers include them, and TensorFlow's wheel does not ship them) a
second library is built beside it, ``XLA_LIBRARY`` (``xla/xla_kernels.cc``):
XLA kernels for some of the ops, so that functions compiled with
``jit_compile=True`` run them too. Without the headers it is not built and
XLA keeps the builtin ops.

    python -m sit_keras.native.build            # build (again)
    python -m sit_keras.native.build --check    # say whether the library is built for this host
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import argparse
import glob
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sit_keras.native.cpu import NO_VECTOR_UNITS, cpu_flags, vector_lanes

# The kernels' sources, compiled into one library (with kernels.h, what they share), and the sources of
# the XLA library (with the headers of the ops' computations they share with them).
SOURCES = tuple(sorted(Path(__file__).parent.glob("*.cc")))
XLA_SOURCES = tuple(sorted(Path(__file__).parent.glob("xla/*.cc")))
# Where Debian's llvm-N-dev packages put LLVM's headers (the newest is taken).
LLVM_HEADERS = "/usr/lib/llvm-*/include"
# The flags that decide whether the library runs here: the CPU's and TensorFlow's.
HOST_FILE = Path(__file__).with_name("_kernels.host.json")
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-shared", "-fPIC")
# TensorFlow's headers use deprecated absl types; GCC notes the vector ABI of the lane vectors.
QUIET = ("-Wno-deprecated-declarations", "-Wno-psabi")


NO_LLVM_HEADERS = (
    f"no LLVM headers in {LLVM_HEADERS}, which XLA's headers include (Debian: apt-get install llvm-19-dev); "
    "functions compiled with jit_compile=True keep TensorFlow's ops"
)


def host() -> dict[str, object]:
    """What the library is built for: the CPU's instruction-set flags and TensorFlow's version."""
    import tensorflow as tf

    return {"cpu_flags": cpu_flags(), "tensorflow": tf.__version__}


def compile_command(
    output: Path, sources: tuple[Path, ...] = SOURCES, extra: tuple[str, ...] = ()
) -> list[str]:
    import tensorflow as tf

    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise FileNotFoundError("no C++ compiler (g++) on PATH: install g++ (Debian: apt-get install g++)")
    return [compiler, *FLAGS, *QUIET, *map(str, sources), "-o", str(output),
            *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags(), *extra]  # fmt: skip


def llvm_headers() -> Path | None:
    """The newest LLVM header folder installed (``LLVM_HEADERS``), or ``None``."""
    folders = [Path(name) for name in glob.glob(LLVM_HEADERS) if Path(name, "llvm/ADT/ArrayRef.h").exists()]
    return max(folders, key=lambda folder: int(folder.parent.name.split("-")[-1]), default=None)


def xla_compile_command(output: Path, headers: Path) -> list[str]:
    """The XLA library's command: LLVM's headers after TensorFlow's; libtensorflow_cc for XLA's symbols."""
    import tensorflow as tf

    linked = ("-L" + str(Path(tf.__file__).parent), "-l:libtensorflow_cc.so.2")
    return compile_command(output, XLA_SOURCES, ("-idirafter", str(headers), *linked))


def _compile(command: list[str], output: Path, target: Path, sources: tuple[Path, ...]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        names = ", ".join(source.name for source in sources)
        raise RuntimeError(f"g++ failed to compile {names}:\n{result.stderr.strip()}")
    shutil.move(str(output), target)  # whole, so a failed build leaves no half-written library


def build() -> tuple[Path, str | None]:
    """Compiles ``SOURCES`` into ``LIBRARY``, then ``XLA_SOURCES`` into ``XLA_LIBRARY`` where LLVM's
    headers are installed, and records the host. Returns the library's path and why the XLA library was
    not built (``None`` when it was): without it only XLA keeps the builtin ops, so that is no failure."""
    from sit_keras.native import LIBRARY, XLA_LIBRARY

    XLA_LIBRARY.unlink(missing_ok=True)  # never one built for another library
    xla_problem = NO_LLVM_HEADERS
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / LIBRARY.name
        _compile(compile_command(output), output, LIBRARY, SOURCES)
        headers = llvm_headers()
        if headers is not None:
            output = Path(folder) / XLA_LIBRARY.name
            try:
                _compile(xla_compile_command(output, headers), output, XLA_LIBRARY, XLA_SOURCES)
                xla_problem = None
            except RuntimeError as error:
                xla_problem = str(error)
    HOST_FILE.write_text(json.dumps(host(), indent=1) + "\n")
    return LIBRARY, xla_problem


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
        xla_problem = native.xla_load_problem()
        print(f"their XLA kernels: {xla_problem or 'built and loaded'} ({native.XLA_LIBRARY})")
        missing_xla = xla_problem is not None and llvm_headers() is not None
        return 0 if problem is None and not missing_xla else 1
    if vector_lanes(host()["cpu_flags"]) is None:
        print(f"sit_keras.native.build: {NO_VECTOR_UNITS}; nothing built, the layers use TensorFlow's ops.")
        return 0
    try:
        path, xla_problem = build()
    except (FileNotFoundError, RuntimeError) as error:
        print(f"sit_keras.native.build: {error}", file=sys.stderr)
        return 1
    print(f"Built {path}")
    print(
        f"Built {native.XLA_LIBRARY}"
        if xla_problem is None
        else f"Not built: {native.XLA_LIBRARY}: {xla_problem}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
