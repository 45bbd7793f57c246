#!/usr/bin/env python3
"""Markdown tables for docs/validation.md from run.sh's results.json (standard library only).

  summarize.py results.json > results.md
"""
import json
import sys

MODES = {"info": "INFO", "plugin": "WARN + plugin"}

HANGS = ("silent", "frozen", "wrong_op", "order_inversion", "order_inversion_full")  # PyTorch's own timeout is expected to fire


def fmt_s(x, signed=False):
    if x is None:
        return "–"
    return f"{x:+.1f} s" if signed else f"{x:.1f} s"


def expected_text(e):
    if e is None:
        return "no incident"
    if not isinstance(e, dict):
        return str(e)
    if "culprit_rank" not in e:
        return e["kind"]
    return f"{e['kind']}, rank {e['culprit_rank']}"


def detected_text(c):
    det = c.get("detected") or []
    if not det:
        return "none"
    parts = []
    for d in det[:4]:
        ranks = ",".join(str(r) for r in d.get("culprit_ranks") or []) or "?"
        parts.append(f"{d.get('kind')} → rank {ranks}")
    if len(det) > 4:
        parts.append(f"+{len(det) - 4} more")
    return "; ".join(parts)


def key_incident(c):
    e = c.get("expected")
    det = c.get("detected") or []
    if isinstance(e, dict):
        for d in det:
            if d.get("kind") in e["kind"].split("/") and e.get("culprit_rank") in (d.get("culprit_ranks") or []):
                return d
    return det[0] if det else None


def latency_text(c):
    d = key_incident(c)
    if not d or d.get("latency_s") is None:
        return "–"
    s = f"{d['latency_s']:.1f} s"
    extra = []
    if d.get("opened_latency_s") is not None:
        extra.append(f"opened {d['opened_latency_s']:+.1f}")
    if d.get("fault_at_minus_fault_s") is not None:
        extra.append(f"fault_at {d['fault_at_minus_fault_s']:+.1f}")
    return s + (f" ({', '.join(extra)})" if extra else "")


def verdict_text(c):
    v = (c.get("verdict") or {}).get("pass")
    return {True: "pass", False: "**FAIL**", None: "–"}[v]


