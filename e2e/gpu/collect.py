#!/usr/bin/env python3
"""Turns run.sh's work directory into results.json (python3 standard library only).

  collect.py --work WORKDIR --out results.json

Can be rerun offline on an unpacked logs.tgz + samples.tgz (both unpack into one folder).
Per case: the fault line the job printed, the incidents the detector showed for that job
(first time seen by the 0.5 s poller, opened_at, fault_at), the verdict against the expected
kind and culprit rank, PyTorch's own timeout, NVML readings per phase (computing, waiting in
a collective, idle) as the sidecar published them and, in plugin mode, what the profiler
plugin's files said at the end.

A case passes when the detector opened exactly one incident while it ran, of the expected
kind, naming the rank that injected the fault (the rank of its WATCHDOG_FAULT line); a case
that must raise none passes with none. Any other incident fails the case: one root cause,
one page. EXPECT_<case>=kind[,kind...] accepts other kind names (e.g. while a rule is named).
"""
import argparse
import datetime
import glob
import json
import os
import re
import statistics
import sys
import time

# case -> the incident kinds that name its root cause; None: the case must raise no incident.
# The culprit is the rank that printed WATCHDOG_FAULT (job.py's FAULT_RANK).
EXPECTED = {
    "healthy": None,
    "pause": None,
    "silent": ("hang",),
    "frozen": ("hang",),
    "crash": ("crash",),
    "wrong_op": ("mismatch",),
    "wrong_size": ("mismatch",),
    "wrong_dtype": ("mismatch",),
    "sub_mismatch": ("mismatch",),
    "order_inversion": ("order_inversion",),
    "order_inversion_full": ("order_inversion",),
    "straggler_onset": ("straggler",),
    # Its host issued every op; the GPU never started them. Plugin: a hang whose GPU did not
    # start the op; logs alone: every count level, a collective stuck in flight.
    "gpu_hang": ("hang", "stuck_in_flight"),
    "p2p_skip": ("p2p_mismatch", "hang"),
}
DEFAULT_CULPRIT = 1  # when the job never printed its fault line


def expected_kinds(case):
    """EXPECTED, with EXPECT_<case>=kind[,kind] from the environment taking over."""
    env = os.environ.get(f"EXPECT_{case}")
    if env is not None:
        kinds = tuple(k.strip() for k in env.split(",") if k.strip())
        return kinds or None
    return EXPECTED.get(case, "unknown")

MONITORING_JOB = "_ncclwatch"  # the detector files incidents about itself and its inputs here
MARKER_START = re.compile(r"WATCHDOG_(INFO|PHASE|FAULT) \{")
JSON = json.JSONDecoder()
PT_TIMEOUT = "Watchdog caught collective operation timeout"
# The global rank from PyTorch's "[rankN]:" prefix; "[Rank N]" / "[PG ID .. Rank N]" is the
# rank inside the process group, the global one only for the default group.
PT_RANK = re.compile(r"^\[rank(\d+)\]:|\[(?:PG ID \d+ PG GUID \d+(?:\([^)]*\))? )?Rank (\d+)\]")
GLOG = re.compile(r"\[(?:rank\d+\]:\[)?E(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)")
RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?$")


def parse_time(s):
    """RFC 3339 (Go's time.Time JSON, ns precision) to unix seconds; None if zero/absent."""
    if not s or not isinstance(s, str):
        return None
    m = RFC3339.match(s.strip())
    if not m:
        return None
    y, mo, d, h, mi, se = (int(m.group(i)) for i in range(1, 7))
    if y <= 1:
        return None
    frac = float(m.group(7)) if m.group(7) else 0.0
    tz = m.group(8) or "Z"
    off = 0
    if tz != "Z":
        sign = -1 if tz[0] == "-" else 1
        tz = tz[1:].replace(":", "")
        off = sign * (int(tz[:2]) * 3600 + int(tz[2:]) * 60)
    dt = datetime.datetime(y, mo, d, h, mi, se, tzinfo=datetime.timezone.utc)
    return dt.timestamp() - off + frac


def iso(t):
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="milliseconds")


