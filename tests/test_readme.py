"""The README and docs/ hold only what the code accepts.

- The README starts with the two commands and stays a front page.
- Every ```python block of README.md and docs/*.md runs.
- Every command in a shell block or in inline code of README.md, docs/*.md and the
  other markdown files (configs/**/README.md, benchmarks/README.md) is parsed by the
  command's own flag parser (a console script or a benchmarks/*.py script), in a
  separate process where nothing runs after the parsing:
  ``python tests/test_readme.py --check-commands IN OUT`` (see ``check_commands``).
  ``sit-train`` commands also have their gin files and bindings parsed and checked as
  a run checks them before it starts. Inline code is checked for its flag names only,
  since its values may be placeholders (``...``).
- Every file a command names (``configs/...``, ``benchmarks/...``) exists, every
  gin binding the pages quote is accepted, and docs/training.md's tables list every
  gin binding with its current default.
- Every relative link of these files (and its #anchor) leads somewhere.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sit_keras.commands import entry_points

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]  # their python blocks run
# Every other markdown file of the repository: configs/**/README.md, benchmarks/README.md, ...
OTHERS = sorted(p for folder in ("configs", "benchmarks", "sit_keras", "agents", "export", "tests")
                for p in (ROOT / folder).rglob("*.md"))  # fmt: skip
MARKDOWN = [*PAGES, *OTHERS]  # their commands, gin bindings and links are checked
TRAINING = ROOT / "docs" / "training.md"
ENVIRONMENTS = ROOT / "docs" / "environments.md"
DEMO_PICTURE = ROOT / "docs" / "demo_views.png"
FRONT_PAGE_LINES = 200

# Console script -> the module whose main() it runs (setup.py's console_scripts, checked below).
CONSOLE_SCRIPTS = entry_points.COMMANDS
PYTHONS = {"python", "python3", ".venv/bin/python"}
# Programs of other projects that shell blocks may call; their arguments are not checked.
EXTERNAL = {"tensorboard", "docker", "curl", "saved_model_cli", "tfds"}
SHELL_INFOS = {"sh", "bash", "shell", "console"}
# A path of this repository inside a command: it must exist, unless a flag names it as an output.
REPO_PATH = re.compile(r"(?:configs|benchmarks|docs|tests|sit_keras|agents|export)/[\w./-]*")
OUTPUT_FLAG = re.compile(r"--\w*(?:out|root)\w*")
# ```python no-run blocks: "<page>:<first line>" -> why the block cannot run in the tests. None today.
NO_RUN: dict[str, str] = {}


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- the markdown -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced code block: its page, the line of its opening fence, its info string and its text."""

    path: Path
    line: int
    info: str
    text: str

    @property
    def where(self) -> str:
        return f"{_relative(self.path)}:{self.line}"


_FENCE = re.compile(r"^(\s*)(`{3,})(.*)$")


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a markdown file (indented ones in list items too), dedented."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match.groups()
        body, j = [], i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        found.append(Block(path, i + 1, info.strip(), "\n".join(body) + "\n"))
        i = j + 1
    return found


def prose(path: Path) -> str:
    """The markdown file without its fenced code blocks (each replaced by an empty line)."""
    out, fence = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)
            out.append("")
        elif fence is not None:
            if line.strip() == fence:
                fence = None
        else:
            out.append(line)
    return "\n".join(out)


def _inline_code(text: str) -> Iterator[str]:
    """Every inline code span, paragraph by paragraph, with its line breaks unwrapped."""
    for paragraph in re.split(r"\n\s*\n", text):
        for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", paragraph):
            yield " ".join(span.split())


# -- the README is a front page ---------------------------------------------------------------------------
def test_readme_starts_with_the_two_commands() -> None:
    head = README.read_text(encoding="utf-8").splitlines()[:12]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= FRONT_PAGE_LINES, f"README.md has {len(lines)} lines; move a topic to docs/"


