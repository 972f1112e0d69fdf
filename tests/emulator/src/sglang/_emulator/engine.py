"""Fake token generation with accurate, cheap pacing.

Every active request decodes at ``min(single, ceiling / n)`` tok/s, where n is the number
of requests active right now. Each request keeps an absolute monotonic deadline per
token (``deadline += 1 / rate``), so sleep overshoot does not accumulate and the measured
rate stays within a fraction of a percent of the target. Threads sleep; nothing spins.
"""

import collections
import threading
import time

# Seconds over which /metrics' sglang:gen_throughput counts the generated tokens.
THROUGHPUT_WINDOW_S = 5.0

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
    "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
    "zulu amber basalt cobalt dune ember fjord glacier harbor island jasper karst "
    "lagoon meadow nebula orchid prairie quartz river summit tundra umber valley willow"
).split()


def prompt_tokens(text):
    """One token per whitespace-separated word."""
    if text is None:
        return 0
    return len(str(text).split())


def word(i, seed=0):
    return WORDS[(i * 7 + seed) % len(WORDS)]


def token_text(i, seed=0):
    """Text of output token i: words joined by single spaces."""
    return (" " if i else "") + word(i, seed)


def sleep_until(deadline):
    while True:
        delay = deadline - time.monotonic()
        if delay <= 0:
            return
        time.sleep(delay)


class Engine:
    def __init__(self, single, ceiling, ttft_s):
        self.single = float(single)
        self.ceiling = float(ceiling)
        self.ttft_s = max(float(ttft_s), 0.0)
        self._lock = threading.Lock()
        self.active = 0
        self.peak_active = 0
        self.requests_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self._recent = collections.deque()  # monotonic times of the tokens of the window

    def rate(self):
        n = max(self.active, 1)
        return min(self.single, self.ceiling / n)

    def _forget(self, now):
        horizon = now - THROUGHPUT_WINDOW_S
        while self._recent and self._recent[0] <= horizon:
            self._recent.popleft()

    def gen_throughput(self, now=None):
        """Recent generation throughput (tok/s): tokens of the last THROUGHPUT_WINDOW_S seconds.

        The real scheduler reports the tokens decoded since its last decode log divided by
        the time since then; this is the same idea over a fixed window (0 when idle).
        """
        with self._lock:
            self._forget(time.monotonic() if now is None else now)
            return len(self._recent) / THROUGHPUT_WINDOW_S

    def generate(self, n_tokens, n_prompt=0):
        """Yield token indices 0..n_tokens-1, each at its paced time."""
        with self._lock:
            self.active += 1
            self.requests_total += 1
            self.prompt_tokens_total += n_prompt
            self.peak_active = max(self.peak_active, self.active)
        try:
            deadline = time.monotonic() + self.ttft_s
            for i in range(n_tokens):
                if i:
                    deadline += 1.0 / self.rate()
                sleep_until(deadline)
                with self._lock:
                    self.generation_tokens_total += 1
                    self._recent.append(time.monotonic())
                    self._forget(self._recent[-1])
                yield i
        finally:
            with self._lock:
                self.active -= 1