def rnd(x, n=3):
    return None if x is None else round(x, n)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def read_jsonl(path):
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def stdout_lines(d):
    """(time or None, text) per line of the job's stdout, stamped when run.sh could."""
    stamped = os.path.join(d, "stdout.stamped.log")
    lines = []
    if os.path.exists(stamped):
        with open(stamped, errors="replace") as f:
            for l in f:
                t, _, text = l.rstrip("\n").partition("\t")
                try:
                    lines.append((float(t), text))
                except ValueError:
                    lines.append((None, l.rstrip("\n")))
    if not lines:
        try:
            with open(os.path.join(d, "stdout.log"), errors="replace") as f:
                lines = [(None, l.rstrip("\n")) for l in f]
        except OSError:
            pass
    return lines


def glog_time(text, year):
    m = GLOG.search(text)
    if not m:
        return None
    mo, d, h, mi, s, frac = m.groups()
    try:
        t = time.mktime((year, int(mo), int(d), int(h), int(mi), int(s), 0, 0, -1))
    except (OverflowError, ValueError):
        return None
    return t + float("0." + frac)


def markers_in(text):
    """(kind, object) of every marker in a line: the ranks share one stdout, so a marker can
    be preceded or followed by another rank's output, or another marker."""
    out = []
    for m in MARKER_START.finditer(text):
        try:
            obj, _ = JSON.raw_decode(text, m.end() - 1)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append((m.group(1), obj))
    return out


def job_markers(lines):
    info, phases, faults = {}, [], []
    pt = []
    for t, text in lines:
        found = markers_in(text)
        for kind, obj in found:
            if kind == "INFO":
                info[obj.get("rank")] = obj
            elif kind == "PHASE":
                phases.append(obj)
            else:
                faults.append(obj)
        if not found and PT_TIMEOUT in text:
            pt.append((t, text))
    return info, phases, faults, pt


def incidents_by_id(path):
    """id -> {first_seen_t, first_open_t, resolved_seen_t, last}"""
    by = {}
    for r in read_jsonl(path):
        inc = r.get("inc")
        if not isinstance(inc, dict):
            continue
        t = r.get("t")
        e = by.setdefault(str(inc.get("id")), {"first_seen_t": t, "first_open_t": None,
                                                 "resolved_seen_t": None, "last": inc})
        e["last"] = inc
        if inc.get("state") == "open" and e["first_open_t"] is None:
            e["first_open_t"] = t
        if inc.get("state") == "resolved" and e["resolved_seen_t"] is None:
            e["resolved_seen_t"] = t
    return by


def pt_rank(text):
    m = PT_RANK.search(text)
    if not m:
        return None
    return int(m.group(1) if m.group(1) is not None else m.group(2))


def culprit_ranks(inc):
    out = []
    for c in inc.get("culprits") or []:
        if isinstance(c, dict) and isinstance(c.get("rank"), int):
            out.append(c["rank"])
    return out


def detected_entry(e, fault_t, pt_t):
    inc = e["last"]
    seen = e["first_open_t"] or e["first_seen_t"]
    opened = parse_time(inc.get("opened_at"))
    fault_at = parse_time(inc.get("fault_at"))
    d = {
        "id": inc.get("id"), "kind": inc.get("kind"), "severity": inc.get("severity"),
        "state": inc.get("state"), "culprit_ranks": culprit_ranks(inc),
        "culprits": inc.get("culprits") or [], "comm": inc.get("comm"), "seq": inc.get("seq"),
        "summary": inc.get("summary"), "evidence": (inc.get("evidence") or [])[:6],
        "first_seen": iso(seen), "first_seen_t": seen,
        "opened_at": inc.get("opened_at"), "fault_at": inc.get("fault_at"),
        "resolved_at": inc.get("resolved_at"), "resolved_seen": iso(e["resolved_seen_t"]),
        "latency_s": rnd(seen - fault_t) if seen and fault_t else None,
        "opened_latency_s": rnd(opened - fault_t) if opened and fault_t else None,
        "fault_at_minus_fault_s": rnd(fault_at - fault_t) if fault_at and fault_t else None,
        "before_pytorch_timeout": (seen < pt_t) if seen and pt_t else None,
    }
    return d


