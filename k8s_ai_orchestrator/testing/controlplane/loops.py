"""What a test plane's control loop is doing, for a test that waited in vain.

The node agent and our syncer each run one loop thread that records the exceptions it met
and goes on; when a wait times out, the test says whether the loop is alive, where it is and
what it last failed on.

Example:
    >>> import threading
    >>> idle = threading.Thread(target=lambda: None)
    >>> describe_loop("agent", idle, [ValueError("bad pod")])
    'agent: loop alive=False, 1 errors, the last: ["ValueError: bad pod"]; not running'
    >>> refused = ApiException(status=403, reason="Forbidden")
    >>> refused.body = '{"message": "unable to create new content in namespace ns1"}'
    >>> _one_line(refused)
    'ApiException: 403 Forbidden: unable to create new content in namespace ns1'
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Sequence

from kubernetes.client.rest import ApiException

from ...backends.kubernetes.api import api_message

MAX_ERROR_CHARS = 300  # an error's message is cut here in a description


def describe_loop(name: str, thread: threading.Thread, errors: Sequence[BaseException]) -> str:
    """`name`'s loop: alive or not, its last errors, and the last frames of where it is."""
    frame = sys._current_frames().get(thread.ident or -1)
    where = "".join(traceback.format_stack(frame)[-3:]) if frame is not None else ""
    last = ", ".join(f'"{_one_line(error)}"' for error in errors[-3:])
    head = f"{name}: loop alive={thread.is_alive()}, {len(errors)} errors, the last: [{last}]"
    return f"{head}; at:\n{where}" if where else f"{head}; not running"


def _one_line(error: BaseException) -> str:
    """An error as one short line: its type and message (an ApiException's status, reason and
    the server's message, not the response headers its text starts with)."""
    message = api_message(error) if isinstance(error, ApiException) else str(error)
    text = " ".join(message.split())
    return f"{type(error).__name__}: {text[:MAX_ERROR_CHARS]}"
