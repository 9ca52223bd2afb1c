"""A list of clip ids cut into shards: the one planner of every executor that shards
(inference's `agl.inference.executors.ray_cluster`, curation's `agl.executor.ray_map`).

`plan_shards` is a pure function of the ids and the shard count: the ids sorted, shard i
taking every n-th one from the i-th (interleaved: the AGL1K manifest's clip lengths and a
key's neighbours spread over every shard instead of piling into one). The same ids and count
always give the same shards, whatever machine plans them.
"""

from __future__ import annotations

from collections.abc import Sequence


def plan_shards(ids: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """`ids` sorted and dealt round-robin into at most `n` non-empty shards."""
    order = sorted(set(ids))
    if len(order) != len(ids):
        raise ValueError("plan_shards: duplicate ids")  # the driver plans one request per clip
    return [s for s in (tuple(order[i::n]) for i in range(max(1, n))) if s]
