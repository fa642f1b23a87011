"""Malformed requests to every exported family's SavedModel give an error, never an abort (issue 14).

Each family (SiT, CNN, SAC, C51, and the AttentionNeuron sensor set with state) is exported once per
module. One subprocess per family, with TensorFlow alone imported (as TF Serving loads a model),
sends every kind of request through three routes and prints each outcome as a JSON line:

- ``eager``: the ``serving_default`` signature of ``tf.saved_model.load``;
- ``session``: TF Serving's own path, a ``Session`` on the MetaGraph fed by the SignatureDef's
  tensor names; ``Session._do_run`` skips the Python-side feed shape check that ``Session.run``
  adds, as TF Serving's C++ ``Session::Run`` does;
- ``action``: TF-Agents' ``action`` signature, which TF Serving serves as well.

A request that aborts the process fails its family's test with the request named, instead of
killing pytest. The contract (``saved_model.serving_metadata``): every input with its dtype and
shape, a batch of at least 1 (no upper bound: 4096 works) shared by all inputs, a sensor set's
number of readings free but shared, finite floats, a reading in every sensor set example.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from sit_keras.export import saved_model, serving_client
from sit_keras.export.exporter import export_policy
from sit_keras.export.policy_model import checked_outputs
from sit_keras.export.random_policy import write_example_policy_folder

FAMILIES = ("sit", "cnn", "sac_state", "c51_atari", "attention_neuron")
HUGE_BATCH = 4096
# Requests sent per route over the five families (the session route skips the huge batch).
MATRIX_SIZE = {"eager": 62, "session": 57, "action": 37, "tf_agents": 20}
TIMEOUT_SECONDS = 300

# The requests, from the signature's specs ({name: (shape with None, dtype name)}); numpy only, so that
# the subprocess (bare TensorFlow) and the client tests (no model) build the same ones.
CASES_SOURCE = r'''
import numpy as np

SENSORS = 5


def make(specs, batch, sensors=SENSORS, rng=None):
    """A valid request: random observations, all-True masks, zero states, MID step types."""
    rng = np.random.default_rng(0) if rng is None else rng
    request = {}
    for name, (shape, dtype) in specs.items():
        shape = [batch] + [sensors if d is None else d for d in shape[1:]]
        if dtype == "uint8":
            request[name] = rng.integers(0, 256, shape).astype(np.uint8)
        elif dtype == "bool":
            request[name] = np.ones(shape, bool)
        elif np.dtype(dtype).kind in "iu":
            request[name] = np.ones(shape, dtype)
        elif "observation" in name:
            request[name] = rng.normal(size=shape).astype(dtype)
        else:
            request[name] = np.zeros(shape, dtype)
    return request


def cases(specs, huge):
    """(case, request) for the valid requests and every kind of malformed one that applies.

    The same requests on every call (every route), from one seeded generator.
    """
    rng = np.random.default_rng(0)
    obs = next(name for name in specs if "observation" in name)
    shape, dtype = specs[obs]
    sensor_set = len(shape) > 1 and shape[1] is None
    floating = np.dtype(dtype).kind == "f"
    others = [name for name in specs if name != obs]
    base = make(specs, 1, rng=rng)

    def changed(**values):
        return {**base, **values}

    valid = make(specs, 3, rng=rng)
    yield "valid", valid
    yield "huge_batch", {n: np.resize(v, (huge, *v.shape[1:])) for n, v in valid.items()}
    yield "empty_batch", make(specs, 0)
    yield "no_batch", {name: value[0] for name, value in base.items()}
    yield "scalar_observation", changed(**{obs: base[obs].reshape(-1)[0]})
    yield "extra_rank", changed(**{obs: base[obs][None]})
    yield "missing_axis", changed(**{obs: base[obs][..., 0]})
    yield "trailing_axis", changed(**{obs: base[obs][..., None]})  # the leading sizes right
    wider = np.concatenate([base[obs], base[obs]], axis=1)
    if wider.ndim > 3:  # images: both spatial axes, e.g. (1, 28, 28, 3) for (batch, 14, 14, 3)
        wider = np.concatenate([wider, wider], axis=2)
    yield "wrong_size", changed(**{obs: wider})
    yield "wrong_dtype", changed(**{obs: base[obs].astype(np.float64 if floating else np.float32)})
    if floating:
        nan = base[obs].copy()
        nan.flat[0] = np.nan
        yield "nan", changed(**{obs: nan})
        yield "inf", changed(**{obs: np.full_like(base[obs], np.inf)})
        yield "overflow", changed(**{obs: np.full_like(base[obs], 1e30)})
    if others:
        yield "batch_mismatch", changed(**{n: np.concatenate([base[n], base[n]]) for n in others})
        yield "missing_input", {name: value for name, value in base.items() if name != others[-1]}
    for name in others:
        if np.dtype(specs[name][1]).kind == "f":
            nan = base[name].copy()
            nan.flat[0] = np.nan
            yield "nan_other_input", changed(**{name: nan})
            break
    if sensor_set:
        yield "more_sensors", make(specs, 2, sensors=SENSORS + 2)
        yield "zero_sensors", make(specs, 1, sensors=0)
        yield "no_reading", changed(sensor_mask=np.zeros_like(base["sensor_mask"]))
'''

SCRIPT = (
    CASES_SOURCE
    + r"""
