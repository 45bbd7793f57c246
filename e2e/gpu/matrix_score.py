#!/usr/bin/env python3
"""Scores fault-matrix runs (matrix.sh) against their truth: per mode (plugin, info) a markdown
table of runs whose root was named, incidents naming a non-root (a waiter), critical pages with
no fault, incidents per fault and time to name (from the fault's onset to the first incident
naming the root), the goals of issue 30, a table per class and one line per run.

  matrix_score.py OUT [OUT...] [--json score.json]

OUT is a folder matrix.sh filled (matrix.json + incidents.jsonl) or a matrix.json with its
incidents.jsonl beside it; several are scored together. Exit status 0 when every goal holds,
1 when one does not, 2 on bad input.

How a run is read (python3 standard library only):
- its window: from the job's launch to the harness's kill, or to 3 s after a job that ended on
  its own; an incident counts when the detector opened it (opened_at, else when first polled)
  inside the window; versions polled up to 0.6 s after it are read (the poll that follows);
- an incident names the root when one of its culprits is a root rank (for a foreign process
  on a GPU: any rank on that GPU, or a culprit of no rank that names that GPU); it names a
  non-root when a culprit is a rank that is no root (on a healthy run every rank is one);
  opened more than 0.5 s before the fault's onset it is noise, whatever it names;
- a critical page with no fault: an incident that was critical at any version and came before
  the fault, named no root, or belongs to a run that must not page (healthy, slowdowns, the
  periodic pause);
- time to name: the first version naming a root (its opened_at when the first version already
  did) minus the onset (the fault mark; the first hog kernel; the first link flap);
- a slowdown whose measured effect (rank 0's mean step after the onset over its median healthy
  step) stayed under 10 % did not bite: it is listed, not counted in the root rate;
- runs the harness could not start (skipped, no first step) are listed apart;
- from INFO logs alone, a fault that costs time inside the collectives (a slow or flapping
  NIC: every rank arrives on time and waits in the op) leaves no evidence of which rank:
  those runs are left out of the info root rate (issue 30: "elsewhere an honest 'cannot say
  which'") and listed apart, with whether they got such an incident (no culprit) or none.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import sys

SLACK_POLL_S = 0.6
PRE_ONSET_S = 0.5
GOAL_RATE = {"plugin": 0.95, "info": 0.90}
HANG_GOAL_S = 3.0
SLOW_GOAL_S = 30.0
SLOW_MIN = 0.10
# Classes whose evidence INFO logs do not carry (see the docstring).
INFO_BLIND = {"slow_nic", "flap_nic"}
RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?$")


def parse_time(s):
    """RFC 3339 (Go's time.Time in JSON) to unix seconds; None when zero or absent."""
    if not isinstance(s, str):
        return None
    m = RFC3339.match(s.strip())
    if not m or int(m.group(1)) <= 1:
        return None
    dt = datetime.datetime(*(int(m.group(i)) for i in range(1, 7)), tzinfo=datetime.timezone.utc)
    off, tz = 0, m.group(8) or "Z"
    if tz != "Z":
        sign, tz = (-1 if tz[0] == "-" else 1), tz[1:].replace(":", "")
        off = sign * (int(tz[:2]) * 3600 + int(tz[2:]) * 60)
    return dt.timestamp() - off + (float(m.group(7)) if m.group(7) else 0.0)


def load(src):
    path = os.path.join(src, "matrix.json") if os.path.isdir(src) else src
    with open(path) as f:
        doc = json.load(f)
    hist = {}  # job -> id -> [(poll t, incident)]
    inc_path = os.path.join(os.path.dirname(path), "incidents.jsonl")
    try:
        with open(inc_path, errors="replace") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                inc = r.get("inc")
                if isinstance(inc, dict) and isinstance(r.get("t"), (int, float)):
                    hist.setdefault(str(inc.get("job")), {}).setdefault(str(inc.get("id")), []).append((r["t"], inc))
    except OSError:
        print(f"matrix_score: no {inc_path}: every run reads as without incidents", file=sys.stderr)
    return doc, hist


def norm_gpu(s):
    s = re.sub(r"[^0-9a-f]", "", str(s).lower().split(":", 1)[-1] if ":" in str(s) else str(s).lower())
    return s.lstrip("0") or "0"


def culprit_ranks(inc):
    return [c.get("rank") for c in inc.get("culprits") or [] if isinstance(c, dict) and isinstance(c.get("rank"), int)]


def names_root(inc, truth):
    roots = set(truth.get("roots") or [])
    for c in inc.get("culprits") or []:
        if not isinstance(c, dict):
            continue
        if c.get("rank") in roots:
            return True
        if c.get("rank", -1) < 0 and c.get("gpu") not in (None, "") and truth.get("root_gpu") is not None \
                and truth["class"] == "gpu_hog":
            want = {norm_gpu(truth["root_gpu"])} | {norm_gpu(b) for r, b in (truth.get("gpu_bus") or {}).items()
                                                    if b is not None and int(r) in roots}
            # The watchdog names a GPU "<index> (bus <bus id>)": either part may be the truth's.
            m = re.match(r"\s*(\d+)\s*\(bus\s+([^)]+)\)", str(c["gpu"]))
            names = {norm_gpu(m.group(1)), norm_gpu(m.group(2))} if m else {norm_gpu(c["gpu"])}
            if names & want:
                return True
    return False


def judge(run, feed, hist):
    truth, rec = run["truth"], run["record"]
    job = run["jobs"][feed]
    roots = set(truth.get("roots") or [])
    onset = truth.get("onset_t")
    w0, w1 = rec.get("t_launch"), rec.get("t_window_end")
    incs, after = [], []
    for iid, versions in sorted(hist.get(job, {}).items()):
        versions.sort(key=lambda v: v[0])
        first_t, first = versions[0]
        opened = parse_time(first.get("opened_at"))
        t_open = min(opened, first_t) if opened else first_t
        if first.get("kind") == "monitoring":
            continue
        if w1 is None or t_open > w1 or (w0 is not None and t_open < w0 - 5):
            after.append({"id": iid, "kind": first.get("kind"), "t": round(t_open - (onset or w0 or 0), 2)})
            continue
        seen = [(t, inc) for t, inc in versions if t <= w1 + SLACK_POLL_S] or versions[:1]
        ranks = sorted({r for _, inc in seen for r in culprit_ranks(inc)})
        sev = "critical" if any(inc.get("severity") == "critical" for _, inc in seen) else seen[-1][1].get("severity")
        t_root = None
        for k, (t, inc) in enumerate(seen):
            if names_root(inc, truth):
                t_root = t_open if k == 0 else t
                break
        pre = onset is None or t_open < onset - PRE_ONSET_S
        nonroot = [r for r in ranks if r >= 0 and r not in roots]
        e = {"id": iid, "kind": seen[-1][1].get("kind"), "severity": sev, "ranks": ranks,
             "cause": seen[-1][1].get("cause"), "summary": str(seen[-1][1].get("summary", ""))[:160],
             "t_open": round(t_open - onset, 2) if onset else None, "pre_onset": pre,
             "names_root": t_root is not None and not pre, "nonroot": nonroot,
             "t_root": round(t_root - onset, 2) if (t_root is not None and onset and not pre) else None}
        e["false_critical"] = sev == "critical" and (truth["page"] == "none" or not e["names_root"] or pre)
        incs.append(e)
    named = [e["t_root"] for e in incs if e["names_root"] and e["t_root"] is not None]
    res = {"run": run["name"], "class": truth["class"], "scenario": truth["scenario"], "mode": feed,
           "group": truth["group"], "page": truth["page"], "hang": bool(truth.get("hang")), "roots": sorted(roots),
           "onset_in_job_s": round(onset - rec["t_steps"], 2) if (onset and rec.get("t_steps")) else None,
           "slowdown": truth.get("slowdown"), "incidents": incs, "after": after,
           "named": bool(named), "t_name": round(min(named), 2) if named else None,
           "waiters": sum(1 for e in incs if e["nonroot"]),
           "false_critical": sum(1 for e in incs if e["false_critical"]),
           "critical_root": any(e["names_root"] and e["severity"] == "critical" for e in incs),
           "killed": rec.get("killed"), "rc": rec.get("rc")}
    # Whether the run counts toward the root rate: a fault that happened and bit.
    if not rec.get("t_steps") or (roots and onset is None):
        res["counted"], res["note"] = False, "no fault happened (the job did not start or reach it)"
    elif not roots:
        res["counted"], res["note"] = False, "healthy"
    elif truth["group"] == "slow" and (truth.get("slowdown") is None or truth["slowdown"] < SLOW_MIN):
        res["counted"], res["note"] = False, f"did not bite (slowdown {truth.get('slowdown')})"
    elif feed == "info" and truth["class"] in INFO_BLIND:
        honest = any(not e["ranks"] for e in incs)
        res["counted"], res["note"] = False, "logs blind: " + ("says it cannot say which" if honest else "no incident")
    else:
        res["counted"], res["note"] = True, ""
    return res


def pct(n, d):
    return f"{n}/{d} ({100 * n / d:.0f} %)" if d else "–"


def p50max(xs):
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.1f} / {max(xs):.1f}" if xs else "–"


