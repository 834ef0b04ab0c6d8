"""Blocking work (the database, SMTP) off the event loop, on the service's thread pool."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


async def in_executor(
    executor: Executor, func: Callable[..., T], /, *args: Any, **kwargs: Any
) -> T:
    """``func(*args, **kwargs)`` run on ``executor``, awaited."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, partial(func, *args, **kwargs))
