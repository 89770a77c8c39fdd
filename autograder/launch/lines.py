"""What reaches a rank's output pipe, tallied by line template, for the
rank0_logs check.

The tally is made here, in the grader, from the bytes that arrive on the
rank's fds 1 and 2: print, logging, warnings, progress bars such as tqdm,
sys.__stdout__, os.write and C++ all count, and nothing the rank does to its
own Python objects can change the count. A template is the line with its numbers masked and its spacing collapsed:
"loss: 0.12  [   32/  128]" and "loss: 0.08  [   64/  128]" are one
template, written twice. tqdm redraws its bar with "\\r", so a carriage return
ends a line too.
"""

from __future__ import annotations

import re
from collections import Counter

NUMBER = re.compile(r"[-+]?\d+(?:[.,:]\d+)*(?:[eE][-+]?\d+)?")
BAR = re.compile(r"[\u2580-\u259f#]+")  # a drawn progress bar: tqdm's blocks, or #s (numbers are # by then)
SPACE = re.compile(r"\s+")
LINE_END = re.compile(r"[\r\n]")
KEPT_CHARS = 200  # of each line, before masking
MAX_TEMPLATES = 500  # distinct templates kept per stream; a flood of unique lines cannot grow memory
REPORTED = 20  # templates per stream in the record: the most written


def template(line: str) -> str:
    return SPACE.sub(" ", BAR.sub("#", NUMBER.sub("#", line[:KEPT_CHARS]))).strip()


class LineTally:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.lines = 0
        self._partial = ""

    def feed(self, text: str) -> None:
        pieces = LINE_END.split(self._partial + text)
        self._partial = pieces.pop()[: KEPT_CHARS * 2]
        for line in pieces:
            self._count(line)

    def _count(self, line: str) -> None:
        masked = template(line)
        if not masked:
            return
        self.lines += 1
        if masked in self.counts or len(self.counts) < MAX_TEMPLATES:
            self.counts[masked] += 1
            self.examples.setdefault(masked, line[:KEPT_CHARS].strip())

    def summary(self) -> list[list]:
        """[[template, count, first line written], ...], the most written first."""
        self._count(self._partial)
        self._partial = ""
        return [[t, n, self.examples[t]] for t, n in self.counts.most_common(REPORTED)]
