"""One machine's part of the preflight, in a child process (it imports torch): join the rendezvous on the
profile's main address and port (machine 0 listens), publish this machine's facts in the store, leave a token
file in the output folder, read everyone's facts, time a short all-reduce of the real backend, print JSON.

    python -m backend.preflight.node_child '{"rank": K, "machines": N, "address": ..., "port": ..., ...}'

Stdout is one JSON object: {"facts": {rank: facts}, "tokens_seen": [...], "all_reduce_ms": ..., "error": ...}.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import time
from datetime import timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

TOKEN_DIR = ".workbench-preflight"
PACKAGES = {"workbench": "finetune-workbench", "swift": "ms-swift", "torch": "torch", "transformers": "transformers"}


def facts(ask: dict[str, Any], token: str) -> dict[str, Any]:
    import torch

    found: dict[str, Any] = {"host": socket.gethostname(), "rank": ask["rank"], "machines": ask["machines"],
                             "nproc_per_node": ask["nproc_per_node"], "token": token, "output_dir": ask["output_dir"]}
    for name, package in PACKAGES.items():
        try:
            found[name] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["cuda"] = torch.version.cuda or "none"
    found["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "none"
    found.update(json.loads(os.environ.get("WORKBENCH_FAKE_NODE_FACTS", "{}") or "{}"))  # tests: another machine
    return found


def main(ask: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    rank, machines = ask["rank"], ask["machines"]
    timeout = timedelta(seconds=ask["timeout"])
    try:
        store = dist.TCPStore(ask["address"], ask["port"], machines, is_master=rank == 0, timeout=timeout,
                              wait_for_workers=False)
    except Exception as err:  # noqa: BLE001 - said as it is
        return {"error": f"rendezvous: {type(err).__name__}: {err}", "stage": "rendezvous"}
    if store.add(f"claim/{rank}", 1) > 1:
        return {"error": f"another machine already joined as machine_rank {rank}", "stage": "ranks"}
    token = secrets.token_hex(8)
    folder = Path(ask["output_dir"]) / TOKEN_DIR
    mine: Path | None = folder / f"{rank}-{token}"
    token_error: str | None = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{rank}-{token}").write_text(socket.gethostname())
    except OSError as err:
        mine, token_error = None, str(err)
    store.set(f"facts/{rank}", json.dumps(facts(ask, token)))
    try:
        store.wait([f"facts/{k}" for k in range(machines)], timeout)
    except Exception as err:  # noqa: BLE001
        missing = [k for k in range(machines) if not store.check([f"facts/{k}"])]
        return {"error": f"machines {missing} did not join within {ask['timeout']} s ({type(err).__name__})",
                "stage": "join"}
    everyone = {k: json.loads(store.get(f"facts/{k}")) for k in range(machines)}
    seen = [k for k, f in everyone.items() if (folder / f"{k}-{f['token']}").exists()]
    result: dict[str, Any] = {"facts": everyone, "tokens_seen": seen, "token_error": token_error}
    result.update(_all_reduce(store, rank, machines, ask["backend"], timeout))
    store.add("done", 1)
    if rank == 0:  # machine 0 keeps the store alive until everyone has read it
        deadline = time.monotonic() + ask["timeout"]
        while store.add("done", 0) < machines and time.monotonic() < deadline:
            time.sleep(0.05)
    if mine is not None:
        mine.unlink(missing_ok=True)
        try:
            folder.rmdir()
        except OSError:
            pass
    del torch
    return result


def _all_reduce(store: Any, rank: int, machines: int, backend: str, timeout: timedelta) -> dict[str, Any]:
    """A short all-reduce of the run's backend (gloo on CPU, nccl on GPUs), one process a machine, timed."""
    import torch
    import torch.distributed as dist

    try:
        dist.init_process_group(backend, store=dist.PrefixStore("preflight", store), rank=rank,
                                world_size=machines, timeout=timeout)
        device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
        tensor = torch.ones(1 << 20, device=device)  # 4 MiB
        dist.all_reduce(tensor)  # the first one sets up the connections
        start = time.perf_counter()
        for _ in range(5):
            dist.all_reduce(tensor)
        if backend == "nccl":
            torch.cuda.synchronize()
        elapsed = (time.perf_counter() - start) / 5
        ok = float(tensor[0]) == float(machines ** 6)
        dist.destroy_process_group()
        return {"all_reduce_ms": round(elapsed * 1000, 2), "all_reduce_right": ok, "backend": backend}
    except Exception as err:  # noqa: BLE001
        return {"all_reduce_error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
                "backend": backend}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
