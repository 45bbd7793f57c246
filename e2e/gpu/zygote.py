#!/usr/bin/env python3
"""The fault matrix's launcher: one process per rank that imports torch once and forks a
fresh child for every job, so a job costs a CUDA context and NCCL's init (a few seconds),
not a python start and torch import (8-10 s with torchrun on the device).

  zygote.py --rank R         a rank's server (started with RANK, LOCAL_RANK, WORLD_SIZE, ...
                             in its environment, which is what /proc/<pid>/environ shows for
                             every child: the sidecar reads the rank from there)
  zygote.py --store PORT [--stores N]  the agent stores: a TCPStore server per job (PORT+i for
                             job i) for the
                             command, as torchrun's agent hosts it (TORCHELASTIC_USE_AGENT_STORE);
                             each job is its own "attempt" (TORCHELASTIC_RESTART_COUNT), so its
                             keys live under their own prefix and a rank that dies, rank 0
                             included, takes no store down with it

Protocol (JSON lines): the driver writes {"job", "script", "stdout", "env"} to a rank's stdin;
the server forks, and answers {"job", "pid", "t"} at once and {"job", "pid", "rc", "signal", "t"}
when the child has ended. The child: its own process group (the driver kills the group: the
job and whatever it started), stdin from /dev/null, stdout and stderr appended to "stdout",
the environment updated with "env" (NCCL and PyTorch read theirs at first use, in the child),
then the script runs as __main__. An exception it does not catch leaves the child the way it
leaves python: through sys.excepthook (PyTorch's, which prefixes "[rankN]: " once
init_process_group ran) and the interpreter's exit, status 1. A store server answers
{"store": PORT} once it listens. "stop" (or EOF) ends a server; its children are the
driver's to kill.
"""
import argparse
import json
import os
import runpy
import select
import sys
import time


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def child(spec):
    """In the forked child: never returns to the server's loop."""
    os.setpgid(0, 0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    out = os.open(spec["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.close(devnull)
    for k, v in (spec.get("env") or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = str(v)
    if spec.get("cwd"):
        os.chdir(spec["cwd"])
    sys.argv = [spec["script"]] + list(spec.get("args") or [])
    try:
        runpy.run_path(spec["script"], run_name="__main__")
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001  (what python does with a script's uncaught exception)
        # Printed through sys.excepthook from the script's own frame on (not this file's or
        # runpy's), then exit 1 through the interpreter's shutdown (atexit, finalizers), as
        # for a script started alone.
        t, v, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename != spec["script"]:
            tb = tb.tb_next
        sys.excepthook(t, v, tb)
        sys.exit(1)
    sys.exit(0)


def serve_rank(a):
    # The import every job would pay, and nothing more: CUDA must not start before the fork
    # (torch.distributed is imported in the child, as e2e/gpu/overhead4_job.py does on the device).
    import torch
    cuda_up = getattr(getattr(torch, "cuda", None), "is_initialized", lambda: False)()
    say({"ready": a.rank, "pid": os.getpid(), "torch": getattr(torch, "__version__", "?"), "cuda_initialized": cuda_up})
    kids = {}  # pid -> job
    buf = b""
    fd = sys.stdin.fileno()
    while True:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            stop = False
            for line in lines:
                line = line.strip()
                if not line:
                    continue
                if line == b"stop":
                    stop = True
                    break
                try:
                    spec = json.loads(line)
                except ValueError as e:
                    say({"error": f"bad spec: {e}"})
                    continue
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    child(spec)
                kids[pid] = spec.get("job")
                say({"job": spec.get("job"), "pid": pid, "t": time.time()})
            if stop:
                break
        while kids:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            job = kids.pop(pid, None)
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -sig
            say({"job": job, "pid": pid, "rc": rc, "signal": sig, "t": time.time()})
    return 0


def serve_store(a):
    # One store per job, on ports PORT .. PORT+STORES-1: PyTorch 2.x does not prefix an agent
    # store by the restart count ("a new TCPStore for every retry"), so jobs that shared one
    # read each other's keys (the unique id, the barrier) and hung in their init.
    import datetime
    from torch.distributed import TCPStore
    stores = [TCPStore("127.0.0.1", a.store + i, None, True, datetime.timedelta(seconds=900), wait_for_workers=False)
              for i in range(a.stores)]
    say({"store": a.store, "stores": a.stores, "pid": os.getpid()})
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    del stores
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--rank", type=int, help="serve this rank's jobs")
    g.add_argument("--store", type=int, help="host the agent stores from this port on")
    ap.add_argument("--stores", type=int, default=1, help="with --store: how many stores, one per job, on consecutive ports")
    a = ap.parse_args()
    return serve_store(a) if a.store is not None else serve_rank(a)


if __name__ == "__main__":
    sys.exit(main())