import json
import sys

import tensorflow as tf

path, huge = sys.argv[1], int(sys.argv[2])
ACTION_CASES = {"valid", "empty_batch", "no_batch", "extra_rank", "trailing_axis", "wrong_size", "nan",
                "nan_other_input"}


def emit(**record):
    print(json.dumps(record), flush=True)


def spec_shapes(signature):
    return {n: (s.shape.as_list(), s.dtype.name) for n, s in signature.structured_input_signature[1].items()}


def run(route, call, specs, only=None, skip=()):
    for case, request in cases(specs, huge):
        if (only is not None and case not in only) or case in skip:
            continue
        emit(event="start", route=route, case=case)
        record = {"event": "done", "route": route, "case": case}
        try:
            outputs = call(request)
        except Exception as error:  # every error is an outcome to report
            record.update(outcome="error", error=type(error).__name__, message=str(error)[:800])
        else:
            floats = {n: v for n, v in outputs.items() if v.dtype.kind == "f"}
            record.update(
                outcome="ok",
                batch=int(outputs["action"].shape[0]),
                request_batch=int(np.shape(request[next(n for n in request if "observation" in n)])[0]),
                finite=bool(all(np.all(np.isfinite(v)) for v in floats.values())),
                head={n: v[:3].tolist() for n, v in floats.items() if not n.startswith("next_")},
            )
        emit(**record)


def call_with(signature):
    def call(request):
        outputs = signature(**{n: tf.constant(v) for n, v in request.items()})
        return {n: v.numpy() for n, v in outputs.items()}

    return call


loaded = tf.saved_model.load(path)
serving = loaded.signatures["serving_default"]
emit(event="specs", signatures=sorted(loaded.signatures), inputs=spec_shapes(serving))
run("eager", call_with(serving), spec_shapes(serving))
run("action", call_with(loaded.signatures["action"]), spec_shapes(loaded.signatures["action"]), ACTION_CASES)
initial_state = loaded.signatures["get_initial_state"]
for case, call in (
    ("get_initial_state", lambda: initial_state(batch_size=tf.constant(2))),
    ("get_initial_state_negative", lambda: initial_state(batch_size=tf.constant(-1))),
    ("get_train_step", lambda: loaded.signatures["get_train_step"]()),
    ("get_metadata", lambda: loaded.signatures["get_metadata"]()),
):
    emit(event="start", route="tf_agents", case=case)
    try:
        emit(event="done", route="tf_agents", case=case, outcome="ok", outputs=sorted(call()))
    except Exception as error:
        emit(event="done", route="tf_agents", case=case, outcome="error", error=type(error).__name__,
             message=str(error)[:800])

