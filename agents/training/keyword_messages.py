"""The sentence for a keyword that an encoder or an environment refused, with a guess of the meant one."""

from __future__ import annotations

import difflib
import re
from typing import Any

from sit_keras.agents.training.run_settings import RUN_CONFIGURABLE, RunSettings
from sit_keras.models import registry

_UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'")


def unknown_keyword_sentence(error: TypeError, run_settings: RunSettings, settings: Any) -> str | None:
    """The sentence for a key of an encoder's kwargs that its constructor refused, with a guess; else None."""
    if len(error.args) == 2 and str(error.args[0]).startswith("Keyword argument not understood"):
        keyword = str(error.args[1])  # Keras' Layer
    else:
        found = _UNEXPECTED_KEYWORD.search(str(error))
        keyword = found.group(1) if found else None
    given = [(f"{RUN_CONFIGURABLE}.encoder_kwargs", run_settings.encoder, run_settings.encoder_kwargs),
             (f"{run_settings.agent}.value_encoder_kwargs", getattr(settings, "value_encoder", None),
              getattr(settings, "value_encoder_kwargs", None))]  # fmt: skip
    environment = {"env_kwargs": run_settings.env_kwargs, "eval_env_kwargs": run_settings.eval_env_kwargs}
    for name, kwargs in environment.items():
        if keyword is not None and keyword in (kwargs or {}):
            return (
                f"{RUN_CONFIGURABLE}.{name} has the key {keyword!r}, which environment "
                f"{run_settings.env_name!r} does not take."
            )
    for binding, encoder, kwargs in given:
        if keyword is None or encoder is None or keyword not in (kwargs or {}):
            continue
        accepted = registry.accepted_keywords(encoder)
        guess = difflib.get_close_matches(keyword, sorted(accepted), n=1)
        hint = f"did you mean {guess[0]!r}? " if guess else ""
        return (
            f"{binding} has the key {keyword!r}, which encoder {encoder!r} does not take: {hint}"
            f"it takes {', '.join(sorted(accepted - {'name', 'dtype', 'dynamic', 'trainable'}))}."
        )
    return None
