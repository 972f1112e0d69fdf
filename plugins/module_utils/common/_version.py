# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The collection's one version helper (plain Python, no Ansible imports).

Every version the collection compares goes through here: SGLang releases
(``0.5.4.post3``, ``v0.5.23``), package versions (``0.6.7.post2``, ``2.9.1+cu128``,
``1.13.0rc1``, ``0.5.12.dev136+g9dfb1d2eb``), NVIDIA driver versions (``595.58.03``),
CUDA releases (``12.8``, ``13.0.88``) and compute capabilities (``12.0``).

Ordering follows PEP 440 as far as these strings need it:

* the release numbers compare numerically, trailing zeros do not count
  (``12.8 == 12.8.0``, ``0.5.9 < 0.5.23``);
* ``X.devN < X.aN < X.bN < X.rcN < X < X.postN`` (``alpha``/``beta``/``c``/``pre``/
  ``preview`` are read as ``a``/``b``/``rc``/``rc``/``rc``), and a ``.devN`` suffix sorts a
  pre- or post-release before the same one without it;
* the local part (``+cu128``) and a leading ``v`` are ignored.

Text without a version raises :class:`ValueError`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

__all__ = ["parse", "extract", "compare", "at_least", "major_minor", "release"]

# One version: release, optional pre, post and dev parts, optional local part.
_BODY = (
    r"(?P<release>\d+(?:\.\d+)*)"
    r"(?:[._-]?(?P<pre>alpha|beta|preview|pre|rc|a|b|c)[._-]?(?P<pre_n>\d*)(?![a-z]))?"
    r"(?:[._-]?(?P<post>post|rev|r)[._-]?(?P<post_n>\d*)(?![a-z]))?"
    r"(?:[._-]?(?P<dev>dev)[._-]?(?P<dev_n>\d*)(?![a-z]))?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[._-][a-z0-9]+)*))?"
)
_PARSE = re.compile(r"^\s*v?" + _BODY, re.IGNORECASE)
# In running text: not glued to a word or a number before it, at least one dot.
_EXTRACT = re.compile(
    r"(?<![\w.+])v?(?P<version>\d+(?:\.\d+)+"
    r"(?:[._-]?(?:alpha|beta|preview|pre|rc|a|b|c)[._-]?\d*)?"
    r"(?:[._-]?(?:post|rev|r)[._-]?\d*)?"
    r"(?:[._-]?dev[._-]?\d*)?"
    r"(?:\+[a-z0-9]+(?:[._][a-z0-9]+)*)?)"
    r"(?![\w])",
    re.IGNORECASE,
)
_PRE_PHASE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_RELEASE = 3  # phase of a final release (after a/b/rc)


def _text(value):
    if isinstance(value, bool) or value is None:
        raise ValueError("not a version: %r" % (value,))
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise ValueError("not a version: %r" % (value,))
    return value


def _match(text):
    match = _PARSE.match(_text(text))
    if not match:
        raise ValueError("no version in %r" % (text,))
    return match


def release(text):
    """The release numbers as written: ``'2.9.1+cu128'`` -> ``(2, 9, 1)``."""
    return tuple(int(part) for part in _match(text).group("release").split("."))


def parse(text):
    """A key that orders versions: ``parse('0.5.9') < parse('0.5.23')``.

    The key is ``(release, pre, post, dev)``: ``release`` without trailing zeros,
    ``pre`` ``(phase, n)`` with phase -1 for a bare ``.devN``, 0/1/2 for a/b/rc and 3 for
    none; ``post`` ``(0, 0)`` when absent, else ``(1, n)``; ``dev`` ``(1, 0)`` when
    absent, else ``(0, n)``. Raises :class:`ValueError` when ``text`` holds no version.
    """
    match = _match(text)
    numbers = [int(part) for part in match.group("release").split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    pre, post, dev = match.group("pre"), match.group("post"), match.group("dev")
    if pre:
        pre_key = (_PRE_PHASE[pre.lower()], int(match.group("pre_n") or 0))
    elif dev and not post:
        pre_key = (-1, 0)
    else:
        pre_key = (_RELEASE, 0)
    post_key = (1, int(match.group("post_n") or 0)) if post else (0, 0)
    dev_key = (0, int(match.group("dev_n") or 0)) if dev else (1, 0)
    return (tuple(numbers), pre_key, post_key, dev_key)


def extract(text):
    """The first version-like substring of ``text`` (without a leading ``v``), or ``None``.

    ``'Cuda compilation tools, release 12.8, V12.8.93'`` -> ``'12.8'``;
    ``'Driver Version: 595.58.03'`` -> ``'595.58.03'``. A version needs at least one dot,
    so ``'GPU 0'`` has none.
    """
    if text is None:
        return None
    match = _EXTRACT.search(_text(text))
    return match.group("version") if match else None


def compare(a, b):
    """-1, 0 or 1 as version ``a`` is older than, the same as or newer than ``b``."""
    key_a, key_b = parse(a), parse(b)
    return (key_a > key_b) - (key_a < key_b)


def at_least(version, minimum):
    """True when ``version`` is ``minimum`` or newer."""
    return compare(version, minimum) >= 0


def major_minor(text):
    """``'12.8.93'`` -> ``(12, 8)``; ``'13'`` -> ``(13, 0)``."""
    numbers = release(text)
    return (numbers[0], numbers[1] if len(numbers) > 1 else 0)
