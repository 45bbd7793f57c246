#!/usr/bin/env python3
"""Phase plans of the 4-GPU slowdown jobs (issue 22): one job runs healthy, then a fault on
one rank, healthy again, another fault on another rank, ... so one launch covers many cases.

  phases.py PLAN              the plan as JSON (job.py's PHASES)
  phases.py PLAN --hogs       "GPU:POOL" per GPU that needs hog.py, one per line
  phases.py PLAN --estimate   the expected job length in seconds (for run.sh's cap)
  phases.py --list            the plans

Plans:
  phases_nvl   NVLink (NCCL's default transport): slow hosts (persistent 1.3x, 5x, 10x;
               intermittent 2 s stalls) and slow GPUs (a hog at 25 % duty, 1 and 4 hog
               processes; intermittent 3 s of every 8 s), each on its own rank, a healthy
               phase between any two
  phases_sock  the socket transport for the whole job (run.sh sets NCCL_P2P_DISABLE=1
               NCCL_SHM_DISABLE=1 and the rate-limit shim): slow links (rank 1 at two
               rates; rank 2 intermittently)
  phases_nvl2, phases_sock2
               the same classes on ranks 0 and 1 of a 2-rank job (two GPUs)
  phases_mini  a short one for dry runs and smoke tests: one fault of each class

Environment: PHASE_SCALE (1.0) multiplies every phase's min_s (dry runs use less);
PHASE_EST_STEP_S (0.15) the healthy step time --estimate assumes;
PLAN_<name>=@file.json or a JSON list replaces a plan (tune severities on the device
without editing this file); RATE_MILD, RATE_STRONG, RATE_BURST (phases_sock's rates,
bytes/s with K/M/G: 250M, 35M, 20M).

A phase: {"name", "fault": null|"host"|"gpu"|"link", "rank", "mode": "persistent"|
"intermittent", "class" (the cause class the watchdog should name: host, gpu or link),
"severity", "min_s", "min_steps"}. Severity: host {"factor": F} (sleep (F-1) x the healthy
step before the collectives every step) or {"stall_s", "every"} (intermittent); gpu
{"workers", "duty"} (+ {"on_s", "every_s"} intermittent); link {"rate"} (+ on_s, every_s).
"""
import json
import os
import sys


def healthy(name, s):
    return {"name": name, "fault": None, "min_s": s, "min_steps": 20}


def fault(name, kind, rank, s, mode="persistent", steps=20, **sev):
    return {"name": name, "fault": kind, "rank": rank, "mode": mode, "class": kind, "severity": sev,
            "min_s": s, "min_steps": steps}


