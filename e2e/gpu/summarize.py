#!/usr/bin/env python3
"""Markdown tables for docs/validation.md from run.sh's results.json (standard library only).

  summarize.py results.json > results.md
"""
import json
import sys

MODES = {"info": "INFO", "plugin": "WARN + plugin"}

HANGS = ("silent", "frozen", "wrong_op", "order_inversion", "order_inversion_full", "skip_sub", "left_pg", "gpu_hang",
         "p2p_skip")  # PyTorch's own timeout is expected to fire
FEEDS = ("info", "plugin")


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
    return det_list_text(det)


def det_list_text(det):
    if not det:
        return "none"
    parts = []
    for d in det[:4]:
        ranks = ",".join(str(r) for r in d.get("culprit_ranks") or []) or "?"
        cause = f" ({d['cause']})" if d.get("cause") else ""
        parts.append(f"{d.get('kind')}{cause} → rank {ranks}")
    if len(det) > 4:
        parts.append(f"+{len(det) - 4} more")
    return "; ".join(parts)


def key_incident(c, det=None):
    e = c.get("expected")
    det = c.get("detected") or [] if det is None else det
    if isinstance(e, dict):
        for d in det:
            if d.get("kind") in e["kind"].split("/") and e.get("culprit_rank") in (d.get("culprit_ranks") or []):
                return d
    return det[0] if det else None


def latency_text(c, det=None):
    d = key_incident(c, det)
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


def fmt_sev(sev):
    if not isinstance(sev, dict) or not sev:
        return ""
    return " ".join(f"{k}={v}" for k, v in sev.items())


def phase_feed_text(p):
    if not p.get("fault"):
        n = len(p.get("findings") or [])
        late = len(p.get("late_from_previous") or [])
        return ("none" if not n else "; ".join(f"**{f['kind']}→{f['ranks']}**" for f in p["findings"][:3])) + (
            f" (+{late} late of the previous phase)" if late else "")
    if not p.get("named"):
        found = p.get("found") or []
        return "not named" + (": " + "; ".join(f"{f['kind']}→{f['ranks']}" for f in found[:3]) if found else "")
    t = f"{p.get('kind')}{'/' + p['cause'] if p.get('cause') else ''} {fmt_s(p.get('latency_s'))}"
    if not p.get("class_named"):
        t += " (wrong class)"
    end = p.get("episode_end_after_phase_s")
    t += "; open at the end" if p.get("episode_open_at_job_end") else (f"; ended {fmt_s(end, True)}" if end is not None else "")
    if p.get("blamed_waiting"):
        t += f"; **blamed waiting {p['blamed_waiting']}**"
    return t


def verdict_mark(v):
    return {True: "pass", False: "**FAIL**", None: "–"}[(v or {}).get("pass")]


def phase_tables(r, w):
    for c in r.get("cases") or []:
        feeds = c.get("feeds") or {}
        if not c.get("phase_plan") or c.get("skipped"):
            continue
        names = [f for f in FEEDS if f in feeds] or list(feeds)
        rows = {f: feeds[f].get("phases") or [] for f in names}
        n = max((len(v) for v in rows.values()), default=0)
        w(f"#### {c['case']}{' (socket transport, rate-limit shim)' if c.get('socket') else ' (NVLink)'}")
        w("")
        w("Latency from the phase's start; episode end relative to the phase's end; slowdown = the phase's mean step time over the first healthy phase's median.")
        w("")
        w("| phase | fault | rank | slowdown | " + " | ".join(f"{MODES.get(f, f)}: named, latency, end" for f in names) + " | result |")
        w("|---|---|---|---|" + "---|" * len(names) + "---|")
        for i in range(n):
            base = next(v[i] for v in rows.values() if i < len(v))
            fault = "healthy" if not base.get("fault") else f"{base['fault']} {base.get('mode') or ''} {fmt_sev(base.get('severity'))}".strip()
            sl = base.get("slowdown")
            cells = [phase_feed_text(rows[f][i]) if i < len(rows[f]) else "–" for f in names]
            verdicts = [rows[f][i].get("verdict") for f in names if i < len(rows[f])]
            res = ", ".join(f"{MODES.get(f, f)} {verdict_mark(v)}" for f, v in zip(names, verdicts))
            w(f"| {base.get('phase')} ({fmt_s(base.get('duration_s'))}{', cut' if base.get('cut') else ''}) | {fault} | "
              f"{base.get('rank') if base.get('rank') is not None else '–'} | {f'{sl:.2f}x' if isinstance(sl, (int, float)) else '–'} | "
              + " | ".join(cells) + f" | {res} |")
        for f in names:
            for k, label in (("before_first_phase", "before the first phase"), ("after_last_phase", "after the last phase")):
                for e in feeds[f].get(k) or []:
                    w(f"- {MODES.get(f, f)}: {label}: {e['kind']} → {e['ranks']} ({e['summary'][:100]})")
        ev = c.get("fault_evidence") or {}
        for name, st in (ev.get("ratelimit") or {}).items():
            if isinstance(st, dict):
                w(f"- rate limit {name}: {st.get('limited_bytes', 0) / 1e6:.1f} MB sent limited, {st.get('slept_ns', 0) / 1e9:.1f} s slept")
        starts = [h for h in ev.get("hog") or [] if h.get("what") == "compute_start"]
        if starts:
            w(f"- GPU hogs: {len(starts)} worker start(s) (first kernels at " + ", ".join(
                f"GPU {h.get('gpu')} {h.get('t_kernel', h.get('t')):.1f}" for h in starts[:6]) + ")")
        w("")