def summarize(results, mode):
    rs = [r for r in results if r["mode"] == mode]
    faulty = [r for r in rs if r["roots"]]
    counted = [r for r in rs if r["counted"]]
    healthy = [r for r in rs if not r["roots"] and r["note"] == "healthy"]
    hangs = [r for r in counted if r["hang"]]
    slows = [r for r in counted if r["group"] == "slow"]
    per_fault = [len(r["incidents"]) for r in counted]
    s = {"mode": mode, "runs": len(rs), "faulty": len(faulty), "counted": len(counted),
         "named": sum(r["named"] for r in counted),
         "waiters": sum(r["waiters"] for r in rs),
         "false_critical": sum(r["false_critical"] for r in rs),
         "healthy_incidents": sum(len(r["incidents"]) for r in healthy), "healthy_runs": len(healthy),
         "incidents_per_fault_mean": round(sum(per_fault) / len(per_fault), 2) if per_fault else None,
         "incidents_per_fault_max": max(per_fault) if per_fault else None,
         "hangs": len(hangs), "hangs_fast": sum(1 for r in hangs if r["t_name"] is not None and r["t_name"] <= HANG_GOAL_S),
         "hang_t": [r["t_name"] for r in hangs], "slows": len(slows),
         "slows_named": sum(1 for r in slows if r["t_name"] is not None and r["t_name"] <= SLOW_GOAL_S),
         "slow_t": [r["t_name"] for r in slows],
         "not_bitten": [r["run"] for r in rs if r["note"].startswith("did not bite")],
         "invalid": [r["run"] for r in rs if r["note"].startswith("no fault")],
         "blind": [r["run"] + " (" + r["note"][len("logs blind: "):] + ")" for r in rs if r["note"].startswith("logs blind")]}
    s["rate"] = s["named"] / s["counted"] if s["counted"] else None
    goals = [("0 waiters named", s["waiters"] == 0, str(s["waiters"])),
             ("0 incidents on healthy runs", s["healthy_incidents"] == 0,
              f"{s['healthy_incidents']} in {s['healthy_runs']} run(s)"),
             ("0 critical pages with no fault", s["false_critical"] == 0, str(s["false_critical"])),
             ("roots named (plugin >= 95 %, info >= 90 %)",
              s["rate"] is not None and s["rate"] >= GOAL_RATE.get(mode, 0.9), pct(s["named"], s["counted"])),
             (f"slowdowns >= 10 % named within {SLOW_GOAL_S:.0f} s", s["slows_named"] == s["slows"],
              pct(s["slows_named"], s["slows"]))]
    if mode == "plugin":
        goals.append((f"hangs named within {HANG_GOAL_S:.0f} s", s["hangs_fast"] == s["hangs"], pct(s["hangs_fast"], s["hangs"])))
    s["goals"] = [{"goal": g, "pass": bool(ok), "value": v} for g, ok, v in goals]
    return s


