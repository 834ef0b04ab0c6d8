"""Every kind of write at once, on every backend: no deadlock, no lock hang, nothing overbooked.

See :mod:`concurrent_walk`. ``WRITE_WALK_SEED`` and ``WRITE_WALK_ACTIONS`` run other walks
(a found failure names its seed).
"""

from __future__ import annotations

import os

import pytest
from concurrent_walk import LIMITED, ConcurrentWalk, check_invariants, walk_pools

SEED = int(os.environ.get("WRITE_WALK_SEED", "1"))
ACTIONS = int(os.environ.get("WRITE_WALK_ACTIONS", "60"))


@pytest.fixture
def pools():
    return walk_pools()


def test_concurrent_writes_of_every_kind_fail_only_as_refusals(make_store):
    store = make_store(group_policies=LIMITED)
    result = ConcurrentWalk(store, SEED, ACTIONS).run()
    failures = "\n".join(str(failure) for failure in result.failures)
    assert not result.failures, f"seed {SEED}: {len(result.failures)} failed:\n{failures}"
    assert check_invariants(store, store.now()) == []
    # the walk did what it is for: bookings made and ended, waits served, rules applied
    for action in ("create", "end", "extend", "claim", "wait", "sync", "flag", "maintenance",
                   "pod_claim", "rename"):
        assert result.done[action] > 0, (action, result.done, result.refused)
    # a grant needs a GPU free for its whole horizon, which the busy walk seldom has
    assert result.done["grant"] + result.refused["grant"] > 0
    assert result.refused["create"] > 0, "no create was refused: the pools never filled"