def offline_table(r, w):
    rows = [c for c in r.get("cases") or [] if c.get("offline")]
    if not rows:
        return
    w("Offline: `watchdog analyze` after each case, on its INFO logs alone, and on everything it left (logs, stdout, Flight Recorder dumps); times from the fault (or the job's start):")
    w("")
    w("| case | expected | INFO logs | logs + stdout + dumps |")
    w("|---|---|---|---|")

    def cell(x):
        if not x:
            return "–"
        if x.get("error"):
            return f"{x['error']} (rc {x.get('rc')})"
        fs = x.get("findings") or []
        if not fs:
            return f"nothing found (rc {x.get('rc')})"
        parts = []
        for f in fs[:5]:
            ep = f" {fmt_s(f['onset_s'], True)}..{fmt_s(f['end_s'], True)}" if f.get("onset_s") is not None else ""
            parts.append(f"{f['kind']}{'/' + f['cause'] if f.get('cause') else ''} → {f['ranks']}{ep}")
        return "; ".join(parts) + (f" (+{len(fs) - 5})" if len(fs) > 5 else "")
    for c in rows:
        o = c["offline"]
        exp = "phases" if c.get("phase_plan") else expected_text(c.get("expected"))
        w(f"| {c['case']} | {exp} | {cell(o.get('logs'))} | {cell(o.get('all'))} |")
    w("")


def fr_table(r, w):
    rows = [c for c in r.get("cases") or [] if c.get("flight_recorder") and not c.get("phase_plan")]
    if not rows:
        return
    w("Flight Recorder (PyTorch's dumps on the timeout, and its analyzer `fr_trace`):")
    w("")
    w("| case | expected root | ranks dumped | JSON dumps | fr_trace (all ranks) | fr_trace --allow-incomplete-ranks |")
    w("|---|---|---|---|---|---|")
    for c in rows:
        fr = c["flight_recorder"]
        e = c.get("expected")
        root = e.get("culprit_rank") if isinstance(e, dict) else "–"
        ft = fr.get("fr_trace") or {}

        def verdict(name):
            x = ft.get(name)
            if not x:
                return "–"
            v = "<br>".join(l.replace("|", "\\|")[:160] for l in x.get("verdict")[:3]) or "(no verdict line)"
            return f"{v} {x.get('rc') or ''}"
        js = sum(1 for j in fr.get("json") or [] if j.get("entries") is not None)
        w(f"| {c['case']} | {root} | {fr.get('ranks_dumped')} | {js} | {verdict('fr_trace.txt')} | {verdict('fr_trace.incomplete.txt')} |")
    w("")