def stat(s):
    if not s:
        return "–"
    if s["min"] == s["max"]:
        return f"{s['median']:g}"
    return f"{s['median']:g} ({s['min']:g}–{s['max']:g})"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py results.json")
    with open(sys.argv[1]) as f:
        r = json.load(f)
    run = r.get("run") or {}
    out = []
    w = out.append
    s = r.get("summary") or {}
    dry = ""
    if run.get("dryrun"):
        dry = " (DRY RUN: job.py on the stub torch and its fake NCCL, no GPU)" if run.get("one_gpu") else " (DRY RUN: replayed logs, no GPU)"
    w(f"### Live run{dry}: "
      f"{s.get('passed', 0)}/{s.get('cases', 0)} cases pass")
    w("")
    v = (r.get("versions") or "").strip().splitlines()
    v = v[-1] if v and v[-1].startswith("torch ") else "versions unknown"
    ranks = f"{run.get('nproc')} ranks sharing GPU 0 (NCCL_HOSTID per rank, NET/Socket on lo)" if run.get("one_gpu") else f"{run.get('nproc') or 2} ranks, one GPU each"
    w(f"`{v}` on node `{run.get('node')}`, {ranks}; PyTorch timeout {run.get('pg_timeout_s')} s; "
      f"detector flags `{run.get('detector_flags') or '(defaults)'}`.")
    w("")
    w("Latency = when the 0.5 s poller of `GET /api/v1/incidents` first saw the incident, minus the "
      "time the faulty rank printed `WATCHDOG_FAULT`; in brackets, the incident's own `opened_at` "
      "and `fault_at` relative to that moment.")
    w("")
    w("| case | logs | expected | detected (kind → culprit) | detection latency | PyTorch timeout | result |")
    w("|---|---|---|---|---|---|---|")
    for c in r.get("cases") or []:
        mode = MODES.get(c.get("mode"), c.get("mode") or "–")
        if c.get("skipped"):
            w(f"| {c['case']} | {mode} | {expected_text(c.get('expected'))} | skipped: {(c.get('verdict') or {}).get('why', '')} | – | – | – |")
            continue
        pt = c.get("pytorch_timeout_after_s")
        ptt = fmt_s(pt) if pt is not None else ("none" if c["case"] in HANGS else "–")
        if pt is not None and c.get("pytorch_timeout", {}).get("ranks_timed_out"):
            ptt += " (ranks " + ",".join(map(str, c["pytorch_timeout"]["ranks_timed_out"])) + ")"
        w(f"| {c['case']} | {mode} | {expected_text(c.get('expected'))} | {detected_text(c)} | {latency_text(c)} | {ptt} | {verdict_text(c)} |")
    w("")
    notes = []
    for c in r.get("cases") or []:
        v = c.get("verdict") or {}
        if v.get("pass") is False or c.get("error"):
            notes.append(f"- {c['case']}: {v.get('why') or c.get('error')}")
        for d in c.get("after_case") or []:
            notes.append(f"- {c['case']}: after the case ended: {d.get('kind')} → rank "
                         f"{','.join(map(str, d.get('culprit_ranks') or [])) or '?'} ({(d.get('summary') or '')[:100]})")
    for c in r.get("cases") or []:
        if c.get("mode") != "plugin" or c.get("skipped"):
            continue
        pl = c.get("plugin")
        if not pl or not pl.get("regions"):
            notes.append(f"- {c['case']} (plugin): no region file: the plugin did not load, or the job never initialised NCCL")
            continue
        bits = [f"{pl['regions']} region(s), ranks {pl['ranks']}", f"ABI v{','.join(map(str, pl['abi'])) or '?'}",
                f"{pl['comms']} communicators", f"{pl['dropped_events']} events dropped"]
        if pl.get("disabled"):
            bits.append(f"DISABLED on {pl['disabled']}")
        if c.get("sidecar_profiler") == "false":
            bits.append("this sidecar cannot read them (no --profiler-dir)")
        notes.append(f"- {c['case']} (plugin): " + ", ".join(bits))
    for m in r.get("monitoring_incidents") or []:
        notes.append(f"- watchdog self-monitoring: {m.get('kind')} ({(m.get('summary') or '')[:120]})")
    if notes:
        w("Notes:")
        out.extend(notes)
        w("")

    rows = [(c, n) for c in r.get("cases") or [] for n in c.get("nvml") or []]
    if rows:
        w("NVML as the sidecar read it through go-nvml (median, range in brackets; state = the "
          "sidecar's classification, share of samples):")
        w("")
        w("| case | rank (GPU) | what the rank was doing | util % | power W | SM MHz | state seen | samples |")
        w("|---|---|---|---|---|---|---|---|")
        for c, n in rows:
            st = f"{n['state']} {int(round(100 * (n.get('state_share') or 0)))}%" if n.get("state") else "–"
            rk = ",".join(map(str, n["rank"])) if isinstance(n.get("rank"), list) else n.get("rank")
            w(f"| {c['case']} | {rk} ({n['gpu']}) | {n['phase']}: {n['what']} | {stat(n.get('util_pct'))} | "
              f"{stat(n.get('power_w'))} | {stat(n.get('sm_mhz'))} | {st} | {n.get('samples', 0)} |")
        w("")
    probe = r.get("nvml_probe_idle") or []
    if probe:
        w(f"Idle GPUs before the first job (`watchdog nvml-probe`, first of {len(probe)} samples):")
        w("")
        w("```")
        w(json.dumps(probe[0])[:600])
        w("```")
        w("")
    print("\n".join(out))


if __name__ == "__main__":
    main()
