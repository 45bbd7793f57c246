#!/usr/bin/env python3
"""The fault matrix (issue 30): many short 4-rank jobs on one GPU, one fault class each, with
the faulty rank and the fault's timing drawn from a seed, watched live by the watchdog (one
detector with embedded etcd for the command, a sidecar per job), and the truth of every run
written beside what the detector said. matrix.sh is the device command around it.

  matrix.py plan --seed S [--mode M] [CASE...]   the plan as JSON (nothing runs)
  matrix.py run --seed S [--mode M] [CASE...]    plan and run, results under $OUT
  matrix.py classes                              the classes, one a line

A CASE is a class, CLASS:MODE, CLASS*N (N runs of it) or "all" (every class once); MODE is
plugin (NCCL_DEBUG=WARN + the profiler plugin), info (NCCL_DEBUG=INFO logs, no plugin),
both (one job, INFO logs and the plugin, two sidecars: <run>-info on the INFO logs, <run>-plugin
on the plugin's files and the logs' WARN lines) or mixed (plugin and info by turns). The plan
is shuffled from the seed (ORDER=given keeps the order); runs that no longer fit the command's
time are recorded as skipped.

Every knob comes from the environment (matrix.sh sets the device's and the dry run's); see
e2e/gpu/README.md, "The fault matrix".
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def env(k, d=None):
    v = os.environ.get(k)
    return d if v is None or v == "" else v


def envf(k, d):
    return float(env(k, d))


def envi(k, d):
    return int(float(env(k, d)))


DRY = env("DRYRUN", "0") == "1"
WORLD = 4

# The classes: what the run must show. group: none (healthy), slow (a slowdown: warn, never
# page), stall (one long stall the job recovers from), stop (the job stops for good: the root
# is certain, page), mismatch (a wrong call: page). page: "none" (a critical page is a false
# one), "any" (critical allowed, not required), "critical" (should page). hang: the job (or
# its communicator) stops progressing, so the "named within 3 s" goal applies.
CLASSES = {
    "healthy": {"group": "none", "page": "none", "hang": False},
    "host_lag": {"group": "slow", "page": "none", "hang": False},
    "host_jitter": {"group": "slow", "page": "none", "hang": False},
    "periodic_pause": {"group": "slow", "page": "none", "hang": False},
    "long_stall": {"group": "stall", "page": "any", "hang": True},
    "cpu_starve": {"group": "slow", "page": "none", "hang": False},
    "gpu_hog": {"group": "slow", "page": "none", "hang": False},
    "slow_nic": {"group": "slow", "page": "none", "hang": False},
    "flap_nic": {"group": "slow", "page": "none", "hang": False},
    "oom": {"group": "stop", "page": "critical", "hang": True},
    "exit_early": {"group": "stop", "page": "critical", "hang": True},
    "pg_destroyed": {"group": "stop", "page": "critical", "hang": True},
    "frozen": {"group": "stop", "page": "critical", "hang": True},
    "skip_coll": {"group": "stop", "page": "critical", "hang": True},
    "wrong_call": {"group": "mismatch", "page": "critical", "hang": None},  # hangs for wrong_op only
}
MODES = ("plugin", "info", "both")


def rate(bps):
    """bytes/s as the rate-limit shim reads it (K/M/G: powers of 1000)."""
    for unit, f in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if bps >= f:
            return f"{bps / f:.4g}{unit}"
    return str(int(bps))


def draw(cls, mode, rng):
    """The run's random part: the faulty rank, the onset, the severity (job.py's knobs)."""
    ngpus = max(1, envi("NGPUS", 1))
    net_scale = envf("RATE_SCALE", 64 if DRY else 1)  # the stub sends count*4/64 bytes per op
    r = rng.randrange(WORLD)
    p = {"FAULT_RANK": r, "FAULT_SEED": rng.randrange(1 << 30)}
    onset = rng.uniform(envf("WARMUP_MIN_S", 5), envf("WARMUP_MAX_S", 8))
    # How long the run goes on after the onset: a slowdown (goal: named within 30 s; measured
    # 2-7 s) or a healthy run 16 s; a stop 12 s with the plugin (goal: 3 s), 15 s from INFO
    # logs (named after the 10 s hang floor).
    if CLASSES[cls]["group"] in ("none", "slow"):
        obs = envf("OBS_SLOW_S", 16)
    else:
        obs = envf("OBS_STOP_S", 0) or (12 if mode == "plugin" else 15)
    scen = cls
    if cls == "host_lag":
        p["LAG_FACTOR"] = round(rng.uniform(0.3, 1.0), 2)
    elif cls == "host_jitter":
        p.update(JITTER_P=round(rng.uniform(0.1, 0.25), 3), JITTER_MIN_S=0.2, JITTER_MAX_S=round(rng.uniform(0.5, 1.0), 2))
    elif cls == "periodic_pause":
        p.update(PERIOD_S=round(rng.uniform(5, 7), 2), PAUSE_LEN_S=round(rng.uniform(1.5, 2.5), 2))
    elif cls == "long_stall":
        p["STALL_S"] = round(rng.uniform(envf("STALL_MIN_S", 18), envf("STALL_MAX_S", 22)), 1)
        obs = p["STALL_S"] + envf("RECOVER_S", 5)
    elif cls == "cpu_starve":
        p.update(CPU_HOGS=rng.choice([int(x) for x in env("CPU_HOGS_CHOICES", "1" if DRY else "2,4").split(",")]),
                 CPU_NICE=rng.choice([5, 10]), CPU_HOG_DUTY=envf("CPU_HOG_DUTY", 0.1 if DRY else 1.0))
    elif cls == "gpu_hog":
        p.update(HOG_WORKERS=rng.choice([1, 2, 4]), HOG_DUTY=1.0)
    elif cls == "slow_nic":
        p["NIC_RATE"] = rate(rng.choice([100e6, 150e6, 250e6]) / net_scale)
    elif cls == "flap_nic":
        p.update(FLAP_RATE=rate(30e6 / net_scale), FLAP_ON_S=round(rng.uniform(1.5, 2.5), 2),
                 FLAP_EVERY_S=round(rng.uniform(5, 7), 2))
    elif cls == "skip_coll":
        scen = "skip_sub"
    elif cls == "wrong_call":
        scen = rng.choice(["wrong_op", "wrong_dtype", "wrong_size"])
    roots = [r]
    gpu_of = (lambda k: k % ngpus) if ngpus > 1 else (lambda k: 0)
    if cls == "gpu_hog":  # a foreign process on a GPU slows every rank on it
        roots = [k for k in range(WORLD) if gpu_of(k) == gpu_of(r)]
    if cls == "healthy":
        roots, p = [], {"FAULT_SEED": p["FAULT_SEED"]}
    hang = CLASSES[cls]["hang"] if CLASSES[cls]["hang"] is not None else scen == "wrong_op"
    return scen, p, round(onset, 2), round(obs, 1), roots, gpu_of(r) if roots else None, hang


def parse_cases(tokens, mode):
    out = []
    for tok in tokens:
        for t in tok.replace(",", " ").split():
            name, _, m = t.partition(":")
            n = 1
            if "*" in name:
                name, _, k = name.partition("*")
                n = int(k)
            names = list(CLASSES) if name == "all" else [name]
            for c in names:
                if c not in CLASSES:
                    raise SystemExit(f"matrix: unknown class {c!r}; want one of {', '.join(CLASSES)} or all")
                if m and m not in MODES:
                    raise SystemExit(f"matrix: unknown mode {m!r} in {t!r}; want one of {', '.join(MODES)}")
                out += [(c, m or None)] * n
    if mode not in MODES + ("mixed",):
        raise SystemExit(f"matrix: MODE {mode!r}: want plugin, info, both or mixed")
    return out


def make_plan(seed, mode, tokens):
    cases = parse_cases(tokens or ["all"], mode)
    rng = random.Random(f"matrix:{seed}")
    if env("ORDER", "shuffle") != "given":
        rng.shuffle(cases)
    runs = []
    flip = rng.randrange(2)
    for k, (cls, m) in enumerate(cases):
        m = m or (("plugin", "info")[(k + flip) % 2] if mode == "mixed" else mode)
        scen, params, onset, obs, roots, gpu, hang = draw(cls, "info" if m == "both" else m, random.Random(f"matrix:{seed}:{k}:{cls}"))
        name = f"s{seed}-{k:02d}-{cls}-{m}"
        feeds = ["info", "plugin"] if m == "both" else [m]
        jobs = {f: (f"{name}-{f}" if m == "both" else name) for f in feeds}
        c = CLASSES[cls]
        run_s = onset + obs
        runs.append({
            "index": k, "name": name, "class": cls, "scenario": scen, "mode": m, "feeds": feeds, "jobs": jobs,
            "params": params, "onset_s": onset, "obs_s": obs, "run_s": round(run_s, 2),
            "truth": {"class": cls, "scenario": scen, "group": c["group"], "page": c["page"], "hang": hang,
                      "roots": roots, "root_hosts": [f"ncclwatch-e2e-rank{q}" for q in roots], "root_gpu": gpu,
                      "fault_rank": params.get("FAULT_RANK")},
            "est_s": round(envf("INIT_EST_S", 6) + run_s + envf("TEARDOWN_EST_S", 4), 1),
        })
    return {"seed": seed, "mode": mode, "cases": tokens or ["all"], "dry": DRY, "world": WORLD,
            "ngpus": max(1, envi("NGPUS", 1)), "runs": runs, "est_s": round(sum(r["est_s"] for r in runs), 1)}


# ---------------------------------------------------------------------------------------------
# Running it


class ZygoteLaunch:
    """A job as forks of the rank servers (zygote.py): pids and exit codes from their answers;
    a rank that fails gets torchrun's line ("failed (exitcode: N) local_rank: ...") in the
    job's stdout, and its peers live on (a rank on another node would), until the window ends."""

    def __init__(self, drv, name, stdout):
        self.drv, self.name, self.stdout = drv, name, stdout
        self.pids, self.rcs, self.said = {}, {}, set()

    def start(self, d, jenv):
        for r in range(WORLD):
            self.drv.zread(r)  # drop anything stale
            spec = {"job": self.name, "script": os.path.join(HERE, "job.py"), "stdout": self.stdout, "env": jenv, "cwd": d}
            self.drv.zyg[r].stdin.write((json.dumps(spec) + "\n").encode())
            self.drv.zyg[r].stdin.flush()

    def poll(self):
        """True when every rank has ended."""
        for r in range(WORLD):
            for m in self.drv.zread(r):
                if m.get("job") != self.name:
                    continue
                if "rc" in m:
                    self.rcs[r] = m
                elif "pid" in m:
                    self.pids[r] = m["pid"]
        for r, m in self.rcs.items():
            if m["rc"] != 0 and r not in self.said:
                self.said.add(r)
                ts = time.strftime("%m%d %H:%M:%S", time.localtime(m["t"]))
                with open(self.stdout, "a") as f:
                    f.write(f"E{ts}.{int(m['t'] % 1 * 1e6):06d} {os.getpid()} torch/distributed/elastic/multiprocessing/api.py:"
                            f"882] failed (exitcode: {m['rc']}) local_rank: {r} (pid: {m['pid']}) of binary: {self.drv.torch_py}\n")
        return len(self.rcs) == WORLD

    def kill(self):
        for r, pid in self.pids.items():
            if r not in self.rcs:
                try:
                    os.killpg(pid, signal.SIGKILL)  # the rank and what it started (CPU hogs)
                except (ProcessLookupError, PermissionError):
                    pass
        end = time.time() + 10
        while len(self.rcs) < len(self.pids) and time.time() < end:
            self.poll()
            time.sleep(0.05)

    def result(self):
        return ({str(r): p for r, p in self.pids.items()}, {str(r): m["rc"] for r, m in self.rcs.items()},
                max((m["t"] for m in self.rcs.values()), default=time.time()))


