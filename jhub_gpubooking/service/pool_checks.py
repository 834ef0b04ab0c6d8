"""Every pool is checked at start: a misconfigured pool stops the service at deploy, in one
sentence naming the pool, instead of failing each user's spawn."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..core.model import Pool
from ..gpu import BackendFunc, check_pool_backend


def check_pools(pools: Iterable[Pool], backends: Mapping[str, BackendFunc]) -> None:
    """Translate the smallest and a whole share of each pool with its backend; raise
    ``ValueError`` (one line naming the pool and the problem) for the first that fails."""
    for pool in pools:
        try:
            check_pool_backend(pool, backends)
        except Exception as error:  # a custom backend may fail any way; say which pool
            problem = (str(error).strip().splitlines() or [type(error).__name__])[0]
            if f"pool {pool.name}".lower() not in problem.lower():
                problem = f"Pool {pool.name} (GPU backend {pool.backend!r}): {problem}"
            raise ValueError(problem) from error
