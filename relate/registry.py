"""One small registry for everything pluggable (backbones, text encoders, VLM backends, readers...).

Registration is by decorator and refuses duplicates; looking up an unknown name raises an error
that lists every valid name, so a typo in a config never falls back silently to something else.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "UnknownNameError"]


class UnknownNameError(KeyError):
    """Raised when a registry is asked for a name it does not hold."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class Registry(Generic[T]):
    """A named collection of factories of one kind (``kind`` appears in error messages)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str | None = None) -> Callable[[T], T]:
        """Decorator: ``@REG.register("name")`` (or the object's ``__name__`` when omitted)."""

        def deco(obj: T) -> T:
            key = name or getattr(obj, "__name__", None)
            if not key:
                raise ValueError(f"{self.kind} registry: cannot infer a name for {obj!r}")
            if key in self._items:
                raise ValueError(f"{self.kind} registry: {key!r} is already registered")
            self._items[key] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items)) or "(none registered)"
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; valid names: {valid}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
