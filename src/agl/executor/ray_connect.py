"""Joining a Ray cluster (params.yaml `executor.ray`): what the inference executor
(`agl.inference.executors.ray_cluster`) and the per-clip map (`agl.executor.ray_map`) share.

Ray is an optional extra and takes seconds to import: it is imported here, on first use,
never at `import agl`.
"""

from __future__ import annotations

import atexit
import contextlib
import socket
from typing import Any
from urllib.parse import urlsplit

from agl.errors import AglError
from agl.executor import ray_leftovers
from agl.executor.config import RayConfig

INSTALL = 'the ray executor needs Ray: pip install -e ".[ray]" (or pip install "ray==2.60.*")'


def require_ray() -> Any:
    """The `ray` module, or one AglError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise AglError(INSTALL) from None
    return ray


def actor_pool_size(nodes: list[dict[str, Any]], cfg: RayConfig, shards: int) -> int:
    """`cfg.actors`, or one actor per alive node that can hold one (its CPUs and GPUs at least
    an actor's `num_cpus` / `num_gpus`), at most one per shard. A node that cannot hold one (the
    usual head started with 0 CPUs) is not counted: an actor sized for it would never be placed
    and the stage would wait for it forever."""
    def fits(node: dict[str, Any]) -> bool:
        have = node.get("Resources") or {}
        return (bool(node.get("Alive")) and have.get("CPU", 0) >= cfg.num_cpus
                and have.get("GPU", 0) >= cfg.num_gpus)

    return min(shards, cfg.actors or max(1, sum(1 for node in nodes if fits(node))))


def connect(ray: Any, cfg: RayConfig) -> None:
    """Join `cfg.address` (None: start a local Ray sized to this machine); an address that
    does not answer is one AglError naming it. A process already connected stays so."""
    if ray.is_initialized():
        return
    address = cfg.address
    if address not in (None, "auto", "local"):
        _reachable(address, cfg.connect_timeout_s)
    local = address in (None, "local")
    if local:  # what a killed driver's local Ray left running (ray_leftovers)
        ray_leftovers.end_leftovers()
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR", configure_logging=True)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AglError(f"cannot reach the Ray cluster at {address}: {first}; start it (ray start "
                       "--head) or fix executor.ray.address / --ray-address") from None
    if local:
        with contextlib.suppress(Exception):  # a note is a courtesy to the next run, never a failure
            ray_leftovers.note_session(ray._private.worker._global_node.get_session_dir_path())
            atexit.register(ray_leftovers.forget_session)  # after Ray's own shutdown at exit


def _reachable(address: str, timeout_s: float) -> None:
    """A TCP connect to host:port of `address` (ray://host:port or host:port), so an address
    that is down fails in seconds and in one line, not after Ray's minute of retries."""
    parts = urlsplit(address if "://" in address else f"//{address}")
    host, port = parts.hostname, parts.port
    if not host or not port:
        raise AglError(f"executor.ray.address: '{address}' is not host:port, ray://host:port, auto "
                       "or null")
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise AglError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; start it "
                       "(ray start --head) or fix executor.ray.address / --ray-address") from None


def work_in(folder: str) -> None:
    """Inside a Ray worker: change to the driver's folder, where every relative path of the
    run starts (the repository, on a filesystem every node mounts at the same path); one line
    where this node lacks it."""
    import os

    try:
        os.chdir(folder)
    except OSError as exc:
        raise AglError(f"ray: {folder} is not on this node ({exc.strerror}); the repository must "
                       "be on a filesystem every node mounts at the same path (docs/cluster.md)") from None
