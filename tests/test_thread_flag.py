"""``sit_keras.layers.thread_flag.ThreadFlag``: set inside ``on()`` only, on this thread only."""

from __future__ import annotations

import threading

from sit_keras.layers.thread_flag import ThreadFlag


def test_a_flag_is_set_inside_on_and_restored_after_nested_uses() -> None:
    flag = ThreadFlag()
    assert not flag
    with flag.on():
        assert flag
        with flag.on():
            assert flag
        assert flag  # the outer use still holds
    assert not flag


def test_a_flag_set_on_one_thread_is_off_on_another() -> None:
    flag, seen = ThreadFlag(), []
    with flag.on():
        worker = threading.Thread(target=lambda: seen.append(bool(flag)))
        worker.start()
        worker.join()
    assert seen == [False]
