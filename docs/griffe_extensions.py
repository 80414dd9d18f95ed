"""What the API pages leave out of what Python gives every class.

A class made with ``from __future__ import annotations`` (a dataclass, a named tuple) has an
``__annotations__`` attribute at run time; the pages document the class's fields, never that
dictionary of their types.
"""

from __future__ import annotations

from typing import Any

import griffe


class NoAnnotationsAttribute(griffe.Extension):
    """Drop ``__annotations__`` from every class the pages inspect."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        cls.members.pop("__annotations__", None)
