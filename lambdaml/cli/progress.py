"""What a followed job prints while it runs: each epoch's line once and in order, and how far it is.

On a terminal a live line under the epoch lines shows the epoch and round of the total, rounds a
second, the time left, the last loss and what the run has cost so far; off a terminal (CI, a
pipe) the same line is printed as a plain line whenever nothing else was printed for
``PLAIN_EVERY_S``. Under ``-q`` nothing is shown.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from lambdaml.cli.output import progress as progress_console

if TYPE_CHECKING:
    from rich.live import Live

    from lambdaml.backends import JobEvent, StepEvent

#: Off a terminal, a plain progress line at least this often while a job runs.
PLAIN_EVERY_S = 10.0
#: Rounds a second are measured over this much of the recent past.
_RATE_WINDOW_S = 60.0


class JobProgress:
    """A job's progress as its workers report it: ``epoch`` for each epoch's end, ``steps`` for steps.

    Rounds are a rank's steps (mini-batches): the least advanced rank's count is the job's. Used as
    a context manager, it shows the live line (a terminal) or the plain lines (not one) meanwhile.
    ``cost_s`` prices seconds of the run since ``started_at`` (an estimate from the workers' time),
    or says None where no price applies. A resumed job's epochs go on from the first its workers
    report.
    """

    def __init__(
        self,
        epochs: int,
        *,
        started_at: float | None = None,
        cost_s: Callable[[float], float | None] | None = None,
        console: Console = progress_console,
        clock: Callable[[], float] = time.time,
        plain_every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self.epochs, self.console, self.clock, self.plain_every_s = epochs, console, clock, plain_every_s
        self.cost_s = cost_s
        self.started_at = clock() if started_at is None else started_at
        self.printed = 0  # the last epoch printed
        self.loss: float | None = None
        self._at: dict[int, tuple[int, int]] = {}  # rank -> (epochs done, steps done in the next)
        self._steps = 0  # steps per epoch, once a rank has said
        self._rates: deque[tuple[float, int]] = deque()  # (when, rounds done)
        self._lock = threading.RLock()
        self._last_line = clock()
        self._live: Live | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # --- what the workers report ---------------------------------------------------

    def epoch(self, event: JobEvent) -> None:
        """A rank ended an epoch; rank 0's is printed (its loss is the global one), each epoch once, in order."""
        with self._lock:
            self._move(event.rank, event.epoch, 0)
            if event.rank != 0 or event.epoch <= self.printed:
                return
            self.printed, self.loss = event.epoch, event.loss
        self._print(f"  epoch {event.epoch:>3}/{self.epochs}  loss {event.loss:.5f}  {event.elapsed_s:7.2f}s")

    def steps(self, event: StepEvent) -> None:
        """A rank's steps within an epoch."""
        with self._lock:
            self._steps = event.steps or self._steps
            self._move(event.rank, event.epoch, event.step)

    def _move(self, rank: int, epoch: int, step: int) -> None:
        if (epoch, step) > self._at.get(rank, (-1, -1)):
            self._at[rank] = (epoch, step)
        done = self.rounds_done()
        if done is not None:
            now = self.clock()
            self._rates.append((now, done))
            while len(self._rates) > 2 and now - self._rates[1][0] > _RATE_WINDOW_S:
                self._rates.popleft()

    # --- what is shown ---------------------------------------------------------------

    def rounds_done(self) -> int | None:
        """Rounds every rank has done (the least advanced rank's), once the steps per epoch are known."""
        if not self._steps or not self._at:
            return None
        epoch, step = min(self._at.values())
        return epoch * self._steps + step

    def rate(self) -> float | None:
        """Rounds a second over the recent past; None until two reports a second apart differ."""
        if len(self._rates) < 2:
            return None
        (t0, r0), (t1, r1) = self._rates[0], self._rates[-1]
        return (r1 - r0) / (t1 - t0) if t1 - t0 >= 1.0 and r1 > r0 else None

    def line(self) -> str:
        """The progress line, e.g.
        ``  epoch 2/3  round 1120/2400  3.1 rounds/s  ETA 6.9m  loss 0.69314  ~$0.0123 so far (est.)``."""
        from analytic_model.advisor import format_money, format_time

        with self._lock:
            done, rate = self.rounds_done(), self.rate()
            epochs_done = min(self._at.values())[0] if self._at else self.printed
            parts = [f"  epoch {min(epochs_done + 1, self.epochs)}/{self.epochs}"]
            if done is None:
                parts.append("waiting for the workers' first rounds")
            else:
                total = self.epochs * self._steps
                parts.append(f"round {done}/{total}")
                if rate is not None:
                    shown = f"{rate:.1f}" if rate >= 1 else f"{rate:.2g}"
                    parts += [f"{shown} rounds/s", f"ETA {format_time(max(total - done, 0) / rate)}"]
            if self.loss is not None:
                parts.append(f"loss {self.loss:.5f}")
            cost = self.cost_s(max(self.clock() - self.started_at, 0.0)) if self.cost_s is not None else None
            if cost is not None:
                parts.append(f"~{format_money(cost)} so far (est.)")
            return "  ".join(parts)

    def _print(self, line: str) -> None:
        # Not under the lock: printing above a live line takes the live display's lock, whose
        # refresh thread takes this one to draw the line.
        self.console.print(line)
        with self._lock:
            self._last_line = self.clock()

    # --- showing it meanwhile -----------------------------------------------------

    def __enter__(self) -> JobProgress:
        if self.console.quiet:
            return self
        if self.console.is_terminal:
            from rich.live import Live

            self._live = Live(
                console=self.console,
                get_renderable=lambda: Text(self.line(), no_wrap=True, overflow="ellipsis"),
                refresh_per_second=2,
                transient=True,  # the live line goes; the epoch lines above it stay
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        else:
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.stop()
        if self._ticker is not None:
            self._ticker.join(timeout=5)

    def _tick(self) -> None:
        """Off a terminal: the progress line whenever no line was printed for ``plain_every_s``."""
        while not self._stop.wait(max(0.1, self._last_line + self.plain_every_s - self.clock())):
            if self.clock() - self._last_line >= self.plain_every_s:
                self._print(self.line())


def progress_of(job: Any, backend: str, *, started_at: float | None = None) -> JobProgress:
    """The progress of a job on a backend (by name), its cost so far estimated from its workers' time."""
    from lambdaml.errors import LambdaMLError
    from lambdaml.runtime.results import run_time_cost

    def cost_s(seconds: float) -> float | None:
        try:
            return run_time_cost(job, seconds, backend)
        except LambdaMLError:  # a region the price table lacks: the line goes without a cost
            return None

    return JobProgress(job.algorithm.epochs, started_at=started_at, cost_s=cost_s)