def gpu_index_for_rank(snaps, rank, info=None):
    """The NVML index of a rank's GPU: its process's bus id joined with the GPU list,
    else its CUDA device (run.sh sets CUDA_DEVICE_ORDER=PCI_BUS_ID), else the device the
    job says it used (WATCHDOG_INFO's gpu: 0 for every rank on one GPU), else the rank."""
    for _, s in snaps:
        gpus = s.get("gpus") or []
        for p in s.get("procs") or []:
            if p.get("rank") != rank:
                continue
            bus = p.get("bus")
            for g in gpus:
                if bus and g.get("bus") and str(g["bus"]).lower() == str(bus).lower():
                    return g.get("i"), "bus"
            # A process seen before its Init lines has no device yet (-1): keep looking.
            if isinstance(p.get("cudadev"), int) and p["cudadev"] >= 0:
                return p["cudadev"], "cudadev"
    if info and isinstance(info.get(rank, {}).get("gpu"), int):
        return info[rank]["gpu"], "job"
    return rank, "rank"


def summarize_samples(snaps, idx, rank, t0, t1):
    util, pw, sm, mem, states, pstates = [], [], [], [], {}, {}
    pwmax = smmax = None
    seen = set()
    for t, s in snaps:
        if t is None or t < t0 or t > t1:
            continue
        for p in s.get("procs") or []:
            if p.get("rank") == rank and p.get("gpu"):
                pstates[p["gpu"]] = pstates.get(p["gpu"], 0) + 1
        for g in s.get("gpus") or []:
            if g.get("i") != idx:
                continue
            key = g.get("t") or t
            if key in seen:
                continue
            seen.add(key)
            if g.get("err"):
                continue
            na = set(g.get("na") or [])
            if "util" not in na and g.get("util") is not None:
                util.append(g["util"])
            if "pw" not in na and g.get("pw") is not None:
                pw.append(g["pw"])
            if "sm" not in na and g.get("sm") is not None:
                sm.append(g["sm"])
            if "memutil" not in na and g.get("memutil") is not None:
                mem.append(g["memutil"])
            st = g.get("state") or "?"
            states[st] = states.get(st, 0) + 1
            pwmax = g.get("pwmax") or pwmax
            smmax = g.get("smmax") or smmax

    def stat(v):
        if not v:
            return None
        return {"median": rnd(statistics.median(v), 1), "min": rnd(min(v), 1), "max": rnd(max(v), 1)}

    n = sum(states.values())
    top = max(states, key=states.get) if states else None
    return {"samples": n, "util_pct": stat(util), "power_w": stat(pw), "sm_mhz": stat(sm),
            "memutil_pct": stat(mem), "pwmax_w": pwmax, "smmax_mhz": smmax, "states": states,
            "state": top, "state_share": rnd(states[top] / n, 2) if top else None,
            "proc_gpu_states": pstates}


def phase_windows(case, fault_t, pt_t, phases, job_end, ranks, culprit):
    """(expected state, what, ranks, t0, t1) per phase worth summarizing."""
    def ph(name, agg):
        ts = [p.get("t") for p in phases if p.get("phase") == name and p.get("t")]
        return agg(ts) if ts else None

    ss, se = ph("steps_start", max), ph("steps_end", min)
    ps, pe = ph("pause_start", max), ph("pause_end", min)
    hang_end = min(x for x in (pt_t, job_end) if x) if (pt_t or job_end) else None
    others = [r for r in ranks if r != culprit]
    w = []
    if case == "healthy" and ss:
        w.append(("computing", "healthy steps", ranks, ss + 1.0, se or job_end))
    if fault_t and hang_end:
        if case == "silent":
            w.append(("waiting", "in a collective, peer silent", others, fault_t + 1.5, hang_end))
            w.append(("idle", "rank stuck in host code", [culprit], fault_t + 1.5, hang_end))
        if case == "frozen":
            w.append(("waiting", "in a collective, peer frozen", others, fault_t + 1.5, hang_end))
            w.append(("idle", "rank stopped (SIGSTOP)", [culprit], fault_t + 1.5, hang_end))
        if case in ("wrong_op", "order_inversion", "order_inversion_full", "sub_mismatch"):
            w.append(("waiting", {"wrong_op": "in mismatched collectives", "sub_mismatch": "after a size mismatch"}.get(
                case, "deadlocked (order inversion)"), ranks, fault_t + 1.5, hang_end))
        if case == "crash":
            w.append(("waiting", "in a collective, peer crashed", others, fault_t + 1.5, job_end))
            w.append(("idle", "crashed rank's GPU (no process)", [culprit], fault_t + 1.5, job_end))
    if case == "pause" and ps and pe:
        w.append(("idle", "checkpoint pause, job alive", ranks, ps + 1.5, pe))
    if case == "straggler_onset" and fault_t and se:
        w.append(("mixed", "straggler: sleeps before its collectives", [culprit], fault_t + 2.0, se))
        w.append(("mixed", "wait for the straggler every step", others, fault_t + 2.0, se))
    return [x for x in w if x[2] and x[3] and x[4] and x[4] > x[3]]


