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

Both feeds of one job (run.sh FEEDS=both, the 4-GPU mode): the same judgement per feed,
under "feeds" {"info": ..., "plugin": ...} (jobs <case>-info and <case>-plugin); the case
passes when every feed passes. Incidents may carry a cause class ("cause": a string, or an
object with "class") and an episode ({"onset", "end"}); both are read when present.

Phase jobs (job.py SCENARIO=phases): per phase and feed, whether an incident named the
phase's rank and cause class while the phase ran (the class from "cause" when the incident
has one, else from its kind), how long after the phase started, any rank blamed that only
waited, when the episode ended against the phase's end, and for healthy phases whether any
finding appeared. Flight Recorder: per case the dumps (pickle and JSON) read back as plain
data, and the verdict lines of PyTorch's fr_trace.
"""
import argparse
import datetime
import glob
import json
import os
import pickle
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
    # A skipped collective: the rank's next op on the group pairs with the peer's skipped one.
    "skip_sub": ("mismatch", "hang"),
    # A rank that left its group and lived on: its group peer waits in an op it never issues.
    "left_pg": ("hang",),
}

# A phase's cause class -> words that name it in an incident's "cause" (lower case,
# substrings), checked link, gpu, host in that order; CLASS_WORDS_<class>=a,b adds more.
CLASS_WORDS = {
    "link": ("link", "nic", "net", "transfer", "port", "socket", "bandwidth"),
    "gpu": ("gpu", "busy", "contention", "throttl", "other process", "other_process", "xid"),
    "host": ("host", "cpu", "sleep", "input", "pipeline", "not_issuing", "not issuing", "issue", "stall", "late"),
}
# Without a cause: the kinds that may stand for the class.
KIND_FOR_CLASS = {"host": ("straggler", "hang"), "gpu": ("straggler", "gpu", "hang"), "link": ("link", "straggler")}
GOAL_S = {"plugin": 30.0, "info": 60.0}  # issue 22: named within 30 s (plugin) / 60 s (INFO logs)
LATE_S = 10.0  # an episode starting this soon after a fault phase, naming its rank, is that phase's
DEFAULT_CULPRIT = 1  # when the job never printed its fault line


def expected_kinds(case):
    """EXPECTED, with EXPECT_<case>=kind[,kind] from the environment taking over."""
    env = os.environ.get(f"EXPECT_{case}")
    if env is not None:
        kinds = tuple(k.strip() for k in env.split(",") if k.strip())
        return kinds or None
    return EXPECTED.get(case, "unknown")

MONITORING_JOB = "_ncclwatch"  # the detector files incidents about itself and its inputs here
MARKER_START = re.compile(r"WATCHDOG_(INFO|PHASE|FAULT|EVENT) \{")
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


def job_markers(lines, events=None):
    info, phases, faults = {}, [], []
    pt = []
    for t, text in lines:
        found = markers_in(text)
        for kind, obj in found:
            if kind == "INFO":
                info[obj.get("rank")] = obj
            elif kind == "PHASE":
                phases.append(obj)
            elif kind == "EVENT":
                if events is not None:
                    events.append(obj)
            else:
                faults.append(obj)
        if not found and PT_TIMEOUT in text:
            pt.append((t, text))
    return info, phases, faults, pt


def incidents_by_id(path):
    """id -> {first_seen_t, first_open_t, resolved_seen_t, last, intervals}; intervals are the
    incident's open spells as the poller saw them: [open seen, resolved seen or None, the
    incident as last seen in that spell] (an incident can resolve and open again)."""
    by = {}
    for r in read_jsonl(path):
        inc = r.get("inc")
        if not isinstance(inc, dict):
            continue
        t = r.get("t")
        e = by.setdefault(str(inc.get("id")), {"first_seen_t": t, "first_open_t": None,
                                                 "resolved_seen_t": None, "last": inc, "intervals": []})
        e["last"] = inc
        iv = e["intervals"]
        if inc.get("state") == "open" and e["first_open_t"] is None:
            e["first_open_t"] = t
        if inc.get("state") == "resolved" and e["resolved_seen_t"] is None:
            e["resolved_seen_t"] = t
        if inc.get("state") == "resolved":
            if iv and iv[-1][1] is None:
                iv[-1][1], iv[-1][2] = t, inc
            elif not iv:  # opened and resolved between two polls
                iv.append([t, t, inc])
        else:
            if iv and iv[-1][1] is None:
                iv[-1][2] = inc
            else:
                iv.append([t, None, inc])
    return by


def cause_of(inc):
    """The incident's cause class, when it names one (a string, or an object with a class)."""
    c = inc.get("cause")
    if isinstance(c, dict):
        c = c.get("class") or c.get("name") or c.get("kind")
    return str(c) if c else None


