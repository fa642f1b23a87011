"""A trained teacher's small folder: what distillation and the cart-pole tests read of it, and its records.

``sit-distill`` and ``benchmarks/pi_cartpole_distill.py`` read three things of
a teacher: its description (``policy_network.json``), its greedy SavedModel
(``policies/greedy_policy`` and the newest checkpoint of its weights: the
actions it labels) and, to test it beside its
students, its acting network's weights (``checkpoints/``). A training folder
holds far more: the whole agent's checkpoints and a replay buffer (about 57 MB
for the CartPoleSwingUpHarder SAC teacher). This copies the first two, writes
the acting network's variables alone as the checkpoint (under a megabyte in
all for that teacher), and keeps the run's records (``config.gin``,
``run_settings.json``, ``evaluations.json``), so that a teacher can be
committed beside the results it taught and a student's command reruns on a
fresh machine without training the teacher again.

Usage::

    python benchmarks/teacher_folder.py --root_dir runs/harder/sac_teacher \\
        --out benchmarks/teachers/cartpole_swingup_harder_sac
"""

from __future__ import annotations

import sit_keras.quiet_start  # noqa: F401  (first: drops TensorFlow's start-up chatter)

# isort: split

import os
import re
import shutil
import sys
from collections.abc import Sequence

from sit_keras.agents import evaluate
from sit_keras.agents.algorithms import bc
from sit_keras.agents.networks import policy_network
from sit_keras.benchmarking import SentenceParser, UsageError, parse_or_say_why

RECORDS = ("config.gin", "run_settings.json", "evaluations.json")


def main(argv: Sequence[str] | None = None) -> int:
    def parse(argv: Sequence[str] | None):
        parser = SentenceParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--root_dir", required=True, help="the teacher's training folder")
        parser.add_argument("--out", required=True, help="the small folder to write (must not exist)")
        args = parser.parse_args(argv)
        needs = {
            policy_network.DESCRIPTION_FILE: "no policy_network.json (not a sit-train folder)",
            policy_network.CHECKPOINT_DIR: "no checkpoints/",
            os.path.relpath(bc.teacher_policy_dir(args.root_dir), args.root_dir): "no greedy SavedModel",
        }
        for name, missing in needs.items():
            if not os.path.exists(os.path.join(args.root_dir, name)):
                raise UsageError(f"--root_dir {args.root_dir!r} holds {missing}.")
        if os.path.exists(args.out):
            raise UsageError(f"--out {args.out!r} exists; give a new folder.")
        return args

    args = parse_or_say_why(parse, argv)
    if args is None:
        return 2
    description = policy_network.read_description(args.root_dir)
    net = policy_network.build_network(description)
    path = policy_network.restore_network(net, args.root_dir, description.checkpoint_attribute)
    step = int(re.search(r"ckpt-(\d+)$", path).group(1))
    greedy = bc.teacher_policy_dir(args.root_dir)
    shutil.copytree(greedy, os.path.join(args.out, os.path.relpath(greedy, args.root_dir)))
    # The SavedModel holds the weights of its first save; training then writes only their checkpoints.
    weights = evaluate.newest_policy_checkpoint(greedy)
    if weights is not None:
        shutil.copytree(weights, os.path.join(args.out, os.path.relpath(weights, args.root_dir)))
    for name in (policy_network.DESCRIPTION_FILE, *RECORDS):
        if os.path.exists(os.path.join(args.root_dir, name)):
            shutil.copy2(os.path.join(args.root_dir, name), os.path.join(args.out, name))
    saved = policy_network.save_network(net, args.out, description.checkpoint_attribute, step)
    print(f"Wrote {args.out}: the acting network of {path} ({saved}) and the greedy SavedModel ({weights})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