def plugin_summary(d):
    """What the profiler plugin's files said at the end of a plugin-mode case."""
    dump = read_json(os.path.join(d, "prof-final.json"))
    if not isinstance(dump, list):
        return None
    out = {"regions": len(dump), "ranks": [], "abi": [], "disabled": [], "dropped_events": 0, "comms": 0, "errors": []}
    for x in dump:
        if not isinstance(x, dict):
            continue
        if x.get("error"):
            out["errors"].append(str(x.get("error"))[:200])
            continue
        reg = x.get("region") or {}
        p = reg.get("process") or {}
        out["ranks"].append(p.get("rank"))
        out["abi"].append(p.get("abi"))
        if p.get("disabled"):
            out["disabled"].append({"rank": p.get("rank"), "reason": p.get("disabled_reason") or p.get("disabled")})
        out["dropped_events"] += int(p.get("dropped_events") or 0)
        out["comms"] += int(p.get("comms_inited") or 0)
    out["ranks"] = sorted(r for r in out["ranks"] if isinstance(r, int))
    out["abi"] = sorted({a for a in out["abi"] if a})
    return out


def judge(exp, det, culprit, fault_t, aborted):
    """The verdict: exactly the expected incident, or none when none is expected."""
    if exp == "unknown":
        return {"pass": None, "why": "no expectation for this case"}
    if exp is None:
        ok = not det
        return {"pass": ok, "why": "no incident" if ok else f"{len(det)} incident(s) on a job that must raise none: "
                + ", ".join(f"{x['kind']}{x['culprit_ranks']}" for x in det), "unexpected": [x["id"] for x in det]}
    if not fault_t:
        return {"pass": None, "why": "the job never printed WATCHDOG_FAULT (did it reach the fault step?)"}
    kinds = "/".join(exp)
    match = [x for x in det if x["kind"] in exp and culprit in x["culprit_ranks"]]
    if not match:
        got = ", ".join(f"{x['kind']}{x['culprit_ranks']}" for x in det) or "nothing"
        return {"pass": False, "why": f"want {kinds} naming rank {culprit}; got {got}"
                + (" (case cut short by the time guard)" if aborted else ""), "unexpected": [x["id"] for x in det]}
    m = match[0]
    extra = [x for x in det if x is not m]
    why = f"{m['kind']} naming rank {culprit}, first seen {m['latency_s']} s after the fault"
    if m["culprit_ranks"] != [culprit]:
        why += f" (culprits {m['culprit_ranks']})"
    if m["latency_s"] is not None and m["latency_s"] < -1:
        why += "; seen BEFORE the fault: suspicious"
    v = {"pass": not extra, "why": why, "latency_s": m["latency_s"], "unexpected": [x["id"] for x in extra]}
    if extra:
        v["why"] = (f"{len(extra)} more incident(s) than the root cause: "
                    + ", ".join(f"{x['kind']}{x['culprit_ranks']}" for x in extra) + "; " + why)
    return v