def episode_of(inc):
    """The incident's own episode (onset, end) in unix seconds, when it carries one."""
    e = inc.get("episode")
    if not isinstance(e, dict):
        return None, None
    return parse_time(e.get("onset")), parse_time(e.get("end"))


def class_words():
    out = {}
    for k, words in CLASS_WORDS.items():
        extra = [w.strip().lower() for w in os.environ.get(f"CLASS_WORDS_{k}", "").split(",") if w.strip()]
        out[k] = tuple(words) + tuple(extra)
    return out


def cause_class(cause):
    """host, gpu or link for a cause text, by its words; None when none fits."""
    if not cause:
        return None
    c = cause.lower()
    for k, words in class_words().items():
        if any(w in c for w in words):
            return k
    return None


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
    onset, end = episode_of(inc)
    d = {
        "id": inc.get("id"), "kind": inc.get("kind"), "severity": inc.get("severity"),
        "cause": cause_of(inc), "cause_class": cause_class(cause_of(inc)),
        "episode": inc.get("episode") if isinstance(inc.get("episode"), dict) else None,
        "episode_onset_latency_s": rnd(onset - fault_t) if onset and fault_t else None,
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
        if case in ("wrong_op", "order_inversion", "order_inversion_full", "sub_mismatch", "skip_sub"):
            w.append(("waiting", {"wrong_op": "in mismatched collectives", "sub_mismatch": "after a size mismatch",
                                  "skip_sub": "after a skipped collective"}.get(
                case, "deadlocked (order inversion)"), ranks, fault_t + 1.5, hang_end))
        if case == "gpu_hang":
            w.append(("computing", "its GPU runs one long kernel; its collectives queue behind it", [culprit], fault_t + 1.5, hang_end))
            w.append(("waiting", "in a collective, peer's GPU busy", others, fault_t + 1.5, hang_end))
        if case == "left_pg":
            w.append(("waiting", "in a collective of a group one member left", others, fault_t + 1.5, hang_end))
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


def fault_phase_windows(phases, job_end, ranks):
    """NVML rows of a phase job: per fault phase, the faulty rank's GPU and another's."""
    w = []
    for p in phases:
        if not p.get("fault") or not isinstance(p.get("rank"), int):
            continue
        a, b = p.get("t_start"), p.get("t_end") or job_end
        if not a or not b:
            continue
        r = p["rank"]
        other = [x for x in ranks if x != r][:1]
        w.append(("mixed", f"{p['phase']}: {p['fault']} fault on this rank", [r], a + 1.0, b))
        if other:
            w.append(("mixed", f"{p['phase']}: waits for rank {r}", other, a + 1.0, b))
    return w


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


def phase_list(markers, job_end):
    """The phases of a phase job, from rank 0's start/end markers: one dict per phase with
    t_start and t_end (a phase cut short by the job's end ends there, marked cut)."""
    by = {}
    for m in markers:
        if m.get("event") not in ("start", "end") or not isinstance(m.get("index"), int):
            continue
        p = by.setdefault(m["index"], {})
        p.update({k: v for k, v in m.items() if k not in ("event", "t")})
        if m["event"] == "end":
            p["ended"] = True
    out = [by[k] for k in sorted(by)]
    for i, p in enumerate(out):
        if not p.get("t_end"):
            nxt = out[i + 1].get("t_start") if i + 1 < len(out) else None
            p["t_end"] = nxt or job_end
            p["cut"] = True
    return out


def culprit_gpus(inc):
    """The GPU indices an incident's culprits name (a GPU-level culprit has rank -1)."""
    out = []
    for c in inc.get("culprits") or []:
        m = re.match(r"\s*(\d+)", str(c.get("gpu") or "")) if isinstance(c, dict) else None
        if m:
            out.append(int(m.group(1)))
    return out


def episodes(by_id, job, gpu_rank=None):
    """Every open spell of every incident of a job: one episode each. Its ranks are the
    culprit ranks, plus the rank on a culprit GPU (gpu_rank: GPU index -> rank)."""
    gpu_rank = gpu_rank or {}
    out = []
    for e in by_id.values():
        if e["last"].get("job") != job:
            continue
        for start, end, inc in e["intervals"]:
            onset, ep_end = episode_of(inc)
            ranks = culprit_ranks(inc)
            ranks += [gpu_rank[g] for g in culprit_gpus(inc) if g in gpu_rank and gpu_rank[g] not in ranks]
            out.append({"id": inc.get("id"), "kind": inc.get("kind"), "ranks": ranks,
                        "cause": cause_of(inc), "cause_class": cause_class(cause_of(inc)),
                        "start": start, "end": end, "onset": onset, "episode_end": ep_end,
                        "summary": (inc.get("summary") or "")[:200]})
    out.sort(key=lambda x: x["start"] or 0)
    return out


def class_match(ep, want):
    """How an episode's class matches the phase's: by its cause, else by its kind."""
    if ep["cause"]:
        return "cause" if ep["cause_class"] == want else False
    return "kind" if ep["kind"] in KIND_FOR_CLASS.get(want, ()) else False


def ep_brief(ep, t0):
    return {"id": ep["id"], "kind": ep["kind"], "ranks": ep["ranks"], "cause": ep["cause"],
            "start_s": rnd(ep["start"] - t0) if ep["start"] and t0 else None,
            "end_s": rnd(ep["end"] - t0) if ep["end"] and t0 else None, "summary": ep["summary"][:120]}


def judge_phases(phases, eps, feed, t_job_end):
    """Per phase: named (rank and class) while it ran, latency, waiting ranks blamed, the
    episode's end against the phase's end; healthy phases: any new finding."""
    out = []
    goal = GOAL_S.get(feed, 60.0)
    prev_fault = None
    for p in phases:
        t0, t1 = p.get("t_start"), p.get("t_end")
        r = {"phase": p.get("phase"), "index": p.get("index"), "fault": p.get("fault"), "rank": p.get("rank"),
             "class": p.get("class"), "mode": p.get("mode"), "severity": p.get("severity"),
             "slowdown": p.get("slowdown"), "steps": p.get("steps"), "t_start": t0, "t_end": t1,
             "duration_s": rnd(t1 - t0, 1) if t0 and t1 else None, "cut": bool(p.get("cut"))}
        if not t0 or not t1:
            r["verdict"] = {"pass": None, "why": "no start or end time"}
            out.append(r)
            continue
        during = [e for e in eps if e["start"] is not None and t0 <= e["start"] <= t1]
        if p.get("fault"):
            want, rank = p.get("class") or p.get("fault"), p.get("rank")
            mine = [e for e in during if rank in e["ranks"]]
            named = [e for e in mine if class_match(e, want)]
            hit = (named or mine or [None])[0]
            waiting = sorted({x for e in during for x in e["ranks"] if x != rank and x >= 0})
            r["blamed_waiting"] = waiting
            r["blamed_waiting_by"] = [ep_brief(e, t0) for e in during if any(x != rank and x >= 0 for x in e["ranks"])][:4]
            r["found"] = [ep_brief(e, t0) for e in during][:6]
            if hit:
                end = hit["episode_end"] or hit["end"]
                r.update({"named": True, "class_named": bool(class_match(hit, want)), "class_by": class_match(hit, want) or None,
                          "kind": hit["kind"], "cause": hit["cause"], "latency_s": rnd(hit["start"] - t0),
                          "onset_latency_s": rnd(hit["onset"] - t0) if hit["onset"] else None,
                          "episode_end_after_phase_s": rnd(end - t1) if end else None,
                          "episode_open_at_job_end": end is None})
                r["within_goal"] = r["latency_s"] <= goal
            else:
                r.update({"named": False, "class_named": False})
            small = isinstance(p.get("slowdown"), (int, float)) and p["slowdown"] < 1.1
            ok = bool(hit) and r["class_named"] and not waiting
            why = []
            if not hit:
                why.append(f"rank {rank} not named while the phase ran")
            elif not r["class_named"]:
                why.append(f"rank {rank} named as {hit['kind']}/{hit['cause']}, not as {want}")
            if waiting:
                why.append(f"blamed rank(s) {waiting} that only waited")
            if ok:
                why.append(f"{hit['kind']}{'/' + hit['cause'] if hit['cause'] else ''} naming rank {rank} {r['latency_s']} s after the phase began")
            if not ok and small:
                r["verdict"] = {"pass": None, "why": f"slowdown {p['slowdown']} under 10 %: " + "; ".join(why)}
            else:
                r["verdict"] = {"pass": ok, "why": "; ".join(why)}
            prev_fault = p
        else:
            # A late episode of the previous fault phase is that phase's, not a finding here.
            late = [e for e in during if prev_fault and prev_fault.get("rank") in e["ranks"] and e["start"] <= t0 + LATE_S]
            new = [e for e in during if e not in late]
            r["late_from_previous"] = [ep_brief(e, t0) for e in late]
            r["findings"] = [ep_brief(e, t0) for e in new][:6]
            r["verdict"] = {"pass": not new, "why": "no finding" if not new else
                            f"{len(new)} finding(s) on a healthy phase: " + ", ".join(f"{e['kind']}{e['ranks']}" for e in new[:4])}
            prev_fault = None
        out.append(r)
    return out


def edge_findings(phases, eps, t_job_end):
    """Episodes before the first phase (init) and after the last (teardown)."""
    if not phases:
        return {}
    first, last = phases[0].get("t_start"), phases[-1].get("t_end")
    return {"before_first_phase": [ep_brief(e, first) for e in eps if first and e["start"] and e["start"] < first],
            "after_last_phase": [ep_brief(e, last) for e in eps if last and e["start"] and e["start"] > last]}


class PlainUnpickler(pickle.Unpickler):
    """Plain data only (what Flight Recorder dumps are): any class or function is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused: {module}.{name} (not plain data)")


def fr_entry_brief(entries):
    """The last entry not completed per process group: where each group stood."""
    stuck = {}
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict):
            continue
        pg = e.get("process_group")
        pg = pg[0] if isinstance(pg, (list, tuple)) and pg else str(pg)
        if e.get("state") != "completed" and pg not in stuck:
            stuck[pg] = {k: e.get(k) for k in ("collective_seq_id", "p2p_seq_id", "profiling_name", "state", "input_sizes", "input_dtypes")}
    return stuck


def fr_summary(d):
    """The case's Flight Recorder dumps (read back as plain data) and fr_trace's verdict."""
    out = {"dumps": [], "json": [], "fr_trace": {}}
    for f in sorted(glob.glob(os.path.join(d, "fr", "*"))):
        x = {"file": os.path.relpath(f, d), "bytes": os.path.getsize(f)}
        try:
            with open(f, "rb") as fh:
                obj = PlainUnpickler(fh).load()
            x.update(version=obj.get("version"), entries=len(obj.get("entries") or []),
                     pgs=sorted((obj.get("pg_config") or {}).keys()), not_completed=fr_entry_brief(obj.get("entries")))
        except Exception as e:  # a truncated or foreign dump: say so, keep the others
            x["error"] = f"{type(e).__name__}: {e}"[:200]
        out["dumps"].append(x)
    for f in sorted(glob.glob(os.path.join(d, "frjson", "*"))):
        x = {"file": os.path.relpath(f, d), "bytes": os.path.getsize(f)}
        if f.endswith(".json"):
            obj = read_json(f)
            if isinstance(obj, dict):
                x.update(version=obj.get("version"), entries=len(obj.get("entries") or []),
                         not_completed=fr_entry_brief(obj.get("entries")))
            else:
                x["error"] = "not JSON"
        out["json"].append(x)
    keys = re.compile(r"culprit|missing|mismatch|not all ranks|error|collective|rank", re.I)
    for name in ("fr_trace.txt", "fr_trace.incomplete.txt"):
        try:
            with open(os.path.join(d, name), errors="replace") as f:
                lines = [l.rstrip() for l in f]
        except OSError:
            continue
        rc = next((l for l in reversed(lines) if l.startswith("[fr_trace rc=")), None)
        verdict = [l[:300] for l in lines if keys.search(l) and not l.startswith("[fr_trace")][:8]
        out["fr_trace"][name] = {"rc": rc, "lines": len(lines),
                                 "verdict": verdict or [l[:300] for l in lines if l.strip() and not l.startswith("[fr_trace")][:2]}
    out["ranks_dumped"] = sorted({int(m.group(1)) for x in out["dumps"] for m in [re.search(r"(\d+)$", x["file"])] if m})
    return out if out["dumps"] or out["json"] or out["fr_trace"] else None


def offline_summary(d, t0):
    """`watchdog analyze --json` of the case's INFO logs alone, and of everything it left."""
    out = {}
    for name in ("logs", "all"):
        rep = read_json(os.path.join(d, f"analyze-{name}.json"))
        try:
            with open(os.path.join(d, f"analyze-{name}.rc")) as f:
                rc = f.read().strip()
        except OSError:
            rc = None
        if not isinstance(rep, dict):
            if rc is not None:
                out[name] = {"rc": rc, "error": "no JSON report"}
            continue
        fs = []
        for x in rep.get("findings") or []:
            if not isinstance(x, dict):
                continue
            onset, end = episode_of(x)
            fs.append({"kind": x.get("kind"), "ranks": culprit_ranks(x), "cause": cause_of(x),
                       "onset_s": rnd(onset - t0) if onset and t0 else None, "end_s": rnd(end - t0) if end and t0 else None,
                       "summary": (x.get("summary") or "")[:200]})
        out[name] = {"rc": rc, "verdict": rep.get("verdict"), "findings": fs[:30], "notes": (rep.get("notes") or [])[:5]}
    return out or None


def fault_evidence(d, events):
    """What the injectors say they did: hog workers computing, rate-limited bytes."""
    ev = {"job_events": events[:200]}
    hog = read_jsonl(os.path.join(d, "hog", "events.jsonl"))
    if hog:
        ev["hog"] = [h for h in hog if h.get("what") in ("ctl", "compute_start", "compute_stop")][:200]
    rl = {}
    for f in glob.glob(os.path.join(d, "rl", "*.stats")):
        rl[os.path.basename(f)] = read_json(f)
    if rl:
        ev["ratelimit"] = rl
    return ev


def collect_feed(feed, job, d, suffix, by_id, exp, culprit, fault_t, pt_t, c, t_start, t_end, all_jobs, single):
    det, after = [], []
    for e in by_id.values():
        ej = e["last"].get("job")
        seen0 = e["first_open_t"] or e["first_seen_t"]
        # An incident whose job names no case (the detector may spell jobs differently) is
        # given to the case whose sidecar was running when it first appeared (one feed only).
        by_time = single and ej not in all_jobs and ej != MONITORING_JOB and seen0 is not None and t_start and t_end and t_start <= seen0 <= t_end
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
    r = {"feed": feed, "job": job, "detected": det, "after_case": after}
    r["verdict"] = judge(exp, det, culprit, fault_t, c.get("aborted"))
    if isinstance(exp, tuple):
        r["blamed_waiting"] = sorted({x for i in det for x in i["culprit_ranks"] if x != culprit and x >= 0})
    try:
        with open(os.path.join(d, f"metrics{suffix}.txt"), errors="replace") as f:
            r["metrics_seen"] = sorted({l.split("{")[0].split(" ")[0] for l in f if l.startswith("ncclwatch_gpu_")})
    except OSError:
        r["metrics_seen"] = []
    return r


def collect_case(d, by_id, run, all_jobs=()):
    c = read_json(os.path.join(d, "case.json"), {}) or {}
    case = c.get("case") or os.path.basename(d)
    job = c.get("job") or case
    exp = expected_kinds(case) if not c.get("phase_plan") else None
    feeds = c.get("feeds") or [{"feed": c.get("mode") or "info", "job": job, "suffix": ""}]
    res = {"case": case, "job": job, "mode": c.get("mode") or "info", "feeds_run": [f["feed"] for f in feeds],
           "skipped": bool(c.get("skipped")), "plan": {k: c.get(k) for k in ("budget_s", "steps", "fault_step", "fault_rank", "nproc", "one_gpu", "four_gpu", "pg_timeout_s", "monitor_interval_s", "trimmed", "phase_plan", "socket", "fr")},
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
    events = []
    info, phases, faults, pts = job_markers(lines, events)
    fault = faults[0] if faults and not c.get("phase_plan") else None
    fault_t = fault.get("t") if fault else None
    culprit = fault.get("rank") if fault and isinstance(fault.get("rank"), int) else DEFAULT_CULPRIT
    res["expected"] = (None if exp is None else {"kind": "/".join(exp), "culprit_rank": culprit}) if exp != "unknown" else "unknown"
    res["fault"] = fault
    res["job_info"] = [info[k] for k in sorted(info, key=lambda x: (x is None, x))]
    res["phases"] = [p for p in phases if "event" not in p]
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

    single = len(feeds) == 1
    fr = {}
    for f in feeds:
        fr[f["feed"]] = collect_feed(f["feed"], f["job"], d, f.get("suffix") or "", by_id, exp, culprit, fault_t, pt_t,
                                     c, t_start, t_end, all_jobs, single)
    res["feeds"] = fr
    if c.get("phase_plan"):
        plist = phase_list([p for p in phases if "event" in p], job_end)
        res["phase_plan"] = c.get("phase_plan")
        res["socket"] = c.get("socket")
        # One rank per GPU (four GPUs): a culprit GPU names its rank.
        gpus = [i.get("gpu") for i in info.values() if isinstance(i, dict)]
        gpu_rank = {i["gpu"]: r for r, i in info.items() if isinstance(i, dict) and isinstance(i.get("gpu"), int)
                    and gpus.count(i["gpu"]) == 1 and isinstance(r, int)}
        for f in feeds:
            eps = episodes(by_id, f["job"], gpu_rank)
            fr[f["feed"]]["phases"] = judge_phases(plist, eps, f["feed"], job_end)
            fr[f["feed"]].update(edge_findings(plist, eps, job_end))
            judged = [p["verdict"]["pass"] for p in fr[f["feed"]]["phases"]]
            edges = fr[f["feed"]].get("before_first_phase", []) + fr[f["feed"]].get("after_last_phase", [])
            fr[f["feed"]]["verdict"] = {
                "pass": (False not in judged and not edges) if plist else None,
                "why": (f"{judged.count(True)}/{len(judged)} phases pass, {judged.count(False)} fail, {judged.count(None)} undecided"
                        + (f"; {len(edges)} finding(s) at the job's start or end" if edges else "")) if plist else "no phase markers"}
        res["fault_evidence"] = fault_evidence(d, events)
    # The case's verdict: every feed's.
    vs = [fr[f["feed"]]["verdict"].get("pass") for f in feeds]
    if single:
        only = fr[feeds[0]["feed"]]
        res["detected"], res["after_case"], res["verdict"] = only["detected"], only["after_case"], only["verdict"]
    else:
        res["detected"] = [dict(x, feed=k) for k, v in fr.items() for x in v["detected"]]
        res["verdict"] = {"pass": False if False in vs else (None if None in vs else True),
                          "why": "; ".join(f"{k}: {v['verdict'].get('why')}" for k, v in fr.items())}
    # Incidents about the watchdog itself (job _ncclwatch) while this case ran: shown, not judged.
    res["monitoring"] = [detected_entry(e, fault_t, pt_t) for e in by_id.values()
                         if e["last"].get("job") == MONITORING_JOB and t_start and t_end
                         and t_start <= (e["first_open_t"] or e["first_seen_t"] or 0) <= t_end]
    if c.get("aborted"):
        res["aborted"] = True
    for f in feeds:
        v = fr[f["feed"]]["verdict"]
        if v.get("latency_s") is not None and pt and pt.get("after_fault_s") is not None:
            v["beat_pytorch_by_s"] = rnd(pt["after_fault_s"] - v["latency_s"])
    if c.get("mode") in ("plugin", "both"):
        res["plugin"] = plugin_summary(d)
    if c.get("fr"):
        res["flight_recorder"] = fr_summary(d)
    res["offline"] = offline_summary(d, fault_t or job_start)

    # NVML as the (first) sidecar published it, per phase of the case.
    snaps = []
    for r in read_jsonl(os.path.join(d, f"snapshots{feeds[0].get('suffix') or ''}.jsonl")):
        if isinstance(r.get("snap"), dict):
            snaps.append((r.get("t"), r["snap"]))
    res["snapshot_samples"] = len(snaps)
    nranks = int(c.get("nproc") or 0) or max([len(info)] + [2])
    ranks = list(range(nranks))
    gmap = {r: gpu_index_for_rank(snaps, r, info) for r in ranks}
    res["rank_gpu"] = {str(r): {"gpu": v[0], "by": v[1]} for r, v in gmap.items()}
    nv = []
    windows = phase_windows(case, fault_t, pt_t, phases, job_end, ranks, culprit)
    if c.get("phase_plan"):
        windows += fault_phase_windows(phase_list([p for p in phases if "event" in p], job_end), job_end, ranks)
    for expect, label, rs, a, b in windows:
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
    res["metrics_seen"] = fr[feeds[0]["feed"]].get("metrics_seen", [])
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
        all_jobs.update(f.get("job") for f in cj.get("feeds") or [])
    cases = []
    for name in names:
        try:
            cases.append(collect_case(dirs[name], by_id, run, all_jobs))
        except Exception as e:  # one broken case must not lose the others
            cases.append({"case": name, "error": f"{type(e).__name__}: {e}", "detected": [],
                          "verdict": {"pass": None, "why": "collect.py failed on this case"}})
    unattributed = [detected_entry(e, None, None) for e in by_id.values()
                    if e["last"].get("job") not in all_jobs and e["last"].get("job") != MONITORING_JOB]
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
