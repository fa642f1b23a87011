"""The SiT family's train steps on this tree's native kernels and on another revision's, in one run.

A change to a native kernel often moves the train step by a few percent: less than a noisy host moves
the same step between processes (docs/speed.md, "The projection's tile" and "The targets at 3b7b5c2").
Here both builds run in one process, in interleaved rounds. The script compiles the kernels of
``--base`` (a git revision of this repository) with their ops renamed (``SitWindowAttention`` ->
``SitBaseWindowAttention``), loads them beside this tree's, and traces each model's float32 train step
(graph mode, forward + backward + Adam) twice: with this tree's ops and with the base's behind this
tree's Python wrappers, which must therefore call the base's ops with the same inputs and attributes.
It prints each step's median and this tree's over the base's (< 1: this tree is faster). Graph mode
only: the XLA kernels are this tree's alone. ``--ops`` adds cases of ``benchmarks/native_ops.py`` (an op's
forward + backward at the Procgen SiT's shapes, ``--batch`` images) to the same rounds, traced on each build's
ops the same way: a kernel's change alone, without the rest of the step's spread, and whether both builds give
the same output bits (``same_bits``).

    python benchmarks/native_ab.py --base 2ff1649 [--models sit,siet] [--repeats 21] [--out runs/ab.json]
    python benchmarks/native_ab.py --base d587e86 --models "" --ops global_grid,class_token_values
    python benchmarks/native_ab.py --base HEAD --quick       # a smoke run: the build, then seconds
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import contextlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import tensorflow as tf

from sit_keras import native
from sit_keras.benchmarking import (
    SentenceParser,
    UsageError,
    check_out_file,
    command_line,
    current_commit,
    environment,
    interleaved_medians,
    parse_or_say_why,
    write_report,
)
from sit_keras.native.build import compile_command

sys.path.insert(0, str(Path(__file__).resolve().parent))
import native_ops  # noqa: E402
import projection_gradients  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
NATIVE = "sit_keras/native"
BASE_PREFIX = "SitBase"  # the base's op names: Sit... -> SitBase...
BUILDS = ("base", "this")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPOSITORY, capture_output=True, text=True, check=False)


def resolve(revision: str) -> str:
    """``revision``'s commit hash; a ``UsageError`` where this tree's repository has no such commit."""
    result = _git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if result.returncode != 0:
        raise UsageError(f"--base {revision} is not a commit of the repository at {REPOSITORY}.")
    return result.stdout.strip()


def build_base(commit: str, folder: Path) -> ModuleType:
    """The native library of ``commit`` (its ``sit_keras/native/*.cc`` and ``*.h``, not its XLA kernels),
    with every op renamed ``Sit...`` -> ``SitBase...``, compiled into ``folder`` and loaded."""
    names = _git("ls-tree", "--name-only", f"{commit}:{NATIVE}").stdout.split()
    sources = []
    for name in names:
        if not name.endswith((".cc", ".h")):
            continue
        text = _git("show", f"{commit}:{NATIVE}/{name}").stdout
        if name.endswith(".cc"):  # REGISTER_OP("Sit...") and Name("Sit...")
            text = text.replace('("Sit', f'("{BASE_PREFIX}')
            sources.append(folder / name)
        (folder / name).write_text(text)
    if not sources:
        raise UsageError(f"--base {commit[:12]} has no native kernels ({NATIVE}/*.cc).")
    output = folder / "_base_kernels.so"
    result = subprocess.run(
        compile_command(output, tuple(sources)), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"g++ failed on the kernels of {commit[:12]}:\n{result.stderr.strip()}")
    return tf.load_op_library(str(output))


def _python_name(op: str) -> str:
    """TensorFlow's Python name of an op: ``SitBaseWindowAttention`` -> ``sit_base_window_attention``."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in op).lstrip("_")


@contextmanager
def base_ops(base: ModuleType) -> Iterator[int]:
    """This tree's library module with each op the base also has replaced by the base's, for what is traced
    inside; yields how many were replaced."""
    ops = native.library()
    prefix = _python_name(BASE_PREFIX) + "_"
    swapped = {}
    for name in dir(base):
        if name.startswith(prefix) and hasattr(ops, "sit_" + name[len(prefix) :]):
            ours = "sit_" + name[len(prefix) :]
            swapped[ours] = getattr(ops, ours)
            setattr(ops, ours, getattr(base, name))
    try:
        yield len(swapped)
    finally:
        for name, op in swapped.items():
            setattr(ops, name, op)


def traced_op_types(concrete: Any) -> set[str]:
    """The op types of a concrete function's graph and of every function it calls."""
    graph = concrete.graph.as_graph_def()
    return {node.op for node in graph.node} | {
        node.op for function in graph.library.function for node in function.node_def
    }


def train_steps(
    model: str, image_size: int, batch: int, base: ModuleType
) -> tuple[dict[str, Any], tf.Tensor, int]:
    """``model``'s train step traced on each build's ops (``BUILDS``), its batch, and how many of the base's
    op types the base's step runs."""
    ways = {"base": lambda: base_ops(base), "this": contextlib.nullcontext}
    steps, images = projection_gradients.train_steps(model, image_size, batch, ways=ways)
    base_op_count = sum(
        op.startswith(BASE_PREFIX) for op in traced_op_types(steps["base"].get_concrete_function(images))
    )
    return steps, images, base_op_count


def op_cases(batch: int, cases: list[str], base: ModuleType) -> tuple[dict[str, Any], dict[str, dict]]:
    """``native_ops.py``'s forward + backward of each case traced on each build's ops: ``{(case, build):
    function}``, and per case how many of the base's op types its base function runs and whether both builds'
    outputs (the same inputs) are the same bits."""
    functions, facts = {}, {}
    for build, ways in (("base", lambda: base_ops(base)), ("this", contextlib.nullcontext)):
        with ways():  # the ops are chosen while tracing, so trace here
            for case in cases:
                function = native_ops.case_functions(batch, only=[case])[case, "backward"]
                concrete = function.get_concrete_function()
                functions[case, build] = function
                if build == "base":
                    facts[case] = {
                        "base_op_types": sum(op.startswith(BASE_PREFIX) for op in traced_op_types(concrete))
                    }
    for case in cases:
        outputs = [
            [t.numpy().tobytes() for t in tf.nest.flatten(functions[case, build]())] for build in BUILDS
        ]
        facts[case]["same_bits"] = outputs[0] == outputs[1]
    return functions, facts


def measure(
    models: list[str], image_size: int, batch: int, repeats: int, base: ModuleType, ops: Sequence[str] = ()
) -> dict[str, dict[str, float]]:
    """Per model (and per ``native_ops.py`` case in ``ops``), each build's median time (ms) of a train step
    (of the case's forward + backward), this tree's over the base's, and the base's op types it ran."""
    functions: dict[tuple[str, str], Callable[[], Any]] = {}
    base_op_types = {}
    for model in models:
        steps, images, base_op_types[model] = train_steps(model, image_size, batch, base)
        for build, step in steps.items():
            functions[model, build] = lambda step=step, images=images: step(images)
    same_bits = {}
    if ops:
        case_functions, facts = op_cases(batch, list(ops), base)
        functions.update(case_functions)
        for case, fact in facts.items():
            base_op_types[case], same_bits[case] = fact["base_op_types"], fact["same_bits"]
    medians = interleaved_medians(functions, repeats)
    results = {}
    for name in (*models, *ops):
        base_ms, this_ms = (1000 * medians[name, build] for build in BUILDS)
        results[name] = {
            "base_ms": base_ms,
            "this_ms": this_ms,
            "this_over_base": this_ms / base_ms,
            "base_op_types_in_step": base_op_types[name],
        }
        if name in same_bits:
            results[name]["same_bits"] = same_bits[name]
    return results


def check_ops(ops: str) -> list[str]:
    """``--ops``: names of ``native_ops.py``'s cases that run in a graph (a ``UsageError`` for any other)."""
    names = [name.strip() for name in ops.split(",") if name.strip()]
    graph_cases = native_ops.CASES
    for name in names:
        if name not in graph_cases:
            raise UsageError(
                f"--ops: {name} is not one of native_ops.py's graph-mode cases ({', '.join(graph_cases)})."
            )
    return names


def parse_args(argv: Sequence[str] | None):
    parser = SentenceParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base", required=True, help="the git revision whose kernels this tree's are timed against"
    )
    projection_gradients.add_step_arguments(parser, repeats=21)
    parser.add_argument(
        "--ops", default="", help="native_ops.py cases timed too, comma-separated (e.g. global_grid)"
    )
    args = parser.parse_args(argv)
    args.ops = check_ops(args.ops)
    if not args.ops and not args.models.strip(", "):
        raise UsageError("--models and --ops name nothing to time.")
    projection_gradients.check_step_arguments(args)
    args.base_commit = resolve(args.base)
    check_out_file(args.out)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_or_say_why(parse_args, argv)
    if args is None:
        return 2
    settings = projection_gradients.step_settings(args)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        print(f"Building the kernels of {args.base_commit[:12]} (a few minutes)...", flush=True)
        try:
            base = build_base(args.base_commit, Path(folder))
        except RuntimeError as error:  # the base's sources do not compile here
            print(f"native_ab.py: {str(error).splitlines()[0].rstrip(':')}.", file=sys.stderr)
            return 1
        try:
            results = measure(
                args.models, settings["image_size"], settings["batch"], settings["repeats"], base, args.ops
            )
        except (TypeError, ValueError) as error:  # tracing: an op whose inputs or attributes changed since
            message = str(error).strip().splitlines()[-1]
            print(
                f"native_ab.py: the ops of {args.base_commit[:12]} do not take this tree's inputs "
                f"({message}).",
                file=sys.stderr,
            )
            return 1
    for name, r in results.items():
        what = "forward + backward" if name in args.ops else "train step"
        bits = {True: "; the same output bits", False: "; the outputs differ", None: ""}[r.get("same_bits")]
        print(
            f"{name} {what}: the base's kernels {r['base_ms']:7.1f} ms, this tree's "
            f"{r['this_ms']:7.1f} ms, this / base {r['this_over_base']:.3f} "
            f"({r['base_op_types_in_step']} of the base's op types ran{bits})"
        )
    report = {
        "what": "SiT-family float32 train steps (graph) and native_ops.py cases (forward + backward) on this "
        "tree's native kernels and on the base revision's, the same Python, interleaved rounds, medians",
        "command": command_line("native_ab.py", argv),
        "commit": current_commit(),
        "base_commit": args.base_commit,
        "settings": {"models": args.models, "ops": args.ops, **settings, "quick": args.quick},
        "environment": environment(),
        "results": results,
        "wall_time_s": time.perf_counter() - start,
    }
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
