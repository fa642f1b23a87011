"""Test setup shared by every test module.

``sit_keras`` is imported here, before any test module imports TensorFlow, so
that Keras 2 (``tf_keras``) is selected behind ``tf.keras``.

``--symmetry-report FILE`` appends every mixed-precision symmetry check made
with ``sit_keras.testing.ErrorModel`` to ``FILE`` (JSON lines: test, transform,
error, tolerance) and prints the largest error / tolerance ratio per test at the
end (``make test-precision``, docs/testing.md).

``--resource-report FILE`` appends one JSON line per test: its wall time, the CPU
time of its process and of the processes it started, the seconds its process spent
in Python's garbage collections, and the process's peak RSS (docs/testing.md); a collection
that lasts more than 10 s dumps every thread's stack to ``FILE.<worker>.stacks``.
"""

import contextlib
import faulthandler
import gc
import json
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

import sit_keras  # noqa: E402, F401  (selects Keras 2 before TensorFlow is imported)
from sit_keras import quiet, testing  # noqa: E402

# The trainers' "auto" settings measure the model once per host and cache the answer
# (sit_keras.measured_choice): the tests share one cache per test run (the xdist workers inherit
# the controller's variable), outside the user's home, removed at the end (pytest_sessionfinish).
if "SIT_KERAS_CACHE_DIR" not in os.environ:
    os.environ["SIT_KERAS_CACHE_DIR"] = tempfile.mkdtemp(prefix="sit_keras_test_cache_")
    _OWN_CACHE_DIR = os.environ["SIT_KERAS_CACHE_DIR"]
else:
    _OWN_CACHE_DIR = None

# ... but the tests of other things must not depend on this host's timings (a tiny model's XLA step is
# faster on one host and slower on another): "auto" keeps its default there. The tests of the
# measurement itself unset the variable (tests/test_measured_choice.py, tests/test_jit_compile.py).
os.environ.setdefault("SIT_KERAS_NO_MEASURE", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One TensorFlow thread per xdist worker (make test runs one worker per core): two workers with
    # one thread each keep both cores busy without the contention of 2 x 2 threads. The variables
    # reach the processes the tests start (CLI runs, exports, serving requests) as well.
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    import tensorflow as tf  # noqa: E402

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

# gym imported here with its banner filtered, as every entry point does (sit_keras.quiet): a test that
# reads stderr must not see the banner that gym prints on its first import, wherever that happens.
with quiet.filtered_stderr(), contextlib.suppress(ImportError):
    import gym  # noqa: E402, F401

# Few examples and no deadline: TensorFlow's first calls trace graphs and are slow.
settings.register_profile("ci", deadline=None, max_examples=10)
settings.load_profile("ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--symmetry-report",
        default=None,
        help="append the mixed-precision symmetry checks (error, tolerance) to this JSON-lines file",
    )
    parser.addoption(
        "--resource-report",
        default=None,
        help="append each test's wall, CPU, children's CPU and garbage-collection seconds to this file",
    )


_GC_SECONDS = [0.0, 0.0]  # [time the running collection started, seconds spent in collections so far]
# A collection that lasts longer than this dumps every thread's stack (what it waits for) beside the report.
_SLOW_COLLECTION_S = 10
_STACKS: list = []  # the open file of the stack dumps


def _time_collections(phase: str, info: dict) -> None:
    if phase == "start":
        _GC_SECONDS[0] = time.perf_counter()
        faulthandler.dump_traceback_later(_SLOW_COLLECTION_S, file=_STACKS[0])
    else:
        faulthandler.cancel_dump_traceback_later()
        _GC_SECONDS[1] += time.perf_counter() - _GC_SECONDS[0]


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--resource-report")
    if path:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _STACKS.append(open(f"{path}.{worker}.stacks", "a"))  # noqa: SIM115 (open for the whole session)
        gc.callbacks.append(_time_collections)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _STACKS:
        gc.callbacks.remove(_time_collections)
        _STACKS.pop().close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """``--resource-report``: where a test's wall time went (docs/testing.md)."""
    path = item.config.getoption("--resource-report")
    if not path:
        yield
        return

    def cpu_seconds(who: int) -> float:
        usage = resource.getrusage(who)
        return usage.ru_utime + usage.ru_stime

    start, collections = time.time(), _GC_SECONDS[1]
    own, children = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
    yield
    record = {
        "test": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "start": start,
        "wall_s": time.time() - start,
        "cpu_s": cpu_seconds(resource.RUSAGE_SELF) - own,
        "children_cpu_s": cpu_seconds(resource.RUSAGE_CHILDREN) - children,
        "gc_s": _GC_SECONDS[1] - collections,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    with open(path, "a") as report:  # one short write per test: whole lines under xdist
        report.write(json.dumps(record) + "\n")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "mixed_float16" in item.nodeid:
            item.add_marker(pytest.mark.float16)
        module = _module_sharing_a_fixture(item)
        if module:
            item.add_marker(pytest.mark.xdist_group(module))


def _module_sharing_a_fixture(item: pytest.Item) -> str | None:
    """The test's module if the test uses a module-scoped fixture that the module defines.

    ``make test`` runs ``--dist loadgroup``: a module's tests that share such a fixture (a trained
    policy, exports, serving processes) run on one worker, one after the other. Spread over both
    workers, or interleaved with other modules' tests on one, pytest would tear the fixture down and
    build it again (the serving fixture three times in one run, 100 s).
    """
    module = item.nodeid.split("::")[0]
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name in getattr(item, "fixturenames", ()):
        for definition in definitions.get(name, ()):
            if definition.scope == "module" and definition.baseid == module:
                return module
    return None


@pytest.fixture(autouse=True)
def _record_symmetry_checks(request: pytest.FixtureRequest) -> Iterator[None]:
    testing.SYMMETRY_RECORDS.clear()
    yield
    path = request.config.getoption("--symmetry-report")
    if path and testing.SYMMETRY_RECORDS:
        with open(path, "a") as report:  # one short write per test: whole lines under xdist
            lines = [json.dumps({"test": request.node.nodeid, **r}) for r in testing.SYMMETRY_RECORDS]
            report.write("".join(line + "\n" for line in lines))
    testing.SYMMETRY_RECORDS.clear()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    path = config.getoption("--symmetry-report")
    if not path or not Path(path).exists():
        return
    worst: dict[str, float] = {}
    caught = 0
    for line in Path(path).read_text().splitlines():
        record = json.loads(line)
        if not record["held"]:  # a violation found (the deliberate-bug tests expect them)
            caught += 1
            continue
        ratio = record["error"] / record["tolerance"]
        worst[record["test"]] = max(worst.get(record["test"], 0.0), ratio)
    terminalreporter.section(f"mixed-precision symmetry checks: largest error / tolerance ({path})")
    for test, ratio in sorted(worst.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{ratio:6.3f}  {test}")
    terminalreporter.write_line(f"checks that found a violation (expected only in bug tests): {caught}")


@pytest.fixture
def fixed_seed() -> None:
    """Seeds Python, numpy and TensorFlow with 0 (``tf_keras.utils.set_random_seed``): initial weights repeat.

    Modules whose tests build layers from random initialisers use it for every test
    (``pytestmark = pytest.mark.usefixtures("fixed_seed")``).
    """
    import tf_keras

    tf_keras.utils.set_random_seed(0)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _OWN_CACHE_DIR and not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(_OWN_CACHE_DIR, ignore_errors=True)