def collect_case(d, by_id, run, all_jobs=()):
    c = read_json(os.path.join(d, "case.json"), {}) or {}
    case = c.get("case") or os.path.basename(d)
    job = c.get("job") or case
    exp = expected_kinds(case)
    res = {"case": case, "job": job, "mode": c.get("mode") or "info",
           "skipped": bool(c.get("skipped")), "plan": {k: c.get(k) for k in ("budget_s", "steps", "fault_step", "fault_rank", "nproc", "one_gpu", "pg_timeout_s", "monitor_interval_s", "trimmed")},
           "job_rc": c.get("rc"), "sidecar_ok": c.get("sidecar_ok"), "sidecar_profiler": c.get("sidecar_profiler")}
    if c.get("skipped"):
        res["expected"] = None if exp is None else {"kind": "/".join(exp)} if exp != "unknown" else "unknown"
        res["verdict"] = {"pass": None, "why": c.get("reason") or "skipped"}
        res["detected"] = []
        return res
    t_start, t_end = c.get("t_start"), c.get("t_end")
    job_start, job_end = c.get("t_job_start"), c.get("t_job_end")
    res["job_duration_s"] = rnd(job_end - job_start, 2) if job_start and job_end else None
    lines = stdout_lines(d)
    info, phases, faults, pts = job_markers(lines)
    fault = faults[0] if faults else None
    fault_t = fault.get("t") if fault else None
    culprit = fault.get("rank") if fault and isinstance(fault.get("rank"), int) else DEFAULT_CULPRIT
    res["expected"] = (None if exp is None else {"kind": "/".join(exp), "culprit_rank": culprit}) if exp != "unknown" else "unknown"
    res["fault"] = fault
    res["job_info"] = [info[k] for k in sorted(info, key=lambda x: (x is None, x))]
    res["phases"] = phases
    if c.get("resumed_t") and fault_t:
        res["resumed_after_fault_s"] = rnd(c["resumed_t"] - fault_t)
    pt = None
    if pts:
        t_stamp, text = pts[0]
        year = time.localtime(fault_t or job_start or time.time()).tm_year
        t_log = glog_time(text, year)
        pt = {"t": t_stamp or t_log, "t_stamped": t_stamp, "t_logged_local": t_log,
              "rank": pt_rank(text), "line": text[:400],
              "ranks_timed_out": sorted({r for _, x in pts for r in [pt_rank(x)] if r is not None})}
        pt["after_fault_s"] = rnd(pt["t"] - fault_t) if pt["t"] and fault_t else None
    res["pytorch_timeout"] = pt
    res["pytorch_timeout_after_s"] = pt["after_fault_s"] if pt else None
    pt_t = pt["t"] if pt else None

    det, after = [], []
    for e in by_id.values():
        ej = e["last"].get("job")
        seen0 = e["first_open_t"] or e["first_seen_t"]
        # An incident whose job names no case (the detector may spell jobs differently) is
        # given to the case whose sidecar was running when it first appeared.
        by_time = ej not in all_jobs and ej != MONITORING_JOB and seen0 is not None and t_start and t_end and t_start <= seen0 <= t_end
        if ej != job and not by_time:
            continue
        entry = detected_entry(e, fault_t, pt_t)
        if by_time:
            entry["attributed_by_time"] = True
        seen = entry["first_seen_t"]
        if seen is not None and t_end is not None and seen > t_end + 0.5:
            after.append(entry)
        else:
            det.append(entry)
    det.sort(key=lambda x: x["first_seen_t"] or 0)
    after.sort(key=lambda x: x["first_seen_t"] or 0)
    res["detected"] = det
    res["after_case"] = after  # e.g. what the detector said once the sidecar was stopped
    # Incidents about the watchdog itself (job _ncclwatch) while this case ran: shown, not judged.
    res["monitoring"] = [detected_entry(e, fault_t, pt_t) for e in by_id.values()
                         if e["last"].get("job") == MONITORING_JOB and t_start and t_end
                         and t_start <= (e["first_open_t"] or e["first_seen_t"] or 0) <= t_end]

    if c.get("aborted"):
        res["aborted"] = True
    res["verdict"] = judge(exp, det, culprit, fault_t, c.get("aborted"))
    if res["verdict"].get("latency_s") is not None and pt and pt.get("after_fault_s") is not None:
        res["verdict"]["beat_pytorch_by_s"] = rnd(pt["after_fault_s"] - res["verdict"]["latency_s"])
    if res["mode"] == "plugin":
        res["plugin"] = plugin_summary(d)

    snaps = []
    for r in read_jsonl(os.path.join(d, "snapshots.jsonl")):
        if isinstance(r.get("snap"), dict):
            snaps.append((r.get("t"), r["snap"]))
    res["snapshot_samples"] = len(snaps)
    nranks = int(c.get("nproc") or 0) or max([len(info)] + [2])
    ranks = list(range(nranks))
    gmap = {r: gpu_index_for_rank(snaps, r, info) for r in ranks}
    res["rank_gpu"] = {str(r): {"gpu": v[0], "by": v[1]} for r, v in gmap.items()}
    nv = []
    for expect, label, rs, a, b in phase_windows(case, fault_t, pt_t, phases, job_end, ranks, culprit):
        # One row per GPU: on one GPU all ranks share it, and NVML sees the GPU, not a rank.
        by_gpu = {}
        for r in rs:
            by_gpu.setdefault(gmap[r][0], []).append(r)
        for idx, grs in by_gpu.items():
            s = summarize_samples(snaps, idx, grs[0], a, b)
            s.update({"phase": expect, "what": label, "rank": grs[0] if len(grs) == 1 else grs, "ranks": grs, "gpu": idx,
                      "gpu_shared_by": sorted(r for r in ranks if gmap[r][0] == idx),
                      "from_s": rnd(a - (fault_t or job_start or a), 1), "window_s": rnd(b - a, 1)})
            nv.append(s)
    res["nvml"] = nv
    try:
        with open(os.path.join(d, "metrics.txt"), errors="replace") as f:
            names = sorted({l.split("{")[0].split(" ")[0] for l in f if l.startswith("ncclwatch_gpu_")})
        res["metrics_seen"] = names
    except OSError:
        res["metrics_seen"] = []
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    run = read_json(os.path.join(a.work, "run.json"), {}) or {}
    by_id = incidents_by_id(os.path.join(a.work, "incidents.jsonl"))
    order = run.get("cases") or []
    dirs = {os.path.basename(p): p for p in glob.glob(os.path.join(a.work, "cases", "*")) if os.path.isdir(p)}
    names = [c for c in order if c in dirs] + sorted(c for c in dirs if c not in order)
    all_jobs = set()
    for name in names:
        cj = read_json(os.path.join(dirs[name], "case.json"), {}) or {}
        all_jobs.add(cj.get("job") or name)
    cases = []
    for name in names:
        try:
            cases.append(collect_case(dirs[name], by_id, run, all_jobs))
        except Exception as e:  # one broken case must not lose the others
            cases.append({"case": name, "error": f"{type(e).__name__}: {e}", "detected": [],
                          "verdict": {"pass": None, "why": "collect.py failed on this case"}})
    jobs = {c.get("job") for c in cases}
    unattributed = [detected_entry(e, None, None) for e in by_id.values()
                    if e["last"].get("job") not in jobs and e["last"].get("job") != MONITORING_JOB]
    monitoring = [detected_entry(e, None, None) for e in by_id.values() if e["last"].get("job") == MONITORING_JOB]
    probe = read_jsonl(os.path.join(a.work, "nvml-probe.jsonl"))[:20]
    try:
        with open(os.path.join(a.work, "versions.txt")) as f:
            versions = f.read().strip()[:500]
    except OSError:
        versions = None
    verdicts = [c.get("verdict", {}).get("pass") for c in cases]
    out = {
        "run": run, "versions": versions, "nvml_probe_idle": probe,
        "summary": {"cases": len(cases), "passed": verdicts.count(True), "failed": verdicts.count(False),
                    "undecided": verdicts.count(None)},
        "cases": cases, "unattributed_incidents": unattributed, "monitoring_incidents": monitoring,
    }
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1, sort_keys=False)
    os.replace(tmp, a.out)
    s = out["summary"]
    print(f"collect.py: {s['cases']} cases, {s['passed']} passed, {s['failed']} failed, {s['undecided']} undecided -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