with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
    signature = meta_graph.signature_def["serving_default"]
    names = sorted(signature.outputs)
    fetches = [graph.get_tensor_by_name(signature.outputs[n].name) for n in names]

    def session_call(request):
        feeds = {graph.get_tensor_by_name(signature.inputs[n].name).ref(): v for n, v in request.items()}
        return dict(zip(names, session._do_run(None, [], fetches, feeds, None, None), strict=True))

    # The huge batch runs the same graph as on the eager route: once is enough for the time budget.
    run("session", session_call, spec_shapes(serving), skip={"huge_batch"})

emit(event="modules", modules=sorted(m for m in sys.modules
                                     if m.split(".")[0] in ("tensorflow_probability", "tf_agents")))
"""
)

OK = "ok"
SHAPE = r"Input \S+ must have shape \(batch"
# Requests whose observation alone is wrong: the error names it (checked first, against its own rank).
OBSERVATION_SHAPE = r"Input (0/)?observation must have shape \(batch"
FINITE = r"Input \S+ must be finite"
# The outcome every request must have on the serving_default routes: OK, or the error message pattern.
EXPECTED = {
    "valid": OK,
    "huge_batch": OK,
    "more_sensors": OK,  # a sensor set takes any number of readings
    "overflow": OK,  # 1e30 is a finite float32; outputs must then be finite (or the output check refuses)
    "empty_batch": OBSERVATION_SHAPE,
    "no_batch": OBSERVATION_SHAPE,
    "scalar_observation": OBSERVATION_SHAPE,
    "extra_rank": OBSERVATION_SHAPE,
    "missing_axis": OBSERVATION_SHAPE,
    "trailing_axis": OBSERVATION_SHAPE,
    "wrong_size": SHAPE,
    "batch_mismatch": SHAPE,
    "zero_sensors": SHAPE,
    "wrong_dtype": r"expected to be a \w+ tensor but is a|Expects arg\[\d+\] to be \w+ but \w+ is provided",
    "nan": FINITE,
    "inf": FINITE,
    "nan_other_input": FINITE,
    "no_reading": r"Input sensor_mask must mark at least one reading",
    # The eager signature binds arguments in Python; a Session (TF Serving) refuses the missing feed.
    "missing_input": r"missing a required argument|You must feed a value for placeholder",
}


def _env() -> dict[str, str]:
    return {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[dict[str, tuple[str, subprocess.Popen]]]:
    """Each family's SavedModel version folder (small random-weight policies) and its request process.

    A family's requests start as soon as it is exported, while the next family exports.
    """
    families: dict[str, tuple[str, subprocess.Popen]] = {}
    try:
        for family in FAMILIES:
            root = str(tmp_path_factory.mktemp(f"serve_{family}"))
            write_example_policy_folder(root, family)
            report = export_policy(root, os.path.join(root, "export"), family, ["saved_model"])
            path = report["models"]["saved_model"]["path"]
            process = subprocess.Popen(
                [sys.executable, "-c", SCRIPT, path, str(HUGE_BATCH)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
            )  # fmt: skip
            families[family] = (path, process)
    except BaseException:  # an export failed: the requests already running are not needed
        _stop(families.values())
        raise
    yield families
    # A worker that ran only the tests needing `exports` (pytest-xdist splits the module) never read
    # the requests' outcomes: end those processes, not leave them to the garbage collector.
    _stop(families.values())


def _stop(processes: Iterable[tuple[str, subprocess.Popen]]) -> None:
    for _, process in processes:
        if process.poll() is None:
            process.kill()
        if process.stdout and not process.stdout.closed:  # not read by `outcomes`
            process.communicate()


@pytest.fixture(scope="module")
def exports(served) -> dict[str, str]:
    """Each family's SavedModel version folder."""
    return {family: path for family, (path, _) in served.items()}


