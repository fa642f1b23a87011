"""The console scripts above both sides: training (``sit_keras.agents``) and export (``sit_keras.export``).

``entry_points`` starts each command quietly; ``evaluate`` is ``sit-eval``
(saved policies and TFLite files alike) and ``demo`` is ``sit-demo``, the
main job (train, evaluate, export): the two commands that need both sides.
The other commands live beside what they run (``agents/train.py``,
``export/cli.py``, ...).
"""
