"""What the API pages leave out of what Python gives every class.

A class made with ``from __future__ import annotations`` (a dataclass, a named tuple) has an
``__annotations__`` attribute at run time; the pages document the class's fields, never that
dictionary of their types. A ``typing.Protocol`` is given an ``__init__`` by ``typing`` itself,
which says nothing of the protocol (and which the pages could not resolve).
"""

from __future__ import annotations

from typing import Any

import griffe


class NoAnnotationsAttribute(griffe.Extension):
    """Drop ``__annotations__`` from every class the pages inspect, and the ``__init__`` that
    ``typing`` gives a protocol."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        cls.members.pop("__annotations__", None)
        init = cls.members.get("__init__")
        if init is not None and init.is_alias and init.target_path.startswith("typing."):
            cls.members.pop("__init__")