def plans():
    mild, strong, burst = (os.environ.get(k, d) for k, d in (("RATE_MILD", "250M"), ("RATE_STRONG", "35M"), ("RATE_BURST", "20M")))
    return {
        "phases_nvl": [
            healthy("healthy_start", 15),
            fault("host_r1_1.3x", "host", 1, 15, factor=1.3),
            healthy("healthy_1", 10),
            fault("host_r2_5x", "host", 2, 15, factor=5),
            healthy("healthy_2", 10),
            fault("host_r3_stalls", "host", 3, 20, mode="intermittent", stall_s=2.0, every=10),
            healthy("healthy_3", 10),
            fault("host_r0_10x", "host", 0, 15, factor=10),
            healthy("healthy_4", 10),
            fault("gpu_r1_1hog", "gpu", 1, 15, workers=1, duty=1.0),
            healthy("healthy_5", 10),
            fault("gpu_r0_quarterhog", "gpu", 0, 15, workers=1, duty=0.25),
            healthy("healthy_6", 10),
            fault("gpu_r3_4hogs", "gpu", 3, 15, workers=4, duty=1.0),
            healthy("healthy_7", 10),
            fault("gpu_r2_bursts", "gpu", 2, 24, mode="intermittent", workers=3, duty=1.0, on_s=3, every_s=8),
            healthy("healthy_end", 12),
        ],
        "phases_sock": [
            healthy("healthy_start", 15),
            fault("link_r1_mild", "link", 1, 15, rate=mild),
            healthy("healthy_1", 10),
            fault("link_r1_strong", "link", 1, 15, rate=strong),
            healthy("healthy_2", 10),
            fault("link_r2_bursts", "link", 2, 20, mode="intermittent", rate=burst, on_s=2, every_s=6),
            healthy("healthy_end", 12),
        ],
        # Two GPUs (nvidia-h100-x2, when no 4-GPU machine is lent): the same classes on
        # ranks 0 and 1 of a 2-rank job, one rank per GPU.
        "phases_nvl2": [
            healthy("healthy_start", 15),
            fault("host_r1_1.3x", "host", 1, 15, factor=1.3),
            healthy("healthy_1", 10),
            fault("host_r0_5x", "host", 0, 15, factor=5),
            healthy("healthy_2", 10),
            fault("host_r1_stalls", "host", 1, 20, mode="intermittent", stall_s=2.0, every=10),
            healthy("healthy_3", 10),
            fault("gpu_r1_1hog", "gpu", 1, 15, workers=1, duty=1.0),
            healthy("healthy_4", 10),
            fault("gpu_r0_quarterhog", "gpu", 0, 15, workers=1, duty=0.25),
            healthy("healthy_5", 10),
            fault("gpu_r1_bursts", "gpu", 1, 24, mode="intermittent", workers=3, duty=1.0, on_s=3, every_s=8),
            healthy("healthy_end", 12),
        ],
        "phases_sock2": [
            healthy("healthy_start", 15),
            fault("link_r1_mild", "link", 1, 15, rate=mild),
            healthy("healthy_1", 10),
            fault("link_r1_strong", "link", 1, 15, rate=strong),
            healthy("healthy_2", 10),
            fault("link_r0_bursts", "link", 0, 20, mode="intermittent", rate=burst, on_s=2, every_s=6),
            healthy("healthy_end", 12),
        ],
        "phases_mini": [
            healthy("healthy_start", 8),
            fault("host_r1_3x", "host", 1, 8, factor=3),
            healthy("healthy_1", 6),
            fault("gpu_r2_2hogs", "gpu", 2, 8, workers=2, duty=1.0),
            healthy("healthy_2", 6),
            fault("host_r3_stalls", "host", 3, 10, mode="intermittent", stall_s=1.5, every=8),
            healthy("healthy_end", 6),
        ],
        "phases_mini_sock": [
            healthy("healthy_start", 8),
            fault("link_r1", "link", 1, 8, rate=os.environ.get("RATE_MINI", "1M")),
            healthy("healthy_end", 8),
        ],
    }


def plan(name):
    env = os.environ.get(f"PLAN_{name}")
    if env:
        if env.startswith("@"):
            with open(env[1:]) as f:
                env = f.read()
        p = json.loads(env)
    else:
        p = plans().get(name)
        if p is None:
            sys.exit(f"phases.py: no plan {name!r}; plans: {', '.join(plans())}")
    scale = float(os.environ.get("PHASE_SCALE", "1"))
    for ph in p:
        ph["min_s"] = round(float(ph.get("min_s", 20)) * scale, 2)
    return p


def hogs(p):
    """GPU -> warm hog workers needed (the most any one phase on it asks for)."""
    need = {}
    for ph in p:
        if ph.get("fault") == "gpu":
            g = int(ph["rank"])  # one rank per GPU: rank r on cuda:r
            need[g] = max(need.get(g, 0), int((ph.get("severity") or {}).get("workers", 1)))
    return need


def estimate(p, step_s=None):
    """Seconds: every phase at least min_s, or min_steps at its slowed step time
    (PHASE_EST_STEP_S: the healthy step, 0.15 s on the device)."""
    step_s = step_s or float(os.environ.get("PHASE_EST_STEP_S", "0.15"))
    t = 0.0
    for ph in p:
        sev = ph.get("severity") or {}
        slow = float(sev.get("factor", 1))
        if ph.get("fault") == "host" and ph.get("mode") == "intermittent":
            slow = 1 + float(sev.get("stall_s", 2)) / max(1, int(sev.get("every", 10))) / step_s
        t += max(float(ph["min_s"]), int(ph.get("min_steps", 20)) * step_s * slow) + step_s
    return t


def main():
    a = sys.argv[1:]
    if not a or a[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if a[0] == "--list":
        print("\n".join(plans()))
        return 0
    p = plan(a[0])
    if "--hogs" in a:
        for g, n in sorted(hogs(p).items()):
            print(f"{g}:{n}")
    elif "--estimate" in a:
        print(int(estimate(p) + 0.5))
    else:
        print(json.dumps(p, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
