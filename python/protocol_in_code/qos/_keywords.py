"""A function's ``**options: Unpack[Keywords]`` shown to ``inspect`` as the keywords they are.

The web forms and the Redis limiters each declare their options once, as a ``TypedDict`` of
keywords and a record of defaults, and take them as ``**options``. Type checkers read the
``Unpack``; ``inspect.signature`` and ``help()`` would show only ``**options``. So each form's
``__signature__`` lists, in place of ``**options``, one keyword-only parameter per option.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

_Function = TypeVar("_Function", bound=Callable[..., Any])


def spell_out(function: _Function, options: Iterable[tuple[str, Any, Any]]) -> _Function:
    """Give ``function`` (whose last parameter is ``**options``) a ``__signature__`` with one
    keyword-only parameter for each ``(name, annotation, default)`` of ``options``, in that
    order, in place of ``**options``. The function is given back as it is, not wrapped: a form
    that reads its caller's frame still finds it one frame up."""
    signature = inspect.signature(function)
    *named, last = signature.parameters.values()
    if last.kind is not inspect.Parameter.VAR_KEYWORD:
        raise TypeError(f"{function.__qualname__} takes no **options to spell out")
    spelled = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        for name, hint, default in options
    ]
    function.__signature__ = signature.replace(parameters=[*named, *spelled])  # type: ignore[attr-defined]
    return function