# -- python blocks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", PAGES, ids=_relative)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ```python block runs, in a fresh namespace, in an empty working folder."""
    monkeypatch.chdir(tmp_path)
    python = [b for b in blocks(page) if b.info.split()[:1] == ["python"]]
    if page == README:
        assert python, "README has no python example"
    for block in python:
        key = f"{_relative(page)}:{block.text.splitlines()[0]}"
        if block.info == "python no-run":
            assert key in NO_RUN, f"{block.where}: a no-run block needs its reason in NO_RUN"
            compile(block.text, block.where, "exec")
            continue
        assert block.info == "python", f"{block.where}: unknown fence info {block.info!r}"
        exec(compile(block.text, block.where, "exec"), {"__name__": "__doc_example__"})


def test_the_demo_picture_is_what_the_environments_page_draws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import Image, ImageChops

    (block,) = [b for b in blocks(ENVIRONMENTS) if b.info == "python" and DEMO_PICTURE.name in b.text]
    monkeypatch.chdir(tmp_path)
    exec(compile(block.text, block.where, "exec"), {"__name__": "__doc_example__"})
    drawn = Image.open(tmp_path / DEMO_PICTURE.name).convert("RGB")
    committed = Image.open(DEMO_PICTURE).convert("RGB")
    assert drawn.size == committed.size and ImageChops.difference(drawn, committed).getbbox() is None, (
        f"{_relative(DEMO_PICTURE)} is not what {block.where} draws: run the block in docs/ to redraw it"
    )


# -- commands ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Command:
    """One command of the docs: a console script, a benchmarks/*.py script or ``make``."""

    where: str
    program: str  # "sit-train", "benchmarks/minigrid_rotation.py" or "make"
    args: tuple[str, ...]
    names_only: bool  # inline code: check the flag names, not the values

    def flag_names(self) -> list[str]:
        return [arg[2:].partition("=")[0] for arg in self.args if arg.startswith("--") and len(arg) > 2]

    def input_paths(self) -> list[str]:
        """The repository paths the command reads: the script, and every argument but an output flag's."""
        paths, words = [self.program], list(self.args)
        for i, word in enumerate(words):
            flag, equals, value = word.partition("=")
            if OUTPUT_FLAG.fullmatch(flag) or (i and OUTPUT_FLAG.fullmatch(words[i - 1])):
                continue
            paths += re.split(r",", value if equals and flag.startswith("--") else word)
        return [path for path in paths if REPO_PATH.fullmatch(path)]


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Shell lines with their backslash continuations joined, with the number of their first line."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, line = i, lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i]
        yield start, line
        i += 1


def _command(words: list[str], where: str, names_only: bool) -> Command | None | str:
    """The checked command of a shell line's words; None for another program; a string: why it is refused."""
    program = words[0]
    if program in CONSOLE_SCRIPTS:
        return Command(where, program, tuple(words[1:]), names_only)
    if program == "make":
        return Command(where, "make", tuple(words[1:]), names_only)
    if program in PYTHONS:
        if len(words) > 1 and words[1].startswith("benchmarks/") and words[1].endswith(".py"):
            return Command(where, words[1], tuple(words[2:]), names_only)
        return f"{where}: only `python benchmarks/<script>.py ...` is checked: {' '.join(words)!r}"
    return None


