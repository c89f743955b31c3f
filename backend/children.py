"""What every helper process an API process spawns does first."""

from __future__ import annotations

import os
import threading
import time


def exit_with_parent() -> None:
    """End this process when its parent ends, even SIGKILLed (no shutdown code runs there):
    a helper outlives a killed API process otherwise, holding database connections."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
