"""What `wait` shows while a job runs: its state, each change, and the elapsed time.

On a terminal, one line rewritten in place; elsewhere (CI logs, pipes), one plain line per change of state; in
a notebook, a display that updates in place. Always on stderr (stdout holds only results). The platform's words
in it (its state, its message, the console link) are shown as text: escape sequences in them do not act.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from crosstrain import colour
from crosstrain.safe import redact, terminal

if TYPE_CHECKING:
    from crosstrain.records import JobStatus


def elapsed_text(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """Called with every status a poll reads; says what changed."""

    def __init__(
        self,
        identity: str,
        console_url: str = "",
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        live: bool | None = None,
    ) -> None:
        self.identity = identity
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.live = self.stream.isatty() if live is None else live
        self.last: tuple[str, str] | None = None
        self._notebook = _notebook_display()
        if console_url and self._notebook is None:
            self._line(f"{identity}: console {console_url}", keep=True)

    def __call__(self, status: JobStatus) -> None:
        state = (status.state.value, status.native_state)
        text = f"{self.identity}: {status.state.value} ({status.native_state}) after {elapsed_text(self.elapsed)}"
        if status.message and status.state.terminal:
            text += f": {status.message}"
        if self._notebook is not None:  # a notebook shows the one display, updated in place
            self._notebook(text)
        elif self.live:
            self._line(text, keep=status.state.terminal)
        elif state != self.last:
            self._line(text, keep=True)
        self.last = state

    @property
    def elapsed(self) -> float:
        return self.clock() - self.start

    def _line(self, text: str, *, keep: bool) -> None:
        text = terminal(redact(text))
        if self.live and colour.enabled(self.stream):  # the state's word in its colour, once made safe
            for name in colour.STATES:
                text = text.replace(f": {name} (", f": {colour.paint(name, colour.STATES[name], True)} (", 1)
        try:
            if self.live:
                self.stream.write("\r\x1b[K" + text + ("\n" if keep else ""))
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed stderr never fails the wait
            pass


def _notebook_display() -> Callable[[str], None] | None:
    """An in-place display when running in a Jupyter kernel, else None."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        return None
    shell: Any = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return None
    handle: Any = display(HTML(""), display_id=True)  # type: ignore[no-untyped-call]

    def update(text: str) -> None:
        import html

        handle.update(HTML(f"<code>{html.escape(text)}</code>"))  # type: ignore[no-untyped-call]

    return update