class TorchrunLaunch:
    """A job under torchrun (LAUNCH=torchrun; the dry run: stubrun.py): a fresh python and torch
    import per rank, torchrun's own store and failure handling, --monitor-interval MONITOR_S
    (30: the peers of a failed rank live on through the window). Pids come from the ranks'
    WATCHDOG_INFO lines; a rank has ended when its process is gone or a zombie."""
    AGENT_KEYS = ("MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID")

    def __init__(self, drv, name, stdout):
        self.drv, self.name, self.stdout = drv, name, stdout
        self.proc, self.pids, self.gone = None, {}, {}

    def start(self, d, jenv):
        e = dict(os.environ)
        for k, v in jenv.items():
            if v is None or k in self.AGENT_KEYS:
                e.pop(k, None)
            else:
                e[k] = str(v)
        if os.path.exists(self.drv.ratelimit) and env("RATELIMIT", "1") == "1":
            e.update(LD_PRELOAD=self.drv.ratelimit, RATELIMIT_FILE=os.path.join(self.drv.work, "rl", "rank%r"))
        runner = [sys.executable, os.path.join(HERE, "stubrun.py")] if DRY else [self.drv.torch_py, "-m", "torch.distributed.run"]
        cmd = runner + ["--standalone", f"--nproc_per_node={WORLD}", f"--monitor-interval={env('MONITOR_S', '30')}",
                        os.path.join(HERE, "job.py")]
        with open(self.stdout, "ab") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=f, env=e, cwd=d, start_new_session=True)

    def poll(self):
        if not self.pids or len(self.pids) < WORLD:
            for k, o in markers(self.stdout):
                if k == "INFO" and isinstance(o.get("pid"), int):
                    self.pids[o["rank"]] = o["pid"]
        for r, pid in self.pids.items():
            if r not in self.gone and not alive(pid):
                self.gone[r] = time.time()
        return self.proc.poll() is not None or (len(self.pids) == WORLD and len(self.gone) == WORLD)

    def kill(self):
        for pid in [self.proc.pid] + list(self.pids.values()):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def result(self):
        rc = self.proc.poll()
        return ({str(r): p for r, p in self.pids.items()}, {"torchrun": rc},
                max(self.gone.values(), default=time.time()))


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Driver:
    def __init__(self, a, plan):
        self.a, self.plan = a, plan
        self.t0 = envf("T0", time.time())
        self.limit = envf("LIMIT_S", 545)
        self.finish_s = envf("FINISH_S", 25)
        self.out = os.path.abspath(env("OUT", os.path.join(ROOT, "tmp", "matrix-out")))
        self.work = os.path.abspath(env("WORK", "/tmp/e2e-matrix-work"))
        self.watchdog = self.abs(env("WATCHDOG", "bin/watchdog-linux-amd64"))
        self.plugin = self.abs(env("PLUGIN_SO", "bin/libnccl-profiler-ncclwatch.so"))
        self.profdump = self.abs(env("PROFDUMP", "bin/profdump-linux-amd64"))
        self.ratelimit = self.abs(env("RATELIMIT_SO", "bin/ratelimit.so"))
        self.torch_py = env("TORCH_PY", sys.executable)
        self.det_port, self.etcd_port = envi("DET_PORT", 9300), envi("ETCD_PORT", 2379)
        self.sc_port, self.store_port = envi("SC_PORT", 9301), envi("STORE_PORT", 29400)
        self.node = env("NODE", os.uname().nodename.split(".")[0] or "node0")
        self.procs = []        # every helper process, ended by id at the end
        self.zyg = []          # the rank servers
        self.zbuf = {}
        self.records = []
        self.aborting = False
        self.log_f = None

    def abs(self, p):
        return p if os.path.isabs(p) else os.path.join(ROOT, p)

    def left(self):
        return self.t0 + self.limit - time.time()

    def log(self, msg):
        line = f"[{time.time() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        if self.log_f:
            self.log_f.write(line + "\n")
            self.log_f.flush()

    def start(self, cmd, log, env_=None, **kw):
        f = open(log, "ab")
        p = subprocess.Popen(cmd, stdout=kw.pop("stdout", f), stderr=f, env=env_, **kw)
        f.close()
        self.procs.append(p)
        return p

    def stop(self, p, grace=3.0):
        if p is None or p.poll() is not None:
            return
        try:
            p.terminate()
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        except ProcessLookupError:
            pass

    def http(self, url, timeout=2.0):
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()

    def wait_http(self, url, s, proc=None):
        end = time.time() + s
        while time.time() < end and not self.aborting:
            if proc is not None and proc.poll() is not None:
                return False
            try:
                self.http(url, 1.0)
                return True
            except Exception:  # noqa: BLE001  (not up yet)
                time.sleep(0.2)
        return False

    # ---- the command's services -------------------------------------------------------------
    def setup(self):
        os.makedirs(self.out, exist_ok=True)
        shutil.rmtree(self.work, ignore_errors=True)
        for d in ("cases", "rl", "hog", "etcd"):
            os.makedirs(os.path.join(self.work, d), exist_ok=True)
        self.log_f = open(os.path.join(self.out, "run.log"), "a")
        self.log(f"matrix: seed={self.plan['seed']} mode={self.plan['mode']} dry={DRY} runs={len(self.plan['runs'])} "
                 f"est={self.plan['est_s']}s limit={self.limit}s watchdog={self.watchdog} torch_py={self.torch_py}")
        with open(os.path.join(self.work, "plan.json"), "w") as f:
            json.dump(self.plan, f, indent=1)
        base = dict(os.environ)
        if not DRY:
            # No torch.cuda here: a CUDA context beside the first job would be a foreign process
            # on its GPU. The versions come from the jobs' own WATCHDOG_INFO lines.
            self.start(["sh", "-c", "nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total,clocks.max.sm --format=csv; "
                        "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv; nproc"],
                       os.path.join(self.work, "nvidia-smi.txt"))
        zenv = dict(base, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", WORLD_SIZE=str(WORLD),
                    LOCAL_WORLD_SIZE=str(WORLD), GROUP_RANK="0", ROLE_RANK="0", GROUP_WORLD_SIZE="1",
                    MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.store_port))
        if DRY:
            zenv["PYTHONPATH"] = os.path.join(HERE, "stubtorch") + os.pathsep + base.get("PYTHONPATH", "")
        # The store and the rank servers import torch now, while the detector starts.
        self.fork = env("LAUNCH", "fork") != "torchrun"
        self.store = None if not self.fork else self.start([self.torch_py, os.path.join(HERE, "zygote.py"), "--store", str(self.store_port),
                                                           "--stores", str(len(self.plan["runs"]) + 1)],
                                os.path.join(self.work, "store.log"), env_=zenv, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        for r in range(WORLD if self.fork else 0):
            e = dict(zenv, RANK=str(r), LOCAL_RANK=str(r))
            if os.path.exists(self.ratelimit) and env("RATELIMIT", "1") == "1":
                # Loaded in every rank of every job (the shim costs nothing while its file says 0):
                # slow_nic and flap_nic write the faulty rank's rate into its file.
                e.update(LD_PRELOAD=self.ratelimit, RATELIMIT_FILE=os.path.join(self.work, "rl", "rank%r"))
            p = self.start([self.torch_py, os.path.join(HERE, "zygote.py"), "--rank", str(r)],
                           os.path.join(self.work, f"zygote{r}.log"), env_=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            os.set_blocking(p.stdout.fileno(), False)
            self.zyg.append(p)
            self.zbuf[r] = b""
        if not os.path.exists(self.ratelimit):
            self.log(f"WARNING: {self.ratelimit} missing: slow_nic and flap_nic runs have no throttle")
        hog_runs = [r for r in self.plan["runs"] if r["class"] == "gpu_hog"]
        if hog_runs:
            pool = max(r["params"]["HOG_WORKERS"] for r in hog_runs)
            gpus = sorted({r["truth"]["root_gpu"] for r in hog_runs})
            for g in gpus:
                self.start([self.torch_py, os.path.join(HERE, "hog.py"), "--gpu", str(g), "--dir", os.path.join(self.work, "hog"),
                            "--pool", str(pool), "--max-s", str(int(self.limit + 60))] + (["--dry"] if DRY else []),
                           os.path.join(self.work, "hog", "supervisor.log"), env_=dict(base, CUDA_DEVICE_ORDER="PCI_BUS_ID"))
        self.det = self.start([self.watchdog, "detector", "--http", f"127.0.0.1:{self.det_port}",
                               "--embedded-etcd-listen", f"127.0.0.1:{self.etcd_port}",
                               "--embedded-etcd-dir", os.path.join(self.work, "etcd")] + env("DETECTOR_FLAGS", "").split(),
                              os.path.join(self.work, "detector.log"))
        self.det_url = f"http://127.0.0.1:{self.det_port}"
        ok = self.wait_http(self.det_url + "/api/v1/incidents", 30, self.det)
        self.log(f"detector {'up' if ok else 'NOT answering (see detector.log)'} (pid {self.det.pid})")
        self.inc_mon = self.start([sys.executable, os.path.join(HERE, "monitor.py"), "incidents", "--url",
                                   self.det_url + "/api/v1/incidents", "--out", os.path.join(self.work, "incidents.jsonl"),
                                   "--stop", os.path.join(self.work, "stop-incidents"), "--every", "0.5",
                                   "--max-s", str(int(self.limit + 30))], os.path.join(self.work, "monitor-incidents.log"))
        # The rank servers and the store: ready when each has said so.
        if not self.fork:
            return ok
        end = time.time() + envf("ZYGOTE_WAIT_S", 90)
        ready, store = set(), b""
        os.set_blocking(self.store.stdout.fileno(), False)
        while (len(ready) < WORLD or b"\n" not in store) and time.time() < end and not self.aborting:
            for r in range(WORLD):
                for m in self.zread(r):
                    if "ready" in m:
                        ready.add(r)
                if self.zyg[r].poll() is not None:
                    self.log(f"ERROR: rank server {r} exited rc={self.zyg[r].returncode} (see zygote{r}.log)")
                    return False
            try:
                store += self.store.stdout.read() or b""
            except (BlockingIOError, ValueError):
                pass
            if self.store.poll() is not None:
                self.log(f"ERROR: the store exited rc={self.store.returncode} (see store.log)")
                return False
            time.sleep(0.05)
        self.log(f"rank servers ready: {sorted(ready)}; store: {store.decode(errors='replace').strip() or 'NOT ready (see store.log)'}")
        return len(ready) == WORLD and b"\n" in store and ok

    def zread(self, r):
        """The rank server's answers so far (non-blocking)."""
        out = []
        try:
            chunk = self.zyg[r].stdout.read()
        except (BlockingIOError, ValueError):
            chunk = None
        if chunk:
            self.zbuf[r] += chunk
            *lines, self.zbuf[r] = self.zbuf[r].split(b"\n")
            for line in lines:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    # ---- one run ----------------------------------------------------------------------------
    def job_env(self, run, d):
        p = run["params"]
        e = {k: str(v) for k, v in p.items()}
        e.update(SCENARIO=run["scenario"], RUN_S=str(run["run_s"]), FAULT_AT_S=str(run["onset_s"]),
                 PG_TIMEOUT=env("PG_TIMEOUT", "120"), COMPUTE_S=env("COMPUTE_S", "0.05" if DRY else "0.15"),
                 STEP_LOG=os.path.join(d, "steps.rank%r.log"), HOG_DIR=os.path.join(self.work, "hog"),
                 NCCL_DEBUG_FILE=os.path.join(d, "nccl", "nccl.%h.%p.log"), NCCL_DEBUG_TIMESTAMP_LEVELS="ALL",
                 NCCL_DEBUG_TIMESTAMP_FORMAT="[%F %T.%6f] ", NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1",
                 NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
                 TORCH_NCCL_ASYNC_ERROR_HANDLING="1", TORCH_NCCL_DUMP_ON_TIMEOUT="0", CUDA_DEVICE_ORDER="PCI_BUS_ID",
                 TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT=str(run["index"]),
                 TORCHELASTIC_RUN_ID=run["name"], MASTER_PORT=str(self.store_port + (run["index"] if self.fork else 0)),
                 PYTHONUNBUFFERED="1",
                 NCCL_PROFILER_PLUGIN=None, NCCLWATCH_PROFILER_DIR=None, NCCL_DEBUG_SUBSYS=None)
        ngpus = max(1, envi("NGPUS", 1))
        if ngpus > 1:
            e["SHARE_GPUS"] = str(ngpus)
        else:
            e["ONE_GPU"] = "1"
        cpr = envi("CPUS_PER_RANK", 0)
        if cpr > 0:
            e.update(CPUS_PER_RANK=str(cpr), CPU_FIRST=env("CPU_FIRST", "2"))
        if run["mode"] in ("plugin", "both"):
            e.update(NCCL_PROFILER_PLUGIN=self.plugin, NCCLWATCH_PROFILER_DIR=os.path.join(d, "prof"))
        if run["mode"] in ("info", "both"):
            e.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,COLL,NET")
        else:
            e["NCCL_DEBUG"] = "WARN"
        if DRY:
            e.update(STUB_NCCL_DIR=os.path.join(d, "stubnccl"), STUB_NET="1", STUB_QUIET="1")
            os.makedirs(e["STUB_NCCL_DIR"], exist_ok=True)
        return e

    def feeds(self, run, d):
        out = []
        for i, f in enumerate(run["feeds"]):
            logs = os.path.join(d, "warn" if (f == "plugin" and run["mode"] == "both") else "nccl", "*.log")
            suf = f"-{f}" if run["mode"] == "both" else ""
            out.append({"feed": f, "job": run["jobs"][f], "logs": logs, "prof": os.path.join(d, "prof") if f == "plugin" else "",
                        "port": self.sc_port + i, "suffix": suf})
        return out

    def reset_faults(self):
        for r in range(WORLD):
            with open(os.path.join(self.work, "rl", f"rank{r}.tmp"), "w") as f:
                f.write("0\n")
            os.replace(os.path.join(self.work, "rl", f"rank{r}.tmp"), os.path.join(self.work, "rl", f"rank{r}"))

    def hogs_off(self):
        for n in os.listdir(os.path.join(self.work, "hog")):
            if n.endswith(".ctl"):
                p = os.path.join(self.work, "hog", n)
                with open(p + ".tmp", "w") as f:
                    f.write("off\n")
                os.replace(p + ".tmp", p)

    def steps_start(self, stdout):
        """rank 0's WATCHDOG_PHASE steps_start time, when its line is there."""
        try:
            with open(stdout, errors="replace") as f:
                for line in f:
                    if "WATCHDOG_PHASE" in line and '"steps_start"' in line:
                        m = re.search(r"WATCHDOG_PHASE (\{.*\})", line)
                        o = json.loads(m.group(1)) if m else {}
                        if o.get("rank") == 0:
                            return float(o["t"])
        except (OSError, ValueError, KeyError):
            pass
        return None

    def run_one(self, run):
        name, d = run["name"], os.path.join(self.work, "cases", run["name"])
        for sub in ("nccl", "prof", "warn"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        stdout = os.path.join(d, "stdout.log")
        open(stdout, "a").close()
        self.reset_faults()
        rec = {"name": name, "index": run["index"], "skipped": False, "t_launch": time.time()}
        self.log(f"run {name}: rank {run['params'].get('FAULT_RANK')} onset {run['onset_s']}s run {run['run_s']}s "
                 f"{ {k: v for k, v in run['params'].items() if k not in ('FAULT_RANK', 'FAULT_SEED')} }")
        feeds = self.feeds(run, d)
        sidecars, mons = [], []
        stopf = os.path.join(d, "stop")
        max_s = str(int(run["run_s"] + 120))
        for fd in feeds:
            st = os.path.join(d, "state" + fd["suffix"])
            os.makedirs(st, exist_ok=True)
            cmd = [self.watchdog, "sidecar", "--etcd-endpoints", f"http://127.0.0.1:{self.etcd_port}", "--job", fd["job"],
                   "--node", self.node, "--logs", fd["logs"], "--http", f"127.0.0.1:{fd['port']}",
                   f"--nvml={env('NVML', 'false' if DRY else 'true')}", f"--check-pids={env('CHECK_PIDS', 'true')}",
                   "--ras-addr", env("RAS_ADDR", "127.0.0.1:1" if DRY else "127.0.0.1:28028"), "--state-dir", st,
                   f"--profiler-dir={fd['prof']}"]
            if env("STDOUT_LOGS", "1") == "1":
                cmd += ["--stdout-logs", stdout]
            cmd += env("SIDECAR_FLAGS", "").split()
            sidecars.append(self.start(cmd, os.path.join(d, f"sidecar{fd['suffix']}.log"),
                                       env_=dict(os.environ, NCCLWATCH_PROFILER_DIR=fd["prof"])))
            mons.append(self.start([sys.executable, os.path.join(HERE, "monitor.py"), "snapshot", "--url",
                                    f"http://127.0.0.1:{fd['port']}/api/v1/snapshot", "--out",
                                    os.path.join(d, f"snapshots{fd['suffix']}.jsonl"), "--stop", stopf, "--every", "0.5",
                                    "--job-url", f"{self.det_url}/api/v1/jobs/{fd['job']}", "--job-out",
                                    os.path.join(d, f"jobview{fd['suffix']}.jsonl"), "--max-s", max_s],
                                   os.path.join(d, "monitor.log")))
        mons.append(self.start([sys.executable, os.path.join(HERE, "monitor.py"), "stamp", "--in", stdout, "--out",
                                os.path.join(d, "stdout.stamped.log"), "--stop", stopf, "--max-s", max_s],
                               os.path.join(d, "monitor.log")))
        if run["mode"] == "both":
            mons.append(self.start([sys.executable, os.path.join(HERE, "monitor.py"), "warncopy", "--src", os.path.join(d, "nccl"),
                                    "--dst", os.path.join(d, "warn"), "--stop", stopf, "--max-s", max_s],
                                   os.path.join(d, "monitor.log")))
        if "plugin" in run["feeds"] and os.path.exists(self.profdump):
            mons.append(self.start([sys.executable, os.path.join(HERE, "monitor.py"), "regions", "--profdump", self.profdump,
                                    "--dir", os.path.join(d, "prof"), "--out", os.path.join(d, "regions.jsonl"), "--stop", stopf,
                                    "--every", "1", "--max-s", max_s], os.path.join(d, "monitor.log")))
        # The job: forks of the rank servers, or torchrun (LAUNCH=torchrun).
        launch = (TorchrunLaunch if env("LAUNCH", "fork") == "torchrun" else ZygoteLaunch)(self, name, stdout)
        launch.start(d, self.job_env(run, d))
        rec["launch"] = env("LAUNCH", "fork")
        rec["sidecar_ok"] = [self.wait_http(f"http://127.0.0.1:{fd['port']}/api/v1/snapshot", 10, sc)
                             for fd, sc in zip(feeds, sidecars)]
        t_steps = None
        init_max = envf("INIT_MAX_S", 60)
        # A job that stops for good is cut at its window's end; one that goes on gets time to end.
        stops = run["truth"]["hang"] and run["truth"]["group"] != "stall"
        grace = 0.5 if stops else envf("END_GRACE_S", 8)
        killed = None
        while not launch.poll():
            now = time.time()
            if t_steps is None:
                t_steps = self.steps_start(stdout)
            if self.aborting:
                killed = "aborted"
            elif t_steps is None and now - rec["t_launch"] > init_max:
                killed = "init_timeout"
            elif t_steps is not None and now > t_steps + run["run_s"] + grace:
                killed = "window_end"
            elif now > self.t0 + self.limit - self.finish_s:
                killed = "command_time"
            if killed:
                break
            time.sleep(0.1)
        rec["t_kill"] = time.time() if killed else None
        rec["killed"] = killed
        launch.kill()
        rec["pids"], rec["rc"], rec["t_exit"] = launch.result()
        rec["t_steps"] = t_steps or self.steps_start(stdout)
        if not killed and not self.aborting:
            time.sleep(envf("POST_S", 3))  # a clean end: what the watchdog says of it counts too
        rec["t_window_end"] = rec["t_kill"] or (rec["t_exit"] + envf("POST_S", 3))
        if run["class"] == "gpu_hog":
            self.hogs_off()
        self.reset_faults()
        with open(stopf, "w"):
            pass
        for p in sidecars:
            self.stop(p, 3)
        for p in mons:
            self.stop(p, 2)
        if "plugin" in run["feeds"] and os.path.exists(self.profdump):
            with open(os.path.join(d, "prof-final.json"), "w") as f:
                subprocess.run([self.profdump, "-dir", os.path.join(d, "prof")], stdout=f, stderr=subprocess.DEVNULL, timeout=10)
        if "info" in run["feeds"] and env("ANALYZE", "1") == "1":
            self.procs.append(subprocess.Popen(
                ["sh", "-c", f'"{self.watchdog}" analyze --json nccl > analyze-logs.json 2> analyze-logs.err'], cwd=d))
        rec["sidecar_rc"] = [p.returncode for p in sidecars]
        rec["t_end"] = time.time()
        self.log(f"run {name}: {'killed (' + killed + ')' if killed else 'ended'} rc={rec['rc']} "
                 f"after {rec['t_end'] - rec['t_launch']:.1f}s; {self.incident_line(run)}")
        return rec

    def incident_line(self, run):
        """The detector's incidents of the run's jobs so far, one short line."""
        try:
            incs = json.loads(self.http(self.det_url + "/api/v1/incidents"))
        except Exception as e:  # noqa: BLE001
            return f"incidents: {type(e).__name__}"
        jobs = set(run["jobs"].values())
        mine = [i for i in incs or [] if isinstance(i, dict) and i.get("job") in jobs]
        parts = [f"{i.get('job', '').rsplit('-', 1)[-1] + ':' if run['mode'] == 'both' else ''}{i.get('kind')}/{i.get('severity')}"
                 f"{[c.get('rank') for c in i.get('culprits') or []]}" for i in mine]
        return f"{len(mine)} incident(s) {' '.join(parts)}; roots {run['truth']['roots']}"

    # ---- the whole command -------------------------------------------------------------------
    def run_all(self):
        ok = self.setup()
        if not ok:
            self.log("setup failed: no runs")
        seen = []  # what each run took beyond its run_s (start, end grace, teardown)
        for run in self.plan["runs"]:
            overhead = max(seen) if seen else envf("INIT_EST_S", 6) + envf("TEARDOWN_EST_S", 4)
            fits = self.left() - self.finish_s >= run["run_s"] + overhead
            if not ok or self.aborting or not fits:
                why = "setup failed" if not ok else "aborted" if self.aborting else f"no time left ({self.left():.0f}s)"
                self.records.append({"name": run["name"], "index": run["index"], "skipped": True, "why": why})
                self.log(f"run {run['name']}: skipped ({why})")
                continue
            try:
                rec = self.run_one(run)
                self.records.append(rec)
                if rec.get("t_steps") and rec.get("killed") in (None, "window_end"):
                    seen.append(rec["t_end"] - rec["t_launch"] - run["run_s"])
            except Exception as e:  # noqa: BLE001  (one broken run does not stop the others)
                self.log(f"run {run['name']}: harness error {type(e).__name__}: {e}")
                self.records.append({"name": run["name"], "index": run["index"], "skipped": True,
                                     "why": f"harness error: {type(e).__name__}: {e}"[:300]})
            self.save()
        self.finish()

    def finish(self):
        self.log("runs done; finishing")
        with open(os.path.join(self.work, "stop-incidents"), "w"):
            pass
        time.sleep(0.6)
        self.stop(self.inc_mon if hasattr(self, "inc_mon") else None, 2)
        try:
            with open(os.path.join(self.work, "incidents.final.json"), "wb") as f:
                f.write(self.http(self.det_url + "/api/v1/incidents"))
            with open(os.path.join(self.work, "detector.metrics.txt"), "wb") as f:
                f.write(self.http(self.det_url + "/metrics"))
        except Exception as e:  # noqa: BLE001
            self.log(f"final incidents: {type(e).__name__}: {e}")
        for z in self.zyg:
            try:
                z.stdin.write(b"stop\n")
                z.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
        try:
            if self.store:
                self.store.stdin.write(b"stop\n")
                self.store.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        self.hogs_off()
        for p in reversed(self.procs):
            self.stop(p, 3)
        self.save()
        shutil.copy(os.path.join(self.work, "incidents.jsonl"), os.path.join(self.out, "incidents.jsonl"))

    def versions(self):
        return {"job": first_info(self.work), "nvidia_smi": read_text(os.path.join(self.work, "nvidia-smi.txt"))}

    def save(self):
        """matrix.json: the plan, each run's truth with its measured facts, each run's record."""
        by = {r["name"]: r for r in self.records}
        runs = []
        for run in self.plan["runs"]:
            rec = by.get(run["name"])
            if rec is None:
                continue
            r = dict(run, record=rec)
            if not rec.get("skipped"):
                r["truth"] = dict(run["truth"], **measure(run, rec, os.path.join(self.work, "cases", run["name"]),
                                                          os.path.join(self.work, "hog")))
            runs.append(r)
        doc = {k: v for k, v in self.plan.items() if k != "runs"}
        doc.update(node=self.node, t0=self.t0, limit_s=self.limit, detector_flags=env("DETECTOR_FLAGS", ""),
                   sidecar_flags=env("SIDECAR_FLAGS", ""), stdout_logs=env("STDOUT_LOGS", "1") == "1",
                   cpus_per_rank=envi("CPUS_PER_RANK", 0), launch=env("LAUNCH", "fork"), runs=runs,
                   versions=self.versions())
        with open(os.path.join(self.out, "matrix.json.tmp"), "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(os.path.join(self.out, "matrix.json.tmp"), os.path.join(self.out, "matrix.json"))


def first_info(work):
    """The first rank's WATCHDOG_INFO of the first run that started: torch, NCCL, the GPU."""
    cases = os.path.join(work, "cases")
    for name in sorted(os.listdir(cases)) if os.path.isdir(cases) else []:
        for k, o in markers(os.path.join(cases, name, "stdout.log")):
            if k == "INFO":
                return {x: o.get(x) for x in ("torch", "nccl", "gpu_name", "pci_bus_id", "compute_iters", "per_iter_ms")}
    return None


def read_text(p, n=2000):
    try:
        with open(p, errors="replace") as f:
            return f.read(n)
    except OSError:
        return None


MARK = re.compile(r"WATCHDOG_(FAULT|EVENT|INFO|PHASE) (\{.*\})")


def markers(stdout):
    out = []
    try:
        with open(stdout, errors="replace") as f:
            for line in f:
                m = MARK.search(line)
                if m:
                    try:
                        out.append((m.group(1), json.loads(m.group(2))))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def step_times(path):
    """[(step, end time, length)] from job.py's STEP_LOG."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                w = line.split()
                if len(w) == 3:
                    out.append((int(w[0]), float(w[1]), float(w[2])))
    except (OSError, ValueError):
        pass
    return out


def measure(run, rec, d, hogdir):
    """What the run really did: the fault's onset (its mark; the first hog kernel; the first
    link flap), the job's step time before and after it (rank 0), so a slowdown that did not
    bite is known as such."""
    ms = markers(os.path.join(d, "stdout.log"))
    fault = next((o for k, o in ms if k == "FAULT"), None)
    events = [o for k, o in ms if k == "EVENT"]
    info = {o.get("rank"): o for k, o in ms if k == "INFO"}
    onset = fault.get("t") if fault else None
    how = "fault mark" if fault else None
    if run["class"] == "gpu_hog" and onset:
        for line in (read_text(os.path.join(hogdir, "events.jsonl"), 1 << 20) or "").splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("what") == "compute_start" and e.get("t_kernel", 0) >= onset - 1:
                onset, how = e["t_kernel"], "first hog kernel"
                break
    if run["class"] == "flap_nic":
        on = [e["t"] for e in events if e.get("what") == "link_on"]
        if on:
            onset, how = on[0], "first link_on"
    steps = step_times(os.path.join(d, "steps.rank0.log"))
    out = {"onset_t": onset, "onset_how": how, "fault": fault, "events": len(events),
           "stalls_s": [e.get("s") for e in events if e.get("what") == "stall"][:50],
           "steps": len(steps), "pids": {str(r): o.get("pid") for r, o in info.items()},
           "gpu_bus": {str(r): o.get("pci_bus_id") for r, o in info.items()},
           "cpus": {str(r): o.get("cpus") for r, o in info.items()}}
    if steps and onset:
        end = rec.get("t_window_end") or steps[-1][1]
        before = [s[2] for s in steps if s[1] < onset][3:]
        after = [s for s in steps if onset <= s[1] <= end]
        if before:
            base = statistics.median(before)
            out["step_s_healthy"] = round(base, 4)
            if after and run["truth"]["group"] in ("slow", "stall"):  # a stop's "slowdown" means nothing
                span = after[-1][1] - onset
                out["step_s_after"] = round(span / len(after), 4)
                out["slowdown"] = round(span / len(after) / base - 1, 3)
            # A job that stopped: how long after the fault its last step ended.
            last = steps[-1][1]
            out["progress_after_onset_s"] = round(max(0.0, last - onset), 2)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["plan", "run", "classes"])
    ap.add_argument("cases", nargs="*", help="classes (CLASS, CLASS:MODE, CLASS*N, all); default all")
    ap.add_argument("--seed", type=int, default=int(env("SEED", "1")))
    ap.add_argument("--mode", default=env("MODE", "plugin"))
    a = ap.parse_args()
    if a.what == "classes":
        for c, v in CLASSES.items():
            print(c, v["group"], v["page"])
        return 0
    plan = make_plan(a.seed, a.mode, a.cases or env("CASES", "").split())
    if a.what == "plan":
        json.dump(plan, sys.stdout, indent=1)
        print()
        return 0
    drv = Driver(a, plan)

    def on_term(signum, frame):
        drv.aborting = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    drv.run_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