def feed_tables(r, w):
    if not any(not c.get("phase_plan") for c in r.get("cases") or []):
        return
    w("| case | expected | " + " | ".join(f"{MODES.get(f, f)}: detected (latency)" for f in FEEDS) + " | waiting ranks blamed | PyTorch timeout | result |")
    w("|---|---|" + "---|" * len(FEEDS) + "---|---|---|")
    for c in r.get("cases") or []:
        if c.get("phase_plan"):
            continue
        if c.get("skipped"):
            w(f"| {c['case']} | {expected_text(c.get('expected'))} | skipped: {(c.get('verdict') or {}).get('why', '')} |" + " – |" * (len(FEEDS) + 2))
            continue
        feeds = c.get("feeds") or {}
        cells, blamed = [], []
        for f in FEEDS:
            x = feeds.get(f)
            if not x:
                cells.append("–")
                continue
            cells.append(f"{det_list_text(x.get('detected') or [])} ({latency_text(c, x.get('detected') or [])}) {verdict_mark(x.get('verdict'))}")
            if x.get("blamed_waiting"):
                blamed.append(f"{MODES.get(f, f)} {x['blamed_waiting']}")
        pt = c.get("pytorch_timeout_after_s")
        ptt = fmt_s(pt) if pt is not None else ("none" if c["case"] in HANGS else "–")
        w(f"| {c['case']} | {expected_text(c.get('expected'))} | " + " | ".join(cells) + f" | {'; '.join(blamed) or 'none'} | {ptt} | {verdict_text(c)} |")
    w("")


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
        dry = " (DRY RUN: job.py on the stub torch and its fake NCCL, no GPU)" if run.get("one_gpu") or run.get("four_gpu") else " (DRY RUN: replayed logs, no GPU)"
    w(f"### Live run{dry}: "
      f"{s.get('passed', 0)}/{s.get('cases', 0)} cases pass")
    w("")
    v = (r.get("versions") or "").strip().splitlines()
    v = v[-1] if v and v[-1].startswith("torch ") else "versions unknown"
    ranks = f"{run.get('nproc')} ranks sharing GPU 0 (NCCL_HOSTID per rank, NET/Socket on lo)" if run.get("one_gpu") else f"{run.get('nproc') or 2} ranks, one GPU each"
    if run.get("feeds") == "both":
        ranks += ("; one run per case feeds two sidecars: INFO logs (µs timestamps), and the profiler plugin with "
                  "the WARN lines of the same logs; Flight Recorder on" if run.get("fr") else "")
    w(f"`{v}` on node `{run.get('node')}`, {ranks}; PyTorch timeout {run.get('pg_timeout_s')} s; "
      f"detector flags `{run.get('detector_flags') or '(defaults)'}`.")
    w("")
    w("Latency = when the 0.5 s poller of `GET /api/v1/incidents` first saw the incident, minus the "
      "time the faulty rank printed `WATCHDOG_FAULT`; in brackets, the incident's own `opened_at` "
      "and `fault_at` relative to that moment.")
    w("")
    if run.get("feeds") == "both" or any(len(c.get("feeds") or {}) > 1 for c in r.get("cases") or []):
        feed_tables(r, w)
        phase_tables(r, w)
        fr_table(r, w)
        offline_table(r, w)
    else:
        legacy_table(r, w)
    notes(r, w)
    nvml_tables(r, w)
    print("\n".join(out))


def legacy_table(r, w):
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


def notes(r, w):
    notes = []
    for c in r.get("cases") or []:
        v = c.get("verdict") or {}
        if v.get("pass") is False or c.get("error"):
            notes.append(f"- {c['case']}: {v.get('why') or c.get('error')}")
        feeds = c.get("feeds") or {}
        per_feed = [(f"{c['case']} ({MODES.get(k, k)})", x.get("after_case") or []) for k, x in feeds.items()] if len(feeds) > 1 \
            else [(c["case"], c.get("after_case") or [])]
        for name, after in per_feed:
            for d in after:
                notes.append(f"- {name}: after the case ended: {d.get('kind')} → rank "
                             f"{','.join(map(str, d.get('culprit_ranks') or [])) or '?'} ({(d.get('summary') or '')[:100]})")
    for c in r.get("cases") or []:
        if c.get("mode") not in ("plugin", "both") or c.get("skipped"):
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
        for n in notes:
            w(n)
        w("")


def nvml_tables(r, w):
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


if __name__ == "__main__":
    main()