def _expand(line: str, variables: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` replaced by the block's earlier assignments (others left as they are)."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), line)


def doc_commands() -> tuple[list[Command], list[str]]:
    """Every command of the shell blocks and inline code of MARKDOWN, and the lines that are refused."""
    commands: list[Command] = []
    refused: list[str] = []
    for path in MARKDOWN:
        for block in blocks(path):
            if block.info.split()[:1] == ["python"]:
                continue
            strict = block.info in SHELL_INFOS
            variables: dict[str, str] = {}
            for offset, line in _logical_lines(block.text):
                where = f"{_relative(path)}:{block.line + 1 + offset}"
                try:
                    words = shlex.split(_expand(line, variables), comments=True)
                except ValueError as error:
                    if strict:
                        refused.append(f"{where}: {error}: {line!r}")
                    continue
                while words and re.fullmatch(r"[A-Za-z_]\w*=.*", words[0]):
                    name, _, value = words.pop(0).partition("=")
                    if not words:
                        variables[name] = value  # an assignment on its own line, used as $name below
                if not words:
                    continue
                command = _command(words, where, names_only=False)
                if isinstance(command, str):
                    refused.append(command)
                elif command is not None:
                    commands.append(command)
                elif strict and words[0] not in EXTERNAL:
                    refused.append(f"{where}: unknown program {words[0]!r} in a shell block")
        for span in _inline_code(prose(path)):
            try:
                words = shlex.split(span)
            except ValueError:
                continue
            if len(words) > 1 and (words[0] in CONSOLE_SCRIPTS or words[0] in PYTHONS or words[0] == "make"):
                command = _command(words, f"{_relative(path)}: `{span}`", names_only=True)
                if isinstance(command, Command):
                    commands.append(command)
    return commands, refused


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*):(?!=)", text, flags=re.MULTILINE))


def _run_checker(requests: list[dict[str, Any]], tmp_path: Path) -> list[dict[str, Any]]:
    """``check_commands`` in a fresh process (absl's global flags and gin are per process)."""
    given, answers = tmp_path / "commands.json", tmp_path / "answers.json"
    given.write_text(json.dumps(requests), encoding="utf-8")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run(
        [sys.executable, __file__, "--check-commands", str(given), str(answers)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(answers.read_text(encoding="utf-8"))


# Commands the checker must refuse: it would not notice a wrong flag, binding or file otherwise.
CAVEFLYER = "configs/procgen/caveflyer_sit.gin"
MUST_FAIL = [
    ("sit-train", ("--root_dir", "runs/x", "--gin_file", CAVEFLYER, "--no_such_flag")),
    ("sit-train", ("--root_dir", "runs/x", "--gin_file", "configs/procgen/no_such_config.gin")),
    ("sit-train", ("--root_dir", "runs/x", "--gin_file", CAVEFLYER, "--gin_bindings", "sac.discount=1")),
    ("sit-train", ("--root_dir", "runs/x", "--gin_bindings", "ppo.num_minibatches = 7")),
    ("sit-eval", ("--policy_dir", "runs/x", "--transfrom", "rot90")),
    ("sit-export", ("--root_dir", "runs/x", "--num_examples", "many")),
    ("sit-distill", ("--root_dir", "runs/x", "--teacher_dir", "runs/y", "--dagger_round", "4")),
    ("sit-distill", ("--root_dir", "runs/x", "--teacher_dir", "runs/y", "--num_epochs", "many")),
    ("sit-distill", ("--root_dir", "runs/x", "--teacher_dir", "runs/y", "--gin_bindings", "sac.discount=1")),
    ("sit-train-supervised", ("--root_dir", "runs/x", "--gin_bindings", "train_supervised.epoch = 5")),
    ("sit-demo", ("--precision", "float8")),
    ("benchmarks/minigrid_rotation.py", ("--models", "cnn", "--no_such_flag", "1")),
]  # fmt: skip


def test_every_command_in_the_docs_parses(tmp_path: Path) -> None:
    commands, failures = doc_commands()
    full = [c for c in commands if not c.names_only]
    assert len(full) >= 30 and any(c.where.startswith("configs/") for c in full)
    assert {c.program for c in full} >= {*CONSOLE_SCRIPTS, "make"} - {"sit-check-encoders"}
    targets = _make_targets()
    for command in commands:
        if command.program == "make":
            unknown = [a for a in command.args if "=" not in a and a not in targets]
            if unknown:
                failures.append(f"{command.where}: no make target {unknown}")
        for path in command.input_paths():
            if not (ROOT / path).exists():
                failures.append(f"{command.where}: {path} does not exist")
    # One request per distinct command; inline code needs only its program's flag names.
    checked = [c for c in commands if c.program != "make"]
    keys = {_request_key(c.program, c.args, c.names_only): None for c in checked}
    keys.update({_request_key(p, a, False): None for p, a in MUST_FAIL})
    requests = [{"program": p, "args": list(a), "names_only": n} for p, a, n in keys]
    answers = dict(zip(keys, _run_checker(requests, tmp_path), strict=True))
    for command in checked:
        answer = answers[_request_key(command.program, command.args, command.names_only)]
        if command.names_only:
            known = set(answer["known"])
            unknown = [
                n for n in command.flag_names() if n not in known and n.removeprefix("no") not in known
            ]
            if unknown:
                failures.append(f"{command.where}: unknown flags {unknown} of {command.program}")
        elif answer["error"]:
            failures.append(f"{command.where}: {command.program} {' '.join(command.args)}: {answer['error']}")
    for program, args in MUST_FAIL:
        assert answers[program, args, False]["error"], f"the checker accepted {program} {' '.join(args)}"
    assert not failures, "\n".join(failures)


def _request_key(program: str, args: tuple[str, ...], names_only: bool) -> tuple[str, tuple[str, ...], bool]:
    return (program, () if names_only else tuple(args), names_only)


def test_the_console_scripts_are_setup_pys() -> None:
    declared = re.findall(
        r"\"(sit-[\w-]+) = sit_keras\.commands\.entry_points:(\w+)\"", (ROOT / "setup.py").read_text()
    )
    assert sorted(declared) == sorted((name, name.replace("-", "_")) for name in CONSOLE_SCRIPTS)


class _Parsed(BaseException):
    """Raised by the patched parsers once the flags are parsed: nothing of the command runs after it."""

    def __init__(self, values: Any, rest: list[str]):
        super().__init__()
        self.values, self.rest = values, rest


def _known_flags(parser: Any) -> list[str]:
    """The flag names an absl ``FlagValues`` or an argparse parser accepts, without dashes."""
    import argparse

    if isinstance(parser, argparse.ArgumentParser):
        return sorted(o.lstrip("-") for action in parser._actions for o in action.option_strings)
    return sorted(parser)


def _check_after_parsing(program: str, values: Any) -> None:
    """What a command checks before it runs, beyond its flags: gin files and bindings."""
    import gin

    from sit_keras.agents import distill, train
    from sit_keras.agents.training import harness
    from sit_keras.agents.training.run_settings import check_bindings

    files, bindings = (getattr(values, name, None) or [] for name in ("gin_file", "gin_bindings"))
    files, bindings = ([v] if isinstance(v, str) else list(v) for v in (files, bindings))
    if program == "sit-distill":  # its --teacher_dir and old flags are gin bindings too
        bindings, _ = distill.gin_bindings(values)
    if not (files or bindings or program == "sit-train"):
        return
    gin.clear_config()
    try:
        train.parse_gin(files, bindings)
        if program == "sit-train":
            given = [n for n in ("jit_compile", "precision", "deterministic") if values[n].present]
            harness._settings({n: values[n].value for n in given}, None)  # the run's checks, nothing built
        elif program == "sit-distill":
            check_bindings("bc")  # its run's other checks need the teacher's folder
    finally:
        gin.clear_config()


def _check_one(program: str, args: list[str], names_only: bool) -> dict[str, Any]:
    """Parses one command with its own parser, stopping right after the parsing."""
    import argparse
    import contextlib
    import importlib.util
    import io
    from unittest import mock

    from absl import app, flags

    seen: dict[str, Any] = {}
    call, known_args = flags.FlagValues.__call__, argparse.ArgumentParser.parse_known_args

    def absl_call(self: flags.FlagValues, argv: list[str], known_only: bool = False) -> list[str]:
        seen["parser"] = self
        rest = call(self, argv, known_only)
        raise _Parsed(self, list(rest[1:]))

    def argparse_call(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        seen["parser"] = self
        values, rest = known_args(self, args, namespace)
        raise _Parsed(values, list(rest))

    def absl_run(main: Any, argv: list[str] | None = None, **kwargs: Any) -> None:
        flags.FLAGS(list(sys.argv if argv is None else argv))

    if program in CONSOLE_SCRIPTS:
        module = importlib.import_module(CONSOLE_SCRIPTS[program])
        # The console script takes --verbose out before main() (entry_points.run).
        args = [a for a in args if a != entry_points.VERBOSE_FLAG]
    elif not (ROOT / program).is_file():
        return {"error": f"no such script: {program}", "known": []}
    else:
        name = Path(program).stem  # benchmarks/ is not a package: the script under its own name
        module = sys.modules.get(name)
        if module is None or getattr(module, "__file__", None) != str(ROOT / program):
            spec = importlib.util.spec_from_file_location(name, ROOT / program)
            module = sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    before = set(flags.FLAGS)
    sys.argv = [program, *([] if names_only else args)]
    error, output = "", io.StringIO()
    try:
        with (
            mock.patch.object(flags.FlagValues, "__call__", absl_call),
            mock.patch.object(argparse.ArgumentParser, "parse_known_args", argparse_call),
            mock.patch.object(app, "run", absl_run),
            contextlib.redirect_stdout(output),
            contextlib.redirect_stderr(output),
        ):
            status = module.main()
        error = f"not parsed (status {status}): {output.getvalue().strip()[-500:]}"
    except _Parsed as parsed:
        if parsed.rest:
            error = f"unexpected arguments {parsed.rest}"
        elif not names_only:
            try:
                _check_after_parsing(program, parsed.values)
            except (ValueError, KeyError) as refused:
                error = str(refused)
    except SystemExit as exit:
        error = f"exit status {exit.code}: {output.getvalue().strip()[-500:]}"
    except Exception as raised:  # noqa: BLE001  (absl flag errors and the like: the command refuses it)
        error = f"{type(raised).__name__}: {raised}"
    known = _known_flags(seen["parser"]) if "parser" in seen else []
    for name in set(flags.FLAGS) - before:  # sit-train and sit-distill define flags of the same names
        delattr(flags.FLAGS, name)
    return {"error": "" if names_only else error, "known": known}


def check_commands(given: Path, answers: Path) -> None:
    """Answers every request of ``given`` (program, args, names_only) into ``answers``, in order."""
    import sit_keras  # noqa: F401  (Keras 2 first)

    requests = json.loads(given.read_text(encoding="utf-8"))
    results = [_check_one(r["program"], r["args"], r["names_only"]) for r in requests]
    answers.write_text(json.dumps(results), encoding="utf-8")


# -- gin ------------------------------------------------------------------------------------------------
# A gin binding as the docs write it: `name.parameter = value` in backticks, or a --gin_bindings argument.
_BINDING = re.compile(
    r"`([a-z_]+\.[a-z_]+\s?=\s?[^`]+)`|--gin_bindings[ =](?:'([^']+)'|\"([^\"]+)\"|([^\s'\"]+))"
)


def _doc_bindings() -> dict[str, list[str]]:
    """Every gin binding quoted in README.md, docs/ and the other markdown files, by file."""
    found = {}
    for path in MARKDOWN:
        text = path.read_text(encoding="utf-8")
        bindings = [" ".join("".join(groups).split()) for groups in _BINDING.findall(text)]  # unwrap lines
        if bindings:
            found[_relative(path)] = bindings
    return found


def test_every_gin_binding_in_the_docs_is_accepted() -> None:
    import gin

    import sit_keras.supervised.train  # noqa: F401  (registers train_supervised)
    from sit_keras.agents import train

    found = _doc_bindings()
    assert sum(len(b) for b in found.values()) >= 12 and any(f.startswith("configs/") for f in found)
    for path, bindings in found.items():
        for binding in bindings:
            gin.clear_config()
            try:
                train.parse_gin([], [binding])
            except ValueError as error:
                raise AssertionError(f"{path}: {binding!r} is refused: {error}") from None
    gin.clear_config()


def _table_after(heading: str) -> list[list[str]]:
    """The body rows (cells stripped) of the first table after ``heading`` in docs/training.md."""
    text = TRAINING.read_text(encoding="utf-8")
    assert heading in text, f"docs/training.md has no {heading!r}"
    rows: list[list[str]] = []
    for line in text.split(heading, 1)[1].splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def _literal(cell: str) -> Any:
    """The Python literal of a cell written as one code span, e.g. ```25_000_000``` or ```'ppo'```."""
    match = re.fullmatch(r"`([^`]+)`", cell)
    assert match, f"not a literal in backticks: {cell!r}"
    return ast.literal_eval(match.group(1))


def _check_defaults(rows: list[list[str]], defaults: dict[str, Any], what: str) -> None:
    """The table's first column is ``defaults``' names in order, its second their defaults."""
    assert [row[0] for row in rows] == [f"`{name}`" for name in defaults], f"{what}: the names differ"
    for row in rows:
        name, value = row[0].strip("`"), _literal(row[1])
        default = defaults[name]
        assert type(value) is type(default) and value == default, f"{what}.{name}: {row[1]} != {default!r}"


@pytest.mark.parametrize("agent", ["ppo", "sac", "dqn", "bc"])
def test_the_agent_tables_list_every_binding_with_its_default(agent: str) -> None:
    from sit_keras.agents.training.run_settings import algorithm_module

    settings = algorithm_module(agent).SETTINGS
    defaults = {}
    for field in dataclasses.fields(settings):
        assert field.default is not dataclasses.MISSING, f"{agent}.{field.name} has no plain default"
        defaults[field.name] = field.default
    _check_defaults(_table_after(f"### `{agent}.*`"), defaults, agent)


# BC reads its environment from the teacher's policy_network.json, when train_eval.env_name is not set.
TEACHERS = {"env_name", "env_kwargs"}


def test_the_train_eval_table_lists_every_binding_with_each_agents_default() -> None:
    from sit_keras.agents.algorithms import bc
    from sit_keras.agents.training.run_settings import RunSettings, algorithm_module

    fields = dataclasses.fields(RunSettings)
    rows = _table_after("### `train_eval.*`")
    _check_defaults([row[:2] for row in rows], {f.name: f.default for f in fields}, "train_eval")
    run = RunSettings()
    filled = {
        agent: algorithm_module(agent).defaults(run, algorithm_module(agent).SETTINGS())
        for agent in ("ppo", "sac", "dqn")
    }
    filled["bc"] = bc.defaults(RunSettings(env_name="gymnasium:CartPole-v1"), bc.BC(teacher_dir="t"))
    for row in rows:
        name = row[0].strip("`")
        for agent, cell in zip(("ppo", "sac", "dqn", "bc"), row[2:6], strict=True):
            if agent == "bc" and name in TEACHERS:
                assert cell == "the teacher's", (agent, name, cell)
            elif name in filled[agent]:
                value, default = _literal(cell), filled[agent][name]
                assert type(value) is type(default) and value == default, (agent, name, cell, default)
            else:
                assert cell == "", f"{agent} fills in no train_eval.{name}, yet the table says {cell}"


def test_the_train_supervised_table_lists_every_binding_with_its_default() -> None:
    from sit_keras.supervised.train import train_supervised

    parameters = list(inspect.signature(train_supervised).parameters.values())[1:]  # after root_dir
    defaults = {p.name: p.default for p in parameters}
    _check_defaults(_table_after("### `train_supervised.*`"), defaults, "train_supervised")


# -- the layers' sizes -------------------------------------------------------------------------------------
LAYERS = ROOT / "docs" / "layers.md"
# docs/layers.md's size table: row -> build_encoder's name, input shape and arguments.
SIZE_ROWS: dict[str, tuple[str, tuple[int, int, int], dict[str, Any]]] = {
    "`sit`": ("sit", (64, 64, 3), {}),
    "`sit_star`": ("sit_star", (64, 64, 3), {}),
    "`set`": ("set", (64, 64, 3), {}),
    "`siet`": ("siet", (64, 64, 3), {}),
    "`sit_dihedral`": ("sit_dihedral", (64, 64, 3), {}),
    '`sit`, `preset="minigrid"`, 14x14x3': ("sit", (14, 14, 3), {"preset": "minigrid"}),
    "`vit`": ("vit", (64, 64, 3), {}),
    "`impala_cnn`, `channels=(4, 8, 16)`, `output_dim=64`": (
        "impala_cnn",
        (64, 64, 3),
        {"channels": (4, 8, 16), "output_dim": 64},
    ),
    "`cnn`": ("cnn", (64, 64, 3), {}),
}


def test_the_size_table_counts_the_encoders_weights() -> None:
    from sit_keras.models import build_encoder

    text = LAYERS.read_text(encoding="utf-8")
    table = text[text.index("| encoder | weights | paper |") :].split("\n\n")[0].splitlines()[2:]
    rows = {
        cells[0]: cells[1] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table)
    }
    assert list(rows) == list(SIZE_ROWS)
    for row, (name, shape, kwargs) in SIZE_ROWS.items():
        assert rows[row] == f"{build_encoder(name, shape, **kwargs).count_params():,}", row


# -- links ----------------------------------------------------------------------------------------------
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m) for m in re.findall(r"^#+\s+(.*)$", prose(path), flags=re.MULTILINE)}


@pytest.mark.parametrize("page", MARKDOWN, ids=_relative)
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in _LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading with the anchor #{anchor}")
    assert not broken, f"{_relative(page)}: " + "; ".join(broken)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check-commands"]:
        check_commands(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit("usage: python tests/test_readme.py --check-commands IN.json OUT.json")
