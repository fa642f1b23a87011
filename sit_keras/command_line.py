"""What the command-line tools share: flag parsing and a console without library chatter.

Tools that return an exit status (``main(argv) -> int``) parse their flags here.

absl's ``app.run`` exits the process and cannot run twice in one process;
these tools parse their own ``FlagValues`` so that tests can call ``main``
repeatedly and a mistake is one line on stderr.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Collection, Sequence
from typing import Any, NoReturn

from absl import flags

from sit_keras import quiet

USAGE_ERROR = 2
"""Exit status of every console script for a user's mistake (0: done; 1: a failure that is not the
user's; 130: stopped by Ctrl-C or SIGTERM)."""
INTERRUPTED = 130
"""The exit status of a mistake in the arguments."""

HELP_ARGUMENTS = frozenset({"-h", "--help", "--helpshort"})
VERBOSE_HELP = (
    "Show every library message (TensorFlow, absl, gym); by default known start-up noise is dropped."
)


def wants_help(argv: Sequence[str]) -> bool:
    """True if ``argv`` asks for the short help (``-h``, ``--help``, ``--helpshort``)."""
    return bool(HELP_ARGUMENTS & set(argv))


def _summary(doc: str) -> str:
    """The first paragraph of a module docstring."""
    return doc.strip().split("\n\n", 1)[0]


def _flag_name(flag: flags.Flag) -> str:
    return f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"


def _one_line(flag: flags.Flag, width: int) -> str:
    """``--name  help  One of: ...  Repeatable.  (default: value)`` on one line, the help at ``width``."""
    name = _flag_name(flag)
    text = " ".join(flag.help.split())
    # absl writes the choices and "repeat this option" into the help text; said once here instead.
    text = re.sub(r"^<[^>]*>: ", "", text).removesuffix("; repeat this option to specify a list of values")
    choices = getattr(flag.parser, "enum_values", None)
    if choices:
        text += f" One of: {', '.join(choices)}."
    if isinstance(flag, flags.MultiFlag):
        text += " Repeatable."
    if flag.default not in (None, [], ""):
        text += f" (default: {flag.default_as_str})"
    return f"  {name:<{width}}{text}"


def flags_help(
    doc: str,
    flag_values: flags.FlagValues,
    required: Collection[str] = (),
    advanced: Collection[str] = (),
    modules: Collection[str] | None = None,
    hidden: Collection[str] = (),
    sections: Sequence[str] = (),
) -> str:
    """A command's ``--help``: ``doc``'s first paragraph, then its flags one line each, grouped.

    Args:
      doc: the command's module docstring.
      flag_values: where its flags live.
      required, advanced: flag names of those groups; every other flag of the
        command is "common".
      modules: the modules whose flags are the command's (for absl's global
        ``FLAGS``, which also holds absl's own); ``None``: all of ``flag_values``.
      hidden: flag names left out (deprecated ones, which ``--helpfull`` still lists).
      sections: lines shown after the flags (e.g. the gin bindings that matter).
    """
    if modules is None:
        own = [flag_values[name] for name in sorted(flag_values) if flag_values[name].name == name]
    else:
        by_module = flag_values.flags_by_module_dict()
        own = sorted({flag for module in modules for flag in by_module.get(module, [])}, key=lambda f: f.name)
    own = [flag for flag in own if flag.name not in hidden]
    groups = {
        "Required": [f for f in own if f.name in required],
        "Common": [f for f in own if f.name not in required and f.name not in advanced],
        "Advanced": [f for f in own if f.name in advanced],
    }
    width = max(len(_flag_name(flag)) for flag in own) + 2
    lines = [_summary(doc), ""]
    for title, members in groups.items():
        if members:
            lines += [f"{title} flags:", *(_one_line(flag, width) for flag in members), ""]
    if sections:
        lines += [*sections, ""]
    lines += [
        "Output:",
        f"  {'--verbose':<{width}}{VERBOSE_HELP}",
        f"  {'--helpfull':<{width}}Every flag with its full description.",
    ]
    return "\n".join(lines)


# argparse's --help with each flag and its help on one line (argparse wraps at 80 columns).
ONE_LINE_HELP = functools.partial(argparse.HelpFormatter, max_help_position=34, width=240)


class ArgumentParser(argparse.ArgumentParser):
    """argparse for a console script: a bad argument is one line, ``<prog>: ... See <prog> --help.``,
    and exit status ``USAGE_ERROR`` (argparse's own prints the usage first)."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(USAGE_ERROR, f"{self.prog}: {message[0].upper()}{message[1:]}. See {self.prog} --help.\n")


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    """``--verbose`` in an argparse command's help (``commands.entry_points`` acts on it before ``main``)."""
    parser.add_argument_group("output").add_argument("--verbose", action="store_true", help=VERBOSE_HELP)


def parse_flags(
    flag_values: flags.FlagValues,
    program: str,
    argv: Sequence[str] | None,
    doc: str,
    required: Collection[str] = (),
    advanced: Collection[str] = (),
    **help_options: Any,
) -> list[str] | int:
    """Parses ``argv`` (``sys.argv[1:]`` when ``None``) into ``flag_values``, from their defaults.

    ``help_options`` go to ``flags_help`` (``hidden``, ``sections``).

    Returns:
      The arguments left after the flags, or an exit status once the call is
      answered: 0 after printing ``flags_help`` for ``--help`` (or absl's full
      list for ``--helpfull``), ``USAGE_ERROR`` after printing one line for a
      bad flag.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if wants_help(argv):
        print(flags_help(doc, flag_values, required, advanced, **help_options))
        return 0
    if "--helpfull" in argv:
        print(f"{doc}\nFlags:\n{flag_values.get_help()}")
        return 0
    flag_values.unparse_flags()  # a second main() in one process starts from the defaults
    try:
        return flag_values([program, *argv])[1:]
    except flags.Error as error:
        print(f"{program}: {str(error).rstrip('.')}. See {program} --help.", file=sys.stderr)
        return USAGE_ERROR


def quiet_library_logs() -> None:
    """Errors only from absl and TensorFlow's Python loggers (``quiet.quiet_python_logs``)."""
    quiet.quiet_python_logs()
