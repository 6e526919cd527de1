"""``TextEnum``: the base of every string-valued enum that crosses a seam (backends, install modes, load
kinds, error kinds).

A member is its string (``Backend.TORCH == "torch"``, with the string's hash), prints and formats as its
value on every
Python the package supports (a plain ``(str, Enum)`` formats as ``Backend.TORCH`` from Python 3.11
on), serialises to JSON as that string, and ``parse`` names the bad value and the choices.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the module needs nothing outside the standard library
    from typing_extensions import Self

__all__ = ["TextEnum"]


class TextEnum(str, enum.Enum):
    """A string-valued enum member: equal to, printed as and serialised as its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __hash__(self) -> int:  # as its string, so a member finds the string's dict entries and back
        return str.__hash__(self)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def choices(cls) -> tuple[str, ...]:
        """The values, in definition order."""
        return tuple(str(member.value) for member in cls)

    @classmethod
    def parse(cls, text: object, what: str) -> Self:
        """The member whose value is ``text``.

        Raises:
            ValueError: ``text`` is not a value; the message names ``what``, the value and the choices.
        """
        for member in cls:
            if member.value == text:
                return member
        raise ValueError(f"{what}={text!r} is not one of {', '.join(cls.choices())}")

    @classmethod
    def lookup(cls, text: object) -> Self | None:
        """The member whose value is ``text``, or None (a value written by another version)."""
        for member in cls:
            if member.value == text:
                return member
        return None