@pytest.fixture(scope="module")
def outcomes(served) -> dict[str, dict[str, Any]]:
    """Per family: the subprocess's return code, stderr tail and records (``(route, case)`` -> record)."""
    results = {}
    for family, (_, process) in served.items():
        try:
            stdout, stderr = process.communicate(timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        results[family] = {
            "returncode": process.returncode,
            "stderr": "\n".join(stderr.splitlines()[-15:]),
            "started": [r for r in lines if r["event"] == "start"],
            "records": {(r["route"], r["case"]): r for r in lines if r["event"] == "done"},
            "specs": next((r for r in lines if r["event"] == "specs"), None),
            "modules": next((r["modules"] for r in lines if r["event"] == "modules"), None),
        }
    return results


def _check_completed(result: dict[str, Any]) -> None:
    """The subprocess finished every request: an abort names the request in flight."""
    if result["returncode"] != 0:
        last = result["started"][-1] if result["started"] else None
        in_flight = f"{last['route']}/{last['case']}" if last else "loading the model"
        pytest.fail(
            f"the process ended with code {result['returncode']} (negative: killed by that signal) "
            f"during {in_flight}:\n{result['stderr']}"
        )


def _problems(route: str, result: dict[str, Any]) -> list[str]:
    """Every (route, case) whose outcome breaks ``EXPECTED``, one line each."""
    problems = []
    records = {case: r for (r_route, case), r in result["records"].items() if r_route == route}
    for case, record in records.items():
        expected = EXPECTED[case]
        if record["outcome"] == OK:
            if expected != OK:
                problems.append(f"{route}/{case}: answered, expected an error matching {expected!r}")
            elif record["batch"] != record["request_batch"] or not record["finite"]:
                problems.append(f"{route}/{case}: {record['batch']} answers for {record['request_batch']} "
                                f"examples, finite: {record['finite']}")  # fmt: skip
        elif expected == OK and not (case == "overflow" and "Output " in record["message"]):
            problems.append(f"{route}/{case}: {record['error']}: {record['message'][:300]}")
        elif expected != OK and (
            record["error"] not in ("InvalidArgumentError", "TypeError")
            or (record["error"] == "TypeError") != (case == "missing_input" and route != "session")
            or not re.search(expected, record["message"])
        ):
            problems.append(f"{route}/{case}: {record['error']}: {record['message'][:300]}")
    return problems


@pytest.mark.parametrize("family", FAMILIES)
def test_every_request_gets_an_answer_or_an_error_never_an_abort(outcomes, family):
    result = outcomes[family]
    _check_completed(result)
    problems = []
    for route in ("eager", "session"):
        problems += _problems(route, result)
    assert not problems, f"{family}:\n" + "\n".join(problems)
    records = result["records"]
    # The answers do not depend on the batch: the huge batch's first rows are the valid batch's.
    valid, huge = records[("eager", "valid")], records[("eager", "huge_batch")]
    assert huge["batch"] == HUGE_BATCH
    for name, head in valid["head"].items():
        np.testing.assert_allclose(huge["head"][name], head, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(records[("session", "valid")]["head"][name], head, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("family", FAMILIES)
def test_tf_agents_signatures_refuse_bad_requests_too(outcomes, family):
    """TF Serving serves TF-Agents' ``action`` signature as well: it checks its inputs the same way."""
    result = outcomes[family]
    _check_completed(result)
    records = result["records"]
    action = {case: r for (route, case), r in records.items() if route == "action"}
    assert action["valid"]["outcome"] == OK and action["valid"]["batch"] == 3
    for case, record in action.items():
        if case != "valid":
            assert record["outcome"] == "error" and record["error"] == "InvalidArgumentError", (case, record)
            assert re.search(EXPECTED[case], record["message"]), (case, record["message"])
    assert "0/observation" in action["wrong_size"]["message"]
    stateful = any(name.startswith("state_") for name in result["specs"]["inputs"])
    initial = records[("tf_agents", "get_initial_state")]
    assert initial["outcome"] == OK and bool(initial["outputs"]) == stateful
    negative = records[("tf_agents", "get_initial_state_negative")]
    assert negative["outcome"] == ("error" if stateful else OK), negative
    assert records[("tf_agents", "get_train_step")]["outcome"] == OK
    assert records[("tf_agents", "get_metadata")]["outcome"] == OK


def test_the_matrix_covers_every_kind_of_request(outcomes):
    """Every case of ``EXPECTED`` ran; the matrix's size is the one the issue's closing note cites."""
    ran = {case for result in outcomes.values() for (_, case) in result["records"]}
    assert set(EXPECTED) <= ran, set(EXPECTED) - ran
    sizes = {route: 0 for route in ("eager", "session", "action", "tf_agents")}
    for result in outcomes.values():
        for route, _ in result["records"]:
            sizes[route] += 1
    assert sizes == MATRIX_SIZE


@pytest.mark.parametrize("family", FAMILIES)
def test_serving_signature_loads_and_runs_in_bare_tensorflow(outcomes, family):
    """The subprocess imports TensorFlow only (as TF Serving loads a model): no TFP, no TF-Agents."""
    result = outcomes[family]
    _check_completed(result)
    assert result["modules"] == []
    assert {"serving_default", "action", "get_initial_state", "get_train_step", "get_metadata"} == set(
        result["specs"]["signatures"]
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_signature_pins_every_non_batch_axis(outcomes, exports, family):
    """Only the batch is free, and a sensor set's number of readings, which its metadata names."""
    result = outcomes[family]
    _check_completed(result)
    metadata = serving_client.read_metadata(exports[family])
    for name, (shape, dtype) in result["specs"]["inputs"].items():
        axes = metadata["inputs"][name]["axes"]
        assert shape[0] is None and axes[0] == "batch", (name, shape)
        assert [None if isinstance(a, str) else a for a in axes] == shape, (name, shape, axes)
        assert metadata["inputs"][name]["dtype"] == dtype
        assert ("sensors" in axes) == (family == "attention_neuron" and name != "state_previous_action")
    assert metadata["serving"]["signatures"].keys() == set(saved_model.SIGNATURES)
    assert "distribution" in metadata["serving"]["not_saved"]


def test_non_finite_outputs_are_refused_not_answered():
    """A NaN output (finite inputs overflowing) fails the request rather than becoming an argmax action."""

    @tf.function(input_signature=[tf.TensorSpec((None, 2), tf.float32)])
    def head(x):
        logits = x * 3e38  # finite inputs above 1 overflow to inf
        return checked_outputs({"action": tf.argmax(logits, axis=-1), "logits": logits})

    with pytest.raises(tf.errors.InvalidArgumentError, match="Output logits is not finite"):
        head(tf.constant([[1.0, 2.0]]))
    np.testing.assert_array_equal(head(tf.constant([[0.5, 0.25]]))["action"], [0])


# The client: the same requests, checked against the exported metadata before they leave.


def _client_cases(metadata: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    namespace: dict[str, Any] = {}
    exec(compile(CASES_SOURCE, "CASES_SOURCE", "exec"), namespace)
    specs = {name: (spec["shape"], spec["dtype"]) for name, spec in metadata["inputs"].items()}
    return dict(namespace["cases"](specs, 8))


@pytest.mark.parametrize("family", FAMILIES)
def test_client_refuses_what_the_model_refuses(exports, family):
    metadata = serving_client.read_metadata(exports[family])
    floating = metadata["inputs"]["observation"]["dtype"].startswith("float")
    for case, request in _client_cases(metadata).items():
        # The client converts float64 to a float32 input (the server would refuse float64 itself).
        accepted = EXPECTED[case] == OK or (case == "wrong_dtype" and floating)
        if accepted:
            body = json.loads(serving_client.rest_predict_body(request, metadata=metadata))
            assert body["signature_name"] == "serving_default" and set(body["inputs"]) == set(request)
            grpc = serving_client.grpc_predict_request(family, request, metadata=metadata)
            for name, proto in grpc.inputs.items():
                assert tf.dtypes.as_dtype(proto.dtype).name == metadata["inputs"][name]["dtype"], (case, name)
        else:
            for build in (serving_client.rest_predict_body, serving_client.grpc_predict_request):
                args = (request,) if build is serving_client.rest_predict_body else (family, request)
                with pytest.raises(ValueError, match=r"^Input '[^']+' ") as error:
                    build(*args, metadata=metadata)
                assert "\n" not in str(error.value) and str(error.value).endswith("."), (case, error.value)


def test_client_messages_name_the_input_expected_and_received(exports):
    cnn = serving_client.read_metadata(exports["cnn"])
    image = np.zeros((1, 14, 14, 3), np.uint8)
    cases = [
        (
            {"observation": image[0]},
            r"'observation' must have shape \(batch, 14, 14, 3\); received shape "
            r"\(14, 14, 3\); add the batch axis first",
        ),
        ({"observation": np.zeros((1, 28, 28, 3), np.uint8)}, r"received shape \(1, 28, 28, 3\)\.$"),
        ({"observation": image.astype(np.float32)}, "'observation' must have dtype uint8; received float32"),
        ({"observation": np.full((1, 14, 14, 3), 300)}, r"values 0 to 255\); received int64 values from 300"),
        ({"observation": image, "mask": image}, "'mask' is not an input of this model"),
        ({"observation": [[1, 2], [3]]}, "'observation' must be a rectangular array"),
        ({"observation": np.array([["a"]])}, "'observation' must be a numeric or boolean array"),
        ({}, "at least the 'observation' input"),
    ]
    for inputs, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            serving_client.rest_predict_body(inputs, metadata=cnn)
    # Exact conversions are made: int64 pixels in range become uint8.
    body = json.loads(serving_client.rest_predict_body({"observation": image.astype(np.int64)}, metadata=cnn))
    assert np.asarray(body["inputs"]["observation"]).shape == (1, 14, 14, 3)

    sac = serving_client.read_metadata(exports["sac_state"])
    with pytest.raises(ValueError, match="'observation' must be finite in float32"):
        serving_client.rest_predict_body({"observation": np.full((1, 5), 1e300)}, metadata=sac)
    with pytest.raises(ValueError, match="from 0 to 16777217, not all exact in float32"):
        serving_client.rest_predict_body({"observation": np.array([[2**24 + 1, 0, 0, 0, 0]])}, metadata=sac)
    converted = serving_client.check_inputs({"observation": np.array([[1, 2, 3, 4, 5]])}, sac)
    assert converted["observation"].dtype == np.float32

    sensors = serving_client.read_metadata(exports["attention_neuron"])
    request = {name: np.zeros([2 if a == "batch" else 3 if a == "sensors" else a for a in spec["axes"]],
                              spec["dtype"]) for name, spec in sensors["inputs"].items()}  # fmt: skip
    request["sensor_mask"] = np.ones((2, 3), bool)
    serving_client.check_inputs(request, sensors)
    with pytest.raises(
        ValueError, match=r"'state_cell' must have the same sensors size as 'observation' \(3\)"
    ):
        serving_client.check_inputs({**request, "state_cell": np.zeros((2, 4, 8), np.float32)}, sensors)
    with pytest.raises(ValueError, match=r"'sensor_mask' is required by this model"):
        serving_client.check_inputs({k: v for k, v in request.items() if k != "sensor_mask"}, sensors)
    with pytest.raises(ValueError, match="'sensor_mask' must have dtype bool; received int64"):
        serving_client.check_inputs({**request, "sensor_mask": np.ones((2, 3), np.int64)}, sensors)


def test_client_without_metadata_checks_what_holds_for_every_model(exports):
    image = np.zeros((2, 14, 14, 3), np.uint8)
    # Without the metadata the model's shapes are unknown; its version folder works as metadata too.
    assert serving_client.check_inputs({"observation": image})["observation"] is not None
    with pytest.raises(ValueError, match="must have shape"):
        serving_client.check_inputs({"observation": image[:, :7]}, exports["cnn"])
    for inputs, pattern in (
        ({"observation": np.uint8(3)}, "'observation' must have a batch axis first; received a scalar"),
        ({"observation": image[:0]}, "'observation' must have at least 1 example; received a batch of 0"),
        ({"observation": image, "state": np.zeros((3, 2))}, "same batch size"),
        ({"observation": np.array([[np.nan]])}, "'observation' must be finite"),
    ):
        with pytest.raises(ValueError, match=pattern):
            serving_client.grpc_predict_request("policy", inputs)
    with pytest.raises(ValueError, match="metadata describes the 'serving_default' signature"):
        serving_client.rest_predict_body({"observation": image}, "action", metadata=exports["cnn"])
    with pytest.raises(FileNotFoundError, match="sit-export"):
        serving_client.read_metadata(os.path.join(exports["cnn"], "missing"))


def test_damaged_serving_metadata_is_named(tmp_path):
    damaged = tmp_path / "metadata.json"
    for text in ("{not json", "[1, 2]"):
        damaged.write_text(text)
        with pytest.raises(ValueError, match=f"{damaged}.*(not valid metadata JSON|expected a JSON object)"):
            serving_client.read_metadata(str(damaged))


def test_the_rest_url_is_valid_or_refused_in_one_sentence():
    assert serving_client.rest_predict_url("localhost", "sit_policy") == (
        "http://localhost:8501/v1/models/sit_policy:predict"
    )
    assert serving_client.rest_predict_url("10.0.0.2", "p", version=3, port=9000) == (
        "http://10.0.0.2:9000/v1/models/p/versions/3:predict"
    )
    assert serving_client.rest_predict_url("[::1]", "p").startswith("http://[::1]:8501/")
    for kwargs, named in [
        ({"host": "my host"}, "host"), ({"host": "a/b"}, "host"), ({"host": ""}, "host"),
        ({"model_name": "a b"}, "model_name"), ({"model_name": "../x"}, "model_name"),
        ({"port": 0}, "port"), ({"port": 70000}, "port"), ({"port": "80"}, "port"),
        ({"version": 0}, "version"), ({"version": True}, "version"),
    ]:  # fmt: skip
        arguments = {"host": "localhost", "model_name": "p", **kwargs}
        with pytest.raises(ValueError, match=f"^{named} must be") as refused:
            serving_client.rest_predict_url(**arguments)
        assert "\n" not in str(refused.value)


def test_a_loaded_signature_is_called_after_the_models_checks(exports):
    """``call_signature`` refuses what the signature's own conversion would change in the caller's process."""
    signature = tf.saved_model.load(exports["cnn"]).signatures["serving_default"]
    image = np.random.default_rng(0).integers(0, 256, (2, 14, 14, 3))
    wrapped = image.copy()
    wrapped[0, 0, 0, 0] = 300
    # What the check prevents: called directly, the signature receives 300 as 44.
    direct = signature(observation=tf.constant(wrapped, tf.uint8))["logits"].numpy()
    low_byte = image.copy()
    low_byte[0, 0, 0, 0] = 44
    np.testing.assert_array_equal(direct, signature(observation=tf.constant(low_byte, tf.uint8))["logits"])
    for bad, pattern in (
        (wrapped, r"values 0 to 255\); received int64 values from 0 to 300"),
        (image - 1, r"received int64 values from -1 to"),
        (np.full((1, 14, 14, 3), np.nan), "'observation' must have dtype uint8; received float64"),
    ):
        with pytest.raises(ValueError, match=pattern):
            serving_client.call_signature(signature, {"observation": bad})
    # Valid pixels in a wider dtype are converted exactly and answered as the signature answers them.
    outputs = serving_client.call_signature(signature, {"observation": image})
    expected = signature(observation=tf.constant(image, tf.uint8))
    np.testing.assert_array_equal(outputs["logits"], expected["logits"])
    # The contract read from the signature is the metadata's.
    from_signature = serving_client.metadata_from_signature(signature)["inputs"]["observation"]
    described = serving_client.read_metadata(exports["cnn"])["inputs"]["observation"]
    assert from_signature == {"dtype": described["dtype"], "shape": described["shape"]}


def _server_metadata_answer(version_dir: str) -> str:
    """What TF Serving answers to GET .../metadata: its GetModelMetadataResponse as JSON."""
    from google.protobuf import json_format
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow_serving.apis import get_model_metadata_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    signatures = get_model_metadata_pb2.SignatureDefMap()
    for name, definition in saved.meta_graphs[0].signature_def.items():
        signatures.signature_def[name].CopyFrom(definition)
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name = "policy"
    response.metadata["signature_def"].Pack(signatures)
    return json_format.MessageToJson(response, preserving_proto_field_name=True)


@pytest.mark.parametrize("family", ["cnn", "attention_neuron"])
def test_a_client_without_files_gets_the_contract_from_the_server(exports, family):
    answer = _server_metadata_answer(exports[family])
    from_server = serving_client.metadata_from_server(answer)
    described = serving_client.read_metadata(exports[family])["inputs"]
    assert {n: (s["dtype"], s["shape"]) for n, s in from_server["inputs"].items()} == {
        n: (s["dtype"], s["shape"]) for n, s in described.items()
    }
    if family == "cnn":
        too_bright = np.full((1, 14, 14, 3), 300)
        with pytest.raises(ValueError, match=r"values 0 to 255\); received int64 values from 300"):
            serving_client.rest_predict_body({"observation": too_bright}, metadata=from_server)
        action = serving_client.metadata_from_server(answer, "action")
        assert "0/observation" in action["inputs"]
        with pytest.raises(ValueError, match="describes the 'action' signature"):
            serving_client.rest_predict_body({"observation": too_bright}, metadata=action)
    with pytest.raises(ValueError, match="has no signature 'missing'; it has: action, "):
        serving_client.metadata_from_server(answer, "missing")
    with pytest.raises(ValueError, match="Not a TF Serving model metadata answer"):
        serving_client.metadata_from_server('{"error": "Servable not found"}')
    assert serving_client.rest_metadata_url("localhost", "p", version=2) == (
        "http://localhost:8501/v1/models/p/versions/2/metadata"
    )


def test_what_tf_serving_does_with_values_a_uint8_input_cannot_hold():
    """The narrowing that docs/export.md describes, on TensorFlow's own paths of a request.

    TF Serving's REST handler (util/json_tensor.cc) puts any JSON integer of a
    uint8 input into the TensorProto's ``int_val``; the server builds the
    tensor from it as ``parse_tensor`` does here (``Tensor::FromProto``):
    the low byte stays. A gRPC client's ``make_tensor_proto`` narrows the same way.
    """
    from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

    proto = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_UINT8,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=4)]),
        int_val=[300, -1, 255, 256],
    )
    np.testing.assert_array_equal(tf.io.parse_tensor(proto.SerializeToString(), tf.uint8), [44, 255, 255, 0])
    grpc_tensor = tf.make_tensor_proto(np.array([300, -1]), dtype=tf.uint8)
    np.testing.assert_array_equal(tf.make_ndarray(grpc_tensor), [44, 255])
