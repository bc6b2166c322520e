"""A module that starts a thread when imported: a fork server must refuse to preload it."""

import threading
import time

threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
