"""The control protocol of live mode (commands the dashboard sends to the engine's stdin): engine/control.py."""

from engine.control import (  # noqa: F401
    COMMANDS,
    INJECT_FAULT,
    PAUSE,
    RESUME,
    SPEED,
    decode,
    encode,
    inject_fault,
    pause,
    resume,
    speed,
)
