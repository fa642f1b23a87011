"""Every setting's type and range, checked before a run folder is created.

Gin passes values as written: ``train_eval.num_envs = True`` or
``train_eval.total_env_steps = 64.5`` would otherwise reach the environments,
and ``ppo.learning_rate = -1.0`` would train to a NaN loss. ``check(settings,
prefix, ranges)`` reads a settings dataclass's annotations (``int``,
``float``, ``bool``, ``str``, each optionally ``| None``) and refuses, in one
sentence naming the binding, a value of another type (a boolean is not an
integer; an integer is a float; a float must be finite) or outside its range.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Range:
    """``low <= value`` (``low < value`` when not ``low_inclusive``) and ``value <= high``; ``None``: open."""

    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True

    def holds(self, value: float) -> bool:
        if self.low is not None and (value < self.low or (value == self.low and not self.low_inclusive)):
            return False
        return self.high is None or value <= self.high

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            return f"in {'[' if self.low_inclusive else '('}{self.low:g}, {self.high:g}]"
        parts = []
        if self.low is not None:
            parts.append(f"{'>=' if self.low_inclusive else '>'} {self.low:g}")
        if self.high is not None:
            parts.append(f"<= {self.high:g}")
        return " and ".join(parts)


POSITIVE = Range(0, low_inclusive=False)
NON_NEGATIVE = Range(0)
AT_LEAST_ONE = Range(1)
FRACTION = Range(0, 1)


def _plain_type(annotation: Any) -> tuple[type | None, bool]:
    """``(int, True)`` for ``int | None``; ``(None, ...)`` for annotations this check leaves alone."""
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        if len(members) != 1:
            return None, optional
        annotation = members[0]
    return (annotation if annotation in (int, float, bool, str) else None), optional


def _type_error(value: Any, kind: type) -> str | None:
    if kind is bool:
        return None if isinstance(value, bool) else "true or false"
    if isinstance(value, bool):
        return {int: "an integer", float: "a number", str: "text"}[kind]
    if kind is int:
        return None if isinstance(value, numbers.Integral) else "an integer"
    if kind is float:
        if not isinstance(value, numbers.Real):
            return "a number"
        return None if math.isfinite(value) else "a finite number"
    return None if isinstance(value, str) else "text"


def check(settings: Any, prefix: str, ranges: Mapping[str, Range] | None = None) -> None:
    """Raises ``ValueError`` for the first field of ``settings`` of the wrong type or out of ``ranges``."""
    hints = typing.get_type_hints(type(settings))
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        kind, optional = _plain_type(hints[field.name])
        if kind is None or (value is None and optional):
            continue
        expected = _type_error(value, kind)
        if expected:
            raise ValueError(f"{prefix}.{field.name} must be {expected}. Received: {field.name}={value!r}")
        bounds = (ranges or {}).get(field.name)
        if bounds is not None and not bounds.holds(value):
            raise ValueError(f"{prefix}.{field.name} must be {bounds}. Received: {field.name}={value!r}")
