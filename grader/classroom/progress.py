"""The class grading's progress on a terminal: a tqdm bar (current submissions, done and failed counts, ETA), plain
lines otherwise."""

from __future__ import annotations

import sys
import time


class Progress:
    """A tqdm bar (current submissions, done and failed counts, ETA) on a terminal; plain lines otherwise."""

    def __init__(self, total: int, stream=None):
        self.stream = stream or sys.stdout
        self.total, self.done, self.failed = total, 0, 0
        self.start = time.monotonic()
        self.bar = None
        if total and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                desc="grading",
                unit="submission",
                file=self.stream,
                dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]{postfix}",
            )
        self.shown = ""

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def _eta(self) -> str:
        finished = self.done + self.failed
        if not finished or finished >= self.total:
            return ""
        left = (time.monotonic() - self.start) / finished * (self.total - finished)
        return f", eta {duration_text(left)}"

    def finished(self, text: str, ok: bool) -> None:
        self.done += ok
        self.failed += not ok
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(text, file=self.stream)
        else:
            print(
                f"[{self.done + self.failed}/{self.total}] {text} ({self.done} done, {self.failed} failed"
                f"{self._eta()})",
                file=self.stream,
                flush=True,
            )

    def now(self, current: list[str]) -> None:
        if self.bar is not None:
            shown = ", ".join(current[:4]) + (" ..." if len(current) > 4 else "")
            text = f"done {self.done}, failed {self.failed}; now: {shown or '-'}"
            if text != self.shown:
                self.shown = text
                self.bar.set_postfix_str(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def duration_text(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