def inc_brief(e):
    sev = {"critical": "C", "warning": "W", "info": "I"}.get(e["severity"], "?")
    mark = "✓" if e["names_root"] else ("✗" if e["nonroot"] or e["pre_onset"] else "·")
    t = f"{e['t_open']:+.1f}s" if e["t_open"] is not None else ""
    return f"{mark}{e['kind']}/{sev}{e['ranks']}{t}"


def render(results, summaries, sources):
    out = ["# Fault matrix", "", f"Sources: {', '.join(sources)}. Time to name: seconds from the fault's onset to the "
           "first incident naming a root (p50 / max). ✓ names a root, ✗ names a non-root or came before the fault.", ""]
    out += ["| mode | runs | faulty runs | roots named | incidents naming a non-root | critical pages with no fault | "
            "incidents on healthy runs | incidents per fault (mean / max) | time to name: hangs | time to name: slowdowns |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        out.append(f"| {s['mode']} | {s['runs']} | {s['faulty']} | {pct(s['named'], s['counted'])} | {s['waiters']} | "
                   f"{s['false_critical']} | {s['healthy_incidents']} | "
                   f"{s['incidents_per_fault_mean'] if s['incidents_per_fault_mean'] is not None else '–'} / "
                   f"{s['incidents_per_fault_max'] if s['incidents_per_fault_max'] is not None else '–'} | "
                   f"{p50max(s['hang_t'])} | {p50max(s['slow_t'])} |")
    out += ["", "Goals:", "", "| goal | " + " | ".join(s["mode"] for s in summaries) + " |",
            "|---|" + "---|" * len(summaries)]
    names = []
    for s in summaries:
        for g in s["goals"]:
            if g["goal"] not in names:
                names.append(g["goal"])
    for n in names:
        cells = []
        for s in summaries:
            g = next((g for g in s["goals"] if g["goal"] == n), None)
            cells.append("–" if g is None else f"{'pass' if g['pass'] else '**FAIL**'} ({g['value']})")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    for s in summaries:
        if s["not_bitten"] or s["invalid"] or s["blind"]:
            out += ["", f"{s['mode']}: not counted: did not bite: {', '.join(s['not_bitten']) or 'none'}; "
                    f"no fault happened: {', '.join(s['invalid']) or 'none'}"
                    + (f"; the logs carry no evidence of which rank: {', '.join(s['blind'])}" if s["blind"] else "") + "."]
    for s in summaries:
        rs = [r for r in results if r["mode"] == s["mode"]]
        out += ["", f"Per class, {s['mode']}:", "",
                "| class | runs | roots named | time to name (s) | non-root named | critical with no fault | incidents | measured slowdown |",
                "|---|---|---|---|---|---|---|---|"]
        for c in dict.fromkeys(r["class"] for r in rs):
            cr = [r for r in rs if r["class"] == c]
            cc = [r for r in cr if r["counted"]]
            sl = [r["slowdown"] for r in cr if r["slowdown"] is not None]
            out.append(f"| {c} | {len(cr)} | {pct(sum(r['named'] for r in cc), len(cc)) if cr[0]['roots'] else '–'} | "
                       f"{p50max([r['t_name'] for r in cc])} | {sum(r['waiters'] for r in cr)} | "
                       f"{sum(r['false_critical'] for r in cr)} | {sum(len(r['incidents']) for r in cr)} | "
                       f"{', '.join(f'{x * 100:+.0f} %' for x in sl) or '–'} |")
    out += ["", "Runs:", "", "| run | mode | roots | onset (s into job) | slowdown | named at (s) | incidents | note |",
            "|---|---|---|---|---|---|---|---|"]
    for r in results:
        sl = f"{r['slowdown'] * 100:+.0f} %" if r["slowdown"] is not None else "–"
        out.append(f"| {r['run']} | {r['mode']} | {r['roots'] or '–'} | {r['onset_in_job_s'] if r['onset_in_job_s'] is not None else '–'} | "
                   f"{sl} | {r['t_name'] if r['t_name'] is not None else '–'} | "
                   f"{' '.join(inc_brief(e) for e in r['incidents']) or 'none'} | "
                   f"{r['note']}{' killed: ' + r['killed'] if r['killed'] and r['killed'] != 'window_end' else ''} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="matrix.sh output folders, or matrix.json files")
    ap.add_argument("--json", help="also write the scores (every run, every incident) here")
    a = ap.parse_args()
    results, sources = [], []
    for src in a.sources:
        try:
            doc, hist = load(src)
        except (OSError, ValueError) as e:
            print(f"matrix_score: {src}: {e}", file=sys.stderr)
            return 2
        sources.append(f"{src} (seed {doc.get('seed')}, mode {doc.get('mode')}{', dry run' if doc.get('dry') else ''})")
        for run in doc.get("runs") or []:
            if run.get("record", {}).get("skipped"):
                continue
            for feed in run["feeds"]:
                results.append(judge(run, feed, hist))
    modes = [m for m in ("plugin", "info") if any(r["mode"] == m for r in results)]
    summaries = [summarize(results, m) for m in modes]
    sys.stdout.write(render(results, summaries, sources))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summaries": summaries, "runs": results}, f, indent=1)
    return 0 if all(g["pass"] for s in summaries for g in s["goals"]) else 1


if __name__ == "__main__":
    sys.exit(main())
