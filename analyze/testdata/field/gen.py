#!/usr/bin/env python3
"""Writes cases/ beside this file: small jobs whose fault is known, printed the way NCCL
2.7-2.30 and launchers print them. Hosts, pids, addresses and pointers are made up."""
import datetime, json, os, shutil, random

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases")
random.seed(14)


def ptr(seed):
    return "0x%x" % (0x55d0c0a00000 + seed * 0x1a2b30)


class P:
    def __init__(self, host, pid, dev, rank, nranks, ip, ib_ip=None, version="2.18.5+cuda12.2",
                 hca=("mlx5_0", "mlx5_3"), net="IB", commid="0x6b2f0d913c85e0a1", ts=None, func=False):
        self.host, self.pid, self.dev, self.rank, self.nranks = host, pid, dev, rank, nranks
        self.ip, self.ib_ip, self.version, self.hca, self.net = ip, ib_ip or ip.replace("10.10.", "192.168."), version, hca, net
        self.commid, self.ts, self.func = commid, ts, func
        self.comm = ptr(pid)
        self.tid = pid + 57
        self.n = 0

    def pre(self, tid=None):
        t = self.tid if tid is None else tid
        return "%s:%d:%d [%d] " % (self.host, self.pid, t, self.dev)

    def info(self, msg, tid=None):
        return self.pre(tid) + "NCCL INFO " + msg

    def warn(self, where, msg, tid=None, fn=None):
        stamp = ""
        if self.ts:
            self.n += 1
            stamp = "[%s:%02d] " % (self.ts, self.n % 60)
        f = " (%s)" % fn if (self.func and fn) else ""
        return ["", stamp + "%s:%d:%d [%d] %s%s NCCL WARN %s" % (self.host, self.pid, self.tid if tid is None else tid, self.dev, where, f, msg)]

    def version_num(self):
        return self.version.split("+")[0]

    def init(self, complete=True, extra_env=(), old=False):
        v = self.version_num()
        minor = int(v.split(".")[1])
        L = []
        L.append(self.info("Bootstrap : Using eth0:%s<0>" % self.ip, self.pid))
        L.append(self.info("NET/Plugin : No plugin found (libnccl-net.so), using internal implementation", self.pid))
        L.append(self.info("cudaDriverVersion 12020", self.pid))
        if self.rank == 0:
            L.append("NCCL version %s" % self.version)
        for e in extra_env:
            L.append(self.info(e))
        if self.net == "IB":
            devs = " ".join("[%d]%s:1/IB" % (i, h) for i, h in enumerate(self.hca))
            L.append(self.info("NET/IB : Using %s ; OOB ib0:%s<0>" % (devs, self.ib_ip)))
            L.append(self.info("Using network IB"))
        else:
            L.append(self.info("NET/IB : No device found."))
            L.append(self.info("NET/Socket : Using [0]eth0:%s<0>" % self.ip))
            L.append(self.info("Using network Socket"))
        bus = "%x000" % (0x1b + 0x10 * self.dev)
        if old:
            start = None
        elif minor >= 18:
            api = "ncclCommInitRank " if minor >= 21 else ""
            start = "%scomm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %s commId %s - Init START" % (
                api, self.comm, self.rank, self.nranks, self.dev, self.dev, bus, self.commid)
        else:
            start = None
        if start:
            L.append(self.info(start))
        L.append(self.info("Setting affinity for GPU %d to ffff,ffffffff" % self.dev))
        if self.rank == 0:
            L.append(self.info("Channel 00/02 :    " + "   ".join(str(r) for r in range(self.nranks))))
            L.append(self.info("Channel 01/02 :    " + "   ".join(str(r) for r in range(self.nranks))))
        nxt = (self.rank + 1) % self.nranks
        L.append(self.info("Trees [0] %d/-1/-1->%d->-1 [1] -1/-1/-1->%d->%d" % (nxt, self.rank, self.rank, nxt)))
        for ch in range(2):
            if self.net == "IB" and self.nranks > 2 and self.rank % 2 == 1:
                L.append(self.info("Channel %02d/0 : %d[%d] -> %d[%d] [send] via NET/IB/%d/GDRDMA" % (ch, self.rank, self.dev, nxt, nxt % 2, ch % len(self.hca))))
            elif self.net == "Socket" and self.nranks > 2 and self.rank % 2 == 1:
                L.append(self.info("Channel %02d/0 : %d[%d] -> %d[%d] [send] via NET/Socket/0" % (ch, self.rank, self.dev, nxt, nxt % 2)))
            else:
                L.append(self.info("Channel %02d/0 : %d[%d] -> %d[%d] via P2P/IPC/read" % (ch, self.rank, self.dev, nxt, nxt % 2)))
        L.append(self.info("Connected all rings"))
        L.append(self.info("Connected all trees"))
        L.append(self.info("threadThresholds 8/8/64 | 32/8/64 | 512 | 512"))
        L.append(self.info("2 coll channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer"))
        if minor >= 20 and not old:
            nodes = 2 if self.nranks > 2 and self.net == "IB" else 1
            L.append(self.info("comm %s rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL 0" % (
                self.comm, self.rank, self.nranks, nodes, self.nranks // nodes, self.rank % (self.nranks // nodes))))
        if complete:
            if start:
                L.append(self.info(start.replace("Init START", "Init COMPLETE")))
            else:
                L.append(self.info("comm %s rank %d nranks %d cudaDev %d busId %s - Init COMPLETE" % (self.comm, self.rank, self.nranks, self.dev, bus)))
        return L

    def colls(self, k0, k1):
        ops = [("AllReduce", 262144, 7, 0), ("AllGather", 4096, 9, 0), ("Broadcast", 16, 0, 0), ("AllReduce", 1048576, 7, 0)]
        L = []
        for k in range(k0, k1):
            name, count, dt, root = ops[k % len(ops)]
            L.append(self.info("%s: opCount %x sendbuff 0x7f%07x recvbuff 0x7f%07x count %d datatype %d op 0 root %d comm %s [nranks=%d] stream 0x%x" % (
                name, k, k * 4096, k * 4096 + 2048, count, dt, root, self.comm, self.nranks, 0x5620000 + self.pid)))
        return L

    def sendrecv(self, peer, kind, k0, k1):
        L = []
        for k in range(k0, k1):
            L.append(self.info("%s: opCount %x sendbuff (nil) recvbuff 0x7f%07x count 524288 datatype 7 op 0 root %d comm %s [nranks=%d] stream 0x%x" % (
                kind, k, k * 8192, peer, self.comm, self.nranks, 0x5620000 + self.pid)))
        return L

    def destroy(self):
        bus = "%x000" % (0x1b + 0x10 * self.dev)
        return [self.info("comm %s rank %d nranks %d cudaDev %d busId %s - Destroy COMPLETE" % (self.comm, self.rank, self.nranks, self.dev, bus))]

    def crumbs(self, *where, code=6, tid=None, tag=""):
        return [self.info("%s -> %d%s" % (w, code, tag), tid) for w in where]


def ras_versions(version, cuda):
    """The two version lines that open a RAS text reply."""
    major, minor = cuda.split(".")
    rt = str(int(major) * 1000 + int(minor) * 10)
    return "NCCL version %s compiled with CUDA %s\nCUDA runtime version %s, driver version %s\n" % (version, cuda, rt, rt)


def ras_report(version, cuda, nodes, per_node, secs, body):
    """A RAS text STATUS reply up to its communicators table (one GPU per process), then body."""
    procs = nodes * per_node
    return ras_versions(version, cuda) + """
Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
%7d%11d%13d%11d%9d

Communicators... (%s)
=============

""" % (nodes, per_node, 1, procs, procs, secs) + body


def ras_dead_report(version, cuda, secs, host, pid, gpu, rank, comm):
    """A RAS text STATUS reply of a 2-node, 4-rank job in which one process is dead."""
    return ras_report(version, cuda, 2, 2, secs, """Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         2         4         4   RUNNING  INCOMPLETE

Errors
======

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process %d on node %s managing GPU %d

#0-0 (%s) INCOMPLETE
  Missing communicator data from 1 rank
  Rank %d -- GPU %d managed by process %d on node %s

Warnings
========
""" % (pid, host, gpu, comm, rank, gpu, pid, host))

def two_nodes(version="2.18.5+cuda12.2", net="IB", **kw):
    ps = []
    for r in range(4):
        host = ["gpu-node07", "gpu-node07", "gpu-node12", "gpu-node12"][r]
        ip = ["10.10.4.7", "10.10.4.7", "10.10.4.12", "10.10.4.12"][r]
        ps.append(P(host, 41200 + r * 7 if r < 2 else 3300 + r * 11, r % 2, r, 4, ip, version=version, net=net, **kw))
    return ps


def write(case, files, expect):
    d = os.path.join(OUT, case)
    os.makedirs(d, exist_ok=True)
    for name, lines in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write("\n".join(lines) + "\n")
    with open(os.path.join(d, "expect.json"), "w") as f:
        json.dump(expect, f, indent=1, sort_keys=True)
        f.write("\n")


def per_proc(ps, build):
    return {"nccl.%s.%d.log" % (p.host, p.pid): build(p) for p in ps}


def torch_timeout(rank, seq, op="ALLREDUCE", numel=262144, completed=None, enq=None, pg="0", ts="E1121 22:51:18.197257951"):
    L = ["[rank%d]:[%s ProcessGroupNCCL.cpp:616] [Rank %d] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=%d, OpType=%s, NumelIn=%d, NumelOut=%d, Timeout(ms)=600000) ran for 600031 milliseconds before timing out." % (rank, ts, rank, seq, op, numel, numel)]
    if completed is not None:
        L.append("[rank%d]:[%s ProcessGroupNCCL.cpp:1785] [PG ID %s PG GUID %s(default_pg) Rank %d] Exception (either an error or timeout) detected by watchdog at work: %d, last enqueued NCCL work: %d, last completed NCCL work: %d." % (rank, ts, pg, pg, rank, seq, enq if enq is not None else seq + 2, completed))
    L.append("[rank%d]:[%s ProcessGroupNCCL.cpp:630] [Rank %d] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data." % (rank, ts, rank))
    L.append("[rank%d]:[%s ProcessGroupNCCL.cpp:636] [Rank %d] To avoid data inconsistency, we are taking the entire process down." % (rank, ts, rank))
    return L


def main():
    shutil.rmtree(OUT, ignore_errors=True)

    # 1. IB retries exhausted mid-run, one reporter: its HCA port and the peer named.
    ps = two_nodes(version="2.23.4+cuda12.6")
    def b1(p):
        L = p.init() + p.colls(0, 120)
        if p.rank == 2:
            L += p.warn("transport/net_ib.cc:2246", "NET/IB: Got completion from peer 192.168.4.7<48213> with status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_3", tid=p.pid + 90)
            L += p.crumbs("transport/net.cc:1008", "proxy.cc:679", tid=p.pid + 90)
            L += p.crumbs("proxy.cc:858", tid=p.pid + 90, tag=" [Proxy Thread]")
            for _ in range(3):
                L += p.warn("transport/net_ib.cc:2246", "NET/IB: Got completion from peer 192.168.4.7<48213> with status=5 opcode=0 len=0 vendor err 249 (Recv) hca mlx5_3", tid=p.pid + 90)
        elif p.host == "gpu-node12":
            L.append(p.info("[Service thread] Connection closed by localRank 0", p.pid + 88))
        return L
    write("ib_retry_exc_midrun", per_proc(ps, b1), {"exit": 1, "kind": "link", "rank": 2, "host": "gpu-node12", "port": "mlx5_3:1",
                                                    "say": ["RETRY_EXC", "gpu-node07"]})

    # 2. RoCE: retries exhausted at the first collective (2.20 form with GIDs): RDMA never worked.
    ps = two_nodes(version="2.20.5+cuda12.4", hca=("mlx5_bond_0",))
    def b2(p):
        L = p.init(extra_env=["NCCL_IB_GID_INDEX set by environment to 1."]) + p.colls(0, 1)
        if p.rank == 1:
            L += p.warn("transport/net_ib.cc:1414", "NET/IB : Got completion from peer 192.168.4.12<39817> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:192.168.4.7 remoteGids::ffff:192.168.4.12", tid=p.pid + 90)
            L += p.crumbs("transport/net.cc:1134", "proxy.cc:692", tid=p.pid + 90)
        return L
    write("ib_roce_first_op", per_proc(ps, b2), {"exit": 1, "kind": "link", "rank": 1, "host": "gpu-node07", "port": "mlx5_bond_0:1",
                                                 "say": ["NCCL_IB_GID_INDEX"]})

    # 3. Local protection error on one host: GPUDirect RDMA broken by ACS.
    ps = two_nodes(version="2.19.3+cuda12.3")
    def b3(p):
        L = p.init() + p.colls(0, 3)
        if p.rank == 3:
            L += p.warn("transport/net_ib.cc:1295", "NET/IB : Got completion from peer 192.168.4.7<33397> with error 4, opcode 32611, len 32611, vendor err 81 (Send)", tid=p.pid + 90)
            L += p.crumbs("transport/net.cc:1008", "proxy.cc:679", tid=p.pid + 90)
        elif p.rank == 2:
            L.append(p.info("[Service thread] Connection closed by localRank 1", p.pid + 88))
        return L
    write("ib_loc_prot_acs", per_proc(ps, b3), {"exit": 1, "kind": "link", "rank": 3, "host": "gpu-node12", "say": ["ACS", "NCCL_NET_GDR_LEVEL=0"]})

    # 4. Only flushed requests: the first error is not in these logs.
    ps = two_nodes(version="2.21.5+cuda12.4")[:2]
    for p in ps:
        p.nranks = 4
    def b4(p):
        L = p.init() + p.colls(0, 40)
        if p.rank == 0:
            for _ in range(4):
                L += p.warn("transport/net_ib.cc:2149", "NET/IB : Got completion from peer 192.168.4.12<54862> with status=5 opcode=32656 len=32659 vendor err 249 (Recv) localGid ::ffff:192.168.4.7 remoteGids::ffff:192.168.4.12", tid=p.pid + 90)
        return L
    write("ib_flush_only", per_proc(ps, b4), {"exit": 1, "kind": "link", "no_culprit": True, "say": ["consequence"]})

    # 5. NCCL 2.7 in an Open MPI console: the completion error without a peer.
    ps = two_nodes(version="2.7.8+cuda11.0", hca=("mlx5_0",))
    lines = []
    for p in ps:
        lines += ["[1,%d]<stdout>:%s" % (p.rank, l) for l in p.init(old=True)]
    for k in range(30):
        for p in ps:
            lines += ["[1,%d]<stdout>:%s" % (p.rank, l) for l in p.colls(k, k + 1)]
    p = ps[2]
    lines += ["[1,2]<stdout>:%s" % l for l in p.warn("transport/net_ib.cc:839", "NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129", tid=p.pid + 90)]
    lines += ["[1,2]<stdout>:%s" % l for l in p.crumbs("transport/net.cc:754", "proxy.cc:300", tid=p.pid + 90, tag=" [Proxy Thread]")]
    lines.append("--------------------------------------------------------------------------")
    lines.append("Primary job  terminated normally, but 1 process returned a non-zero exit code.")
    write("ib_nccl27_mpirun", {"mpirun.out": lines}, {"exit": 1, "kind": "link", "rank": 2, "host": "gpu-node12", "port": "mlx5_0:1", "say": ["RETRY_EXC"]})

    # 6. NCCL 2.28.9 symbolic status, two hosts blaming one peer (third host).
    ps = []
    for r in range(6):
        host = ["gpu-a01", "gpu-a01", "gpu-a02", "gpu-a02", "gpu-a03", "gpu-a03"][r]
        ip = ["10.10.8.1", "10.10.8.1", "10.10.8.2", "10.10.8.2", "10.10.8.3", "10.10.8.3"][r]
        ps.append(P(host, 7700 + r, r % 2, r, 6, ip, version="2.28.9+cuda13.0", ts="2026-02-11 08:14", hca=("mlx5_2", "mlx5_5")))
    def b6(p):
        L = p.init() + p.colls(0, 120)
        if p.rank in (0, 2):
            L += p.warn("transport/net_ib.cc:2458", "NET/IB: Got completion from peer 192.168.8.3<50123> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) reqSize=0 vendor_err=129 req_type=Send localGid ::ffff:0.0.0.0 remoteGids::ffff:0.0.0.0 hca mlx5_2", tid=p.pid + 90)
        return L
    write("ib_two_hosts_one_peer", per_proc(ps, b6), {"exit": 1, "kind": "link", "host": "gpu-a03", "say": ["2 hosts"]})

    # 7. Bootstrap connect fails at init: no route to the peer.
    ps = two_nodes(version="2.18.6+cuda12.1", net="Socket")
    def b7(p):
        L = p.init(complete=False)[:8]
        if p.rank == 2:
            L += p.warn("misc/socket.cc:483", "socketStartConnect: Connect to 10.10.4.7<52822> failed : No route to host", tid=p.pid + 3)
            L += p.crumbs("misc/socket.cc:564", "misc/socket.cc:618", "bootstrap.cc:285", "init.cc:1350", code=2, tid=p.pid + 3)
            L += p.crumbs("group.cc:64", code=2, tid=p.pid + 3, tag=" [Async thread]")
        return L
    write("socket_no_route_init", per_proc(ps, b7), {"exit": 1, "kind": "config", "host": "gpu-node07", "say": ["could not connect", "NCCL_SOCKET_IFNAME"]})

    # 8. PyTorch's traceback only, srun labels: NCCL connected to a loopback address.
    lines = []
    for r in (10, 11):
        lines += ["%d: Traceback (most recent call last):" % r,
                  '%d:   File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 1906, in broadcast' % r,
                  "%d:     work = default_pg.broadcast([tensor], opts)" % r,
                  "%d: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5" % r,
                  "%d: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. " % r,
                  "%d: Last error:" % r,
                  "%d: socketStartConnect: Connect to 127.0.0.1<45069> failed : Software caused connection abort" % r]
    lines.append("srun: error: gpu-st-p5-3: tasks 10-11: Exited with exit code 1")
    write("socket_loopback_traceback", {"slurm-4411.out": lines}, {"exit": 1, "kind": "config", "say": ["loopback", "NCCL_SOCKET_IFNAME"]})

    # 9. NCCL 2.27: connect refused until the retry count runs out.
    ps = two_nodes(version="2.27.7+cuda12.9", ts="2025-11-03 04:12")
    def b9(p):
        L = p.init(complete=False)[:9]
        if p.rank == 0:
            L.append(p.info("ncclSocketConnect: connect to 10.10.4.12<40517> returned Connection refused, retrying (1/34) after sleep for 100 msec", p.pid + 3))
            L.append(p.info("ncclSocketConnect: connect to 10.10.4.12<40517> returned Connection refused, retrying (2/34) after sleep for 200 msec", p.pid + 3))
            L += p.warn("misc/socket.cc:611", "ncclSocketConnect: connect to 10.10.4.12<40517> returned Connection refused, exceeded error retry count after 35 attempts", tid=p.pid + 3)
            L += p.crumbs("bootstrap.cc:312", "init.cc:1701", code=2, tid=p.pid + 3)
        return L
    write("socket_refused_2_27", per_proc(ps, b9), {"exit": 1, "kind": "config", "host": "gpu-node12", "say": ["Connection refused"]})

    # 10. A peer died mid-run: closed connections on the survivors, its log missing.
    ps = two_nodes(version="2.21.5+cuda12.4")
    def b10(p):
        L = p.init() + p.colls(0, 100)
        L += p.warn("misc/socket.cc:49", "socketProgress: Connection closed by remote peer gpu-node12.cluster.local<42830>", tid=p.pid + 88)
        L += p.crumbs("misc/socket.cc:752", tid=p.pid + 88)
        L += p.warn("proxy.cc:1143", "Socket recv failed while polling for opId=0x7f4774cc9620", tid=p.pid + 88)
        return L
    files = per_proc(ps[:2], b10)
    write("peer_died_midrun", files, {"exit": 1, "kind": "crash", "host": "gpu-node12", "say": ["mid-run"]})

    # 11. NCCL 2.14: a broken pipe to the peer while connecting mid-run.
    ps = two_nodes(version="2.14.3+cuda11.7", net="Socket")
    def b11(p):
        L = p.init() + p.colls(0, 80)
        if p.rank == 1:
            L += p.warn("misc/socket.cc:518", "Net : Call to recv from 10.10.4.12<58355> failed : Broken pipe", tid=p.pid + 20)
            L += p.crumbs("misc/socket.cc:535", "transport/net_socket.cc:368", "include/net.h:26", tid=p.pid + 20)
            L += p.warn("proxy.cc:1119", "[Proxy Service 1] Failed to execute operation Connect from rank 1, retcode 6", tid=p.pid + 20)
        return L
    write("peer_broken_pipe_2_14", per_proc(ps[:2], b11), {"exit": 1, "kind": "crash", "host": "10.10.4.12"})

    # 12. torchrun: local rank 2 killed, its NCCL log missing; survivors and the launcher say so.
    ps = [P("dgx-17", 9100 + r, r, r, 4, "10.10.9.17", version="2.19.3+cuda12.3") for r in range(4)]
    files = {}
    for p in ps:
        if p.rank == 2:
            continue
        L = p.init() + p.colls(0, 150)
        L.append(p.info("[Service thread] Connection closed by localRank 2", p.pid + 88))
        files["nccl.%s.%d.log" % (p.host, p.pid)] = L
    files["torchrun.err"] = ["W1121 10:00:00.000000 9099 torch/distributed/run.py:757] ",
                             "E1121 10:05:11.812000 9099 torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: -9) local_rank: 2 (pid: 9102) of binary: /usr/bin/python3"]
    write("local_rank_killed_no_log", files, {"exit": 1, "kind": "crash", "rank": 2, "host": "dgx-17"})

    # 13. CUDA out of memory inside NCCL, then invalid handles.
    ps = two_nodes(version="2.20.5+cuda12.4")
    def b13(p):
        L = p.init() + p.colls(0, 50)
        if p.rank == 1:
            for _ in range(3):
                L += p.warn("enqueue.cc:43", "Cuda failure 'out of memory'", tid=p.pid)
                L += p.warn("enqueue.cc:54", "Cuda failure 'invalid resource handle'", tid=p.pid)
        return L
    write("cuda_oom", per_proc(ps, b13), {"exit": 1, "kind": "gpu", "rank": 1, "host": "gpu-node07", "say": ["out of memory"]})

    # 14. NCCL 2.30.7: an illegal memory access, with the WARN's function.
    ps = two_nodes(version="2.30.7+cuda13.0", ts="2026-06-10 10:42", func=True)
    def b14(p):
        L = p.init() + p.colls(0, 150)
        if p.rank == 3:
            L += p.warn("enqueue.cc:1556", "Cuda failure 700 'an illegal memory access was encountered'", tid=p.pid, fn="ncclLaunchKernel")
            L.append(p.info("enqueue.cc:1601 (hostStreamPlanTask) -> 1", p.pid))
        return L
    write("cuda_illegal_address_2_30", per_proc(ps, b14), {"exit": 1, "kind": "gpu", "rank": 3, "say": ["CUDA_LAUNCH_BLOCKING"]})

    # 15. The fabric manager is not running: CUDA cannot start.
    ps = [P("hgx-03", 5500 + r, r, r, 8, "10.10.2.3", version="2.21.5+cuda12.4") for r in range(8)]
    def b15(p):
        L = p.init(complete=False)[:4]
        L += p.warn("misc/cudawrap.cc:33", "Cuda failure 'system not yet initialized'", tid=p.pid)
        return L
    write("fabric_manager_down", per_proc(ps, b15), {"exit": 1, "kind": "gpu", "host": "hgx-03", "say": ["fabricmanager"]})

    # 16. NVLS cannot map multicast memory on an H100 node.
    ps = [P("bm-h100-02", 63000 + r, r, r, 8, "10.10.2.2", version="2.18.5+cuda12.2", ts="2025-05-10 23:09") for r in range(8)]
    def b16(p):
        L = p.init(complete=False)
        L += p.warn("transport/nvls.cc:254", "Cuda failure 1 'invalid argument'", tid=p.pid + 60)
        L += p.crumbs("transport/nvls.cc:409", "init.cc:1157", code=1, tid=p.pid + 60)
        return L
    write("nvls_invalid_argument", per_proc(ps, b16), {"exit": 1, "kind": "gpu", "host": "bm-h100-02", "say": ["NCCL_NVLS_ENABLE=0"]})

    # 17. /dev/shm too small in a container.
    ps = [P("c7f2a91d0b3e", 210 + r, r, r, 8, "172.17.0.2", version="2.19.3+cuda12.3", net="Socket") for r in range(8)]
    def b17(p):
        L = p.init(complete=False)
        if p.rank in (3, 6):
            L += p.warn("misc/shmutils.cc:71", "Error: failed to extend /dev/shm/nccl-%s to 5967876 bytes" % ("KWfVyt" if p.rank == 3 else "oA7T4J"), tid=p.pid + 40)
            L += p.warn("misc/shmutils.cc:112", "Error while creating shared memory segment /dev/shm/nccl-%s (size 5967872)" % ("KWfVyt" if p.rank == 3 else "oA7T4J"), tid=p.pid + 40)
            L += p.crumbs("transport/shm.cc:114", "transport.cc:33", "init.cc:1089", code=2, tid=p.pid + 40)
        return L
    write("shm_too_small", per_proc(ps, b17), {"exit": 1, "kind": "config", "host": "c7f2a91d0b3e", "say": ["--shm-size"]})

    # 18. Duplicate GPU, seen only in PyTorch's tracebacks.
    lines = []
    for r, other in ((1, 0), (3, 2)):
        lines += ["[rank%d]: Traceback (most recent call last):" % r,
                  '[rank%d]:   File "/workspace/train.py", line 88, in <module>' % r,
                  "[rank%d]:     torch.distributed.barrier()" % r,
                  "[rank%d]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3" % r,
                  "[rank%d]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library." % r,
                  "[rank%d]: Last error:" % r,
                  "[rank%d]: Duplicate GPU detected : rank %d and rank %d both on CUDA device 1b000" % (r, r, other)]
    write("duplicate_gpu_traceback", {"train.log": lines}, {"exit": 1, "kind": "config", "rank": 1, "say": ["share one GPU"]})

    # 19. Two NCCL versions in one job: the second node runs an older container.
    ps = two_nodes(version="2.21.5+cuda12.4")
    for p in ps[2:]:
        p.version = "2.18.1+cuda12.1"
    def b19(p):
        L = p.init(complete=(p.rank < 2))
        L.insert(3, p.info("NCCL version %s" % p.version, p.pid))
        if p.rank == 2:
            L += p.warn("bootstrap.cc:88", "Message truncated : received 1024 bytes instead of 1152", tid=p.pid)
            L += p.crumbs("bootstrap.cc:114", "init.cc:902", code=3, tid=p.pid)
        return L
    write("version_mismatch", per_proc(ps, b19), {"exit": 1, "kind": "config", "host": "gpu-node12", "say": ["2.18.1"]})

    # 20. NCCL 2.10 console: one rank stops issuing collectives.
    ps = [P("ml-box", 31000 + r, r, r, 4, "10.10.1.5", version="2.10.3+cuda11.3", net="Socket") for r in range(4)]
    lines = []
    for p in ps:
        lines += p.init(old=True)
    for k in range(60):
        for p in ps:
            if p.rank == 2 and k >= 41:
                continue
            lines += p.colls(k, k + 1)
    write("hang_nccl_2_10_console", {"console.log": lines}, {"exit": 1, "kind": "hang", "rank": 2, "say": ["waits in op 42"]})

    # 21. PyTorch lines only, 8 ranks: rank 5 completed one work fewer.
    lines = []
    for r in range(8):
        done = 806 if r == 5 else 807
        lines += torch_timeout(r, done + 1, completed=done, enq=done + 3)
    write("torch_suspect_rank5", {"job.err": lines}, {"exit": 1, "kind": "hang", "rank": 5, "say": ["suspect"]})

    # 22. PyTorch lines only, every rank waits at the same work: no culprit named.
    lines = []
    for r in range(4):
        lines += torch_timeout(r, 1581, completed=1580, enq=1582)
    write("torch_all_waiting", {"job.err": lines}, {"exit": 1, "kind": "hang", "no_culprit": True, "say": ["only waiting"]})

    # 23. A RAS JSON report and logs without COLL lines: rank 3 is 40 collectives behind.
    ps = [P("gpu-r%d" % (r // 2), 6100 + r, r % 2, r, 4, "10.10.6.%d" % (r // 2 + 1), version="2.28.9+cuda13.0", commid="0x5e7c1a0b99d2f311") for r in range(4)]
    files = per_proc(ps, lambda p: p.init())
    ranks = []
    for p in ps:
        ranks.append({"rank": p.rank, "host": p.ip, "pid": p.pid, "cuda_dev": p.dev, "nvml_dev": p.dev,
                      "status": {"init_state": 0, "async_error": 0, "finalize_called": False, "destroy_flag": False, "abort_flag": False},
                      "collective_counts": {"Broadcast": 1, "Reduce": 0, "AllGather": 310, "ReduceScatter": 310, "AllReduce": 2 if p.rank == 3 else 42}})
    ras = {"nccl_version": "2.28.9", "cuda_runtime_version": 13000, "cuda_driver_version": 13000, "timestamp": "2026-03-02 11:40:07",
           "communicators_count": 1, "communicators": [{"hash": "0x5e7c1a0b99d2f311", "secondary_hash": "0x1:0x2", "size": 4, "ranks_count": 4,
                                                        "missing_ranks_count": 0, "ranks": ranks, "missing_ranks": []}],
           "ras": {"collection_time_sec": 0.012, "timeouts_count": 0}}
    files["ncclras.json"] = json.dumps(ras, indent=2).split("\n")
    write("ras_json_rank_behind", files, {"exit": 1, "kind": "hang", "rank": 3, "say": ["RAS"]})

    # 24. A RAS text report: one process dead.
    files = per_proc(ps, lambda p: p.init())
    files["ras-status.txt"] = ras_dead_report("2.27.7", "12.9", "5.004s", "10.10.6.1", 6101, 1, 1, "5e7c1a0b99d2f311").split("\n")
    write("ras_text_dead_rank", files, {"exit": 1, "kind": "crash", "rank": 1, "say": ["dead"]})

    # 25. A Send without its Recv in a job that finished (pipeline stages).
    ps = [P("pp-node", 4400 + r, r, r, 2, "10.10.3.3", version="2.21.5+cuda12.4", net="Socket") for r in range(2)]
    def b25(p):
        L = p.init()
        if p.rank == 0:
            L += p.sendrecv(1, "Send", 0, 12)
        else:
            L += p.sendrecv(0, "Recv", 0, 11)
        return L + p.destroy()
    write("p2p_send_without_recv", per_proc(ps, b25), {"exit": 1, "kind": "p2p_mismatch", "rank": 1, "say": ["never received"]})

    # 26. Init never completes: rank 3 never joined.
    ps = [P("gpu-x", 8800 + r, r, r, 4, "10.10.7.7", version="2.23.4+cuda12.6") for r in range(4)]
    def b26(p):
        return p.init(complete=False)
    write("init_hang_missing_rank", per_proc(ps[:3], b26), {"exit": 1, "kind": "hang", "say": ["ranks 3 never logged"]})

    # 27. Queue pairs cannot connect (2.27 form with dev:port).
    ps = two_nodes(version="2.27.7+cuda12.9", hca=("mlx5_1", "mlx5_4"))
    def b27(p):
        L = p.init(complete=False)
        if p.rank == 3:
            L += p.warn("misc/ibvwrap.cc:262", "Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx5_1:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:192.168.4.12, remote GID ::ffff:192.168.4.7", tid=p.pid + 30)
            L += p.crumbs("transport/net_ib.cc:1072", "transport/net.cc:728", "proxy.cc:1306", code=2, tid=p.pid + 30)
            L += p.warn("proxy.cc:1519", "[Proxy Service 3] Failed to execute operation Connect from rank 3, retcode 2", tid=p.pid + 30)
        return L
    write("ib_modify_qp_timeout", per_proc(ps, b27), {"exit": 1, "kind": "link", "rank": 3, "port": "mlx5_1:1", "say": ["NCCL_CROSS_NIC=0"]})

    # 28. No socket interface: NCCL_SOCKET_IFNAME names none.
    ps = two_nodes(version="2.22.3+cuda12.5")
    def b28(p):
        L = [p.info("NCCL_SOCKET_IFNAME set by environment to ens9f0", p.pid)]
        L += p.warn("misc/socket.cc:600", "Bootstrap : no socket interface found", tid=p.pid)
        L += p.crumbs("init.cc:1811", code=3, tid=p.pid)
        return L
    write("no_socket_interface", per_proc(ps, b28), {"exit": 1, "kind": "config", "say": ["NCCL_SOCKET_IFNAME"]})

    # Healthy jobs with harmless WARNs and INFO lines: no finding.
    # 29. Socket network, libibverbs missing, NVLS unavailable, env lines, every rank level.
    ps = two_nodes(version="2.21.5+cuda12.4", net="Socket")
    def b29(p):
        L = [p.info("NCCL_SOCKET_IFNAME set by environment to eth0", p.pid), p.info("NCCL_DEBUG_SUBSYS set by environment to INIT,COLL", p.pid)]
        L += p.warn("misc/ibvwrap.cc:66", "Failed to open libibverbs.so[.1]", tid=p.pid)
        L += [p.info("NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.", p.pid), p.info("NET/Plugin: Loaded net plugin NCCL RDMA Plugin (v7)", p.pid),
              p.info("NVLS multicast support is not available on dev %d" % p.dev)]
        L += p.init() + p.colls(0, 60) + p.destroy()
        return L
    write("healthy_benign_warns", per_proc(ps, b29), {"exit": 0})

    # 30. Healthy, IB with GPU Direct RDMA disabled and one bonded HCA that will not open.
    ps = two_nodes(version="2.19.3+cuda12.3", hca=("mlx5_0", "mlx5_3"))
    def b30(p):
        L = p.init(extra_env=["NCCL_NET_GDR_LEVEL set by environment to LOC", "NCCL_IB_HCA set by environment to mlx5"])
        L.insert(5, p.warn("transport/net_ib.cc:299", "NET/IB : Unable to open device mlx5_bond_1")[1])
        L += [p.info("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"), p.info("NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_3'")]
        L += p.colls(0, 96)
        return L
    write("healthy_gdr_disabled", per_proc(ps, b30), {"exit": 0})

    # 31. Healthy, bootstrap retried while the root came up.
    ps = two_nodes(version="2.18.3+cuda12.2")
    def b31(p):
        L = []
        if p.rank == 3:
            L += [p.info("Call to connect returned Connection refused, retrying", p.pid)] * 3
        return L + p.init() + p.colls(0, 64) + p.destroy()
    write("healthy_connect_retries", per_proc(ps, b31), {"exit": 0})

    # 32. Healthy but without COLL lines: cannot judge, never a false page.
    ps = two_nodes(version="2.23.4+cuda12.6")
    write("healthy_without_coll", per_proc(ps, lambda p: p.init() + p.destroy()), {"exit": 3})

    # 33. Healthy, RAS caught one rank a single op behind while the job ran.
    ps = [P("gpu-r%d" % (r // 2), 6100 + r, r % 2, r, 4, "10.10.6.%d" % (r // 2 + 1), version="2.28.9+cuda13.0", commid="0x5e7c1a0b99d2f311") for r in range(4)]
    files = per_proc(ps, lambda p: p.init() + p.colls(0, 42))
    for rk in ranks:
        rk["collective_counts"]["AllReduce"] = 41 if rk["rank"] == 2 else 42
    files["ncclras.json"] = json.dumps(ras, indent=2).split("\n")
    write("healthy_ras_transient_skew", files, {"exit": 0})

    # 34. Healthy: no Destroy lines (PyTorch exits without destroying), the survivors' proxy
    # threads see their local peers go, and the fabric renumbers a GID.
    ps = two_nodes(version="2.21.5+cuda12.4")
    def b34(p):
        L = p.init() + p.colls(0, 80)
        L += p.warn("transport/net_ib.cc:120", "NET/IB : mlx5_0:1 Got async error event: GID table change", tid=p.pid + 70)
        L.append(p.info("[Service thread] Connection closed by localRank %d" % (1 - p.dev), p.pid + 88))
        return L
    write("healthy_teardown_closures", per_proc(ps, b34), {"exit": 0})

    # 35. Init fails in the socket code without a WARN: only the error breadcrumbs say so.
    ps = two_nodes(version="2.18.1+cuda12.1")
    def b35(p):
        L = p.init(complete=False)[:6]
        if p.rank == 0:
            L += p.crumbs("misc/socket.cc:564", "misc/socket.cc:615", "bootstrap.cc:270", "init.cc:1303", code=2, tid=p.pid + 5)
            L += p.crumbs("group.cc:64", code=2, tid=p.pid + 5, tag=" [Async thread]")
            L += p.crumbs("group.cc:422", "group.cc:106", code=2, tid=p.pid)
        return L
    write("silent_socket_init_failure", per_proc(ps, b35), {"exit": 1, "kind": "crash", "host": "gpu-node07", "say": ["sockets"]})

    # 36. DeepSpeed over pdsh: the ranks of the second node never got NCCL's unique id from
    # rank 0, whose store connection was reset.
    lines = ["gpu003: [2024-02-11 22:38:30,101] [INFO] [launch.py:145:main] WORLD INFO DICT: {'gpu003': [0, 1, 2, 3, 4, 5, 6, 7], 'gpu004': [0, 1, 2, 3, 4, 5, 6, 7]}"]
    for r in (8, 11, 14):
        lines += ["gpu004: Traceback (most recent call last):",
                  'gpu004:   File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3696, in barrier',
                  "gpu004:     work = default_pg.barrier(opts=opts)",
                  "gpu004: RuntimeError: [%d] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer. This may indicate a possible application crash on rank 0 or a network set up issue." % r]
    lines.append("gpu004: [2024-02-11 22:38:45,300] [INFO] [launch.py:347:main] Process 88121 exits successfully.")
    write("store_reset_rank0", {"deepspeed.log": lines}, {"exit": 1, "kind": "crash", "rank": 0, "say": ["unique id"]})

    field14c()
    torchwords()
    fieldwarnrules()
    lineformats()
    frtrace()
    corpus3a()
    corpus3b()
    corpus4()
    corpus5()
    corpus6()


def field14c():
    """Cases of the formats and failure shapes an independent check on posted logs found
    misread: a poster's markdown and cut prefixes, terminal copies, the progress thread,
    launcher teardown, stray clients, handled errors, duplicate ranks. Written from the
    formats; hosts, pids and addresses are made up."""
    # 37. NCCL 2.4: the mismatch check's WARN, posted as inline code with NCCL's prefix cut
    # down to where it warned, under a version line in a code fence.
    write("posted_2_4_mismatch_markdown", {"issue.txt": [
        "Running DDP on 48 GPUs, it stops with:",
        "```NCCL version 2.4.8+cuda10.1",
        "```",
        "",
        "`init.cc:1253 NCCL WARN Mismatched collective detected, please check your collective calls at and around rank 23. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs`"]},
        {"exit": 1, "kind": "mismatch", "findings": 1, "say": ["rank 23", "no host:pid"]})

    # 38. IB error 4 whose host:pid:tid the poster cut: "[1] file:line NCCL WARN ...".
    write("ib_loc_prot_prefix_cut", {"report.txt": [
        "Error on the second node:",
        "[1] transport/net_ib.cc:831 NCCL WARN NET/IB : Got completion with error 4, opcode 1, len 21938, vendor err 81"]},
        {"exit": 1, "kind": "link", "findings": 1, "say": ["ACS", "no host:pid"], "avoid": ["rank 1"]})

    # 39. A terminal copy: each line padded with spaces to the terminal's width, newlines lost;
    # only flushed IB requests and the progress thread's breadcrumbs.
    p = P("vm-31-7-rocky", 21977, 0, 0, 16, "10.31.7.4", version="2.19.3+cuda12.3")
    parts = p.warn("transport/net_ib.cc:1075", "NET/IB : Got completion from peer 10.31.7.9<41871> with error 5, opcode 48, len 32710, vendor err 249", tid=p.pid + 640)[1:]
    parts += p.crumbs("transport/net.cc:1298", "proxy.cc:694", tid=p.pid + 640)
    parts += p.crumbs("proxy.cc:874", tid=p.pid + 640, tag=" [Progress Thread]")
    parts += p.warn("transport/net_ib.cc:1075", "NET/IB : Got completion from peer 10.31.7.9<41871> with error 5, opcode 48, len 32710, vendor err 249", tid=p.pid + 640)[1:]
    width = 190
    glued = "".join(l.ljust(width) for l in parts)
    write("terminal_padded_flush", {"paste.txt": [glued[i:i + 400] for i in range(0, len(glued), 400)]},
          {"exit": 1, "kind": "link", "no_culprit": True, "findings": 1, "say": ["on vm-31-7-rocky talking", "consequence"], "avoid": ["failed to initialize"]})

    # 40. A peer exited mid-run; the log holds only the failure: breadcrumbs that end on the
    # progress thread, the survivors closing their own proxy connections, PyTorch's
    # ncclRemoteError quoting the broken pipe.
    ps = [P("trn-w3", 5131 + r, r, 6 + r, 8, "10.44.3.2", version="2.21.5+cuda12.4") for r in range(2)]
    lines = []
    for p in ps:
        lines += p.crumbs("transport/net.cc:1302", "proxy.cc:698", tid=p.pid + 230)
        lines += p.crumbs("proxy.cc:878", tid=p.pid + 230, tag=" [Progress Thread]")
    for p in ps:
        lines.append(p.info("[Service thread] Connection closed by localRank %d" % p.dev, p.pid + 225))
        lines.append(p.info("comm %s rank %d nranks 8 cudaDev %d busId %x000 - Abort COMPLETE" % (p.comm, p.rank, p.dev, 0x1b + 0x10 * p.dev), p.pid + 130))
    for p in ps:
        pre = "[rank%d]:[E0311 04:12:55.118273644 ProcessGroupNCCL.cpp:%d] " % (p.rank, 1895)
        lines += [pre + "[PG ID 0 PG GUID 0(default_pg) Rank %d] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5" % p.rank,
                  "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
                  "Last error:",
                  "socketProgressOpt: Call to recv from 10.44.3.9<51123> failed : Broken pipe"]
    write("remote_exit_progress_thread", {"worker-0.log": lines},
          {"exit": 1, "kind": "crash", "host": "10.44.3.9", "findings": 1, "say": ["Broken pipe"], "avoid": ["failed to initialize"]})

    # 41. torchrun: one worker aborted (double free); the launcher stopped the others, whose
    # proxy connections the survivors saw close. No Init line names a rank.
    host = "nb-7f3c2d90aa-0"
    lines = []
    for pid, dev, gone in ((7715, 3, 2), (7712, 0, 4), (7715, 3, 4), (7712, 0, 7), (7718, 6, 7), (7713, 1, 0)):
        lines.append("%s:%d:%d [%d] NCCL INFO [Service thread] Connection closed by localRank %d" % (host, pid, pid + 370, dev, gone))
    lines += ["[2025-03-14 06:04:09,095] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -6) local_rank: 5 (pid: 7717) of binary: /usr/bin/python3",
              "Traceback (most recent call last):",
              '  File "/usr/local/bin/torchrun", line 8, in <module>']
    write("launcher_abort_teardown", {"console.log": lines},
          {"exit": 1, "kind": "crash", "host": host, "findings": 1, "say": ["local rank 5"]})

    # 42. Healthy job; afterwards something that is not a rank connects to a proxy's port.
    ps = [P("gpu-h9", 3911 + r, r, r, 2, "10.9.9.9", version="2.18.3+cuda12.2") for r in range(2)]
    def b42(p):
        L = p.init() + p.colls(0, 48)
        if p.rank == 0:
            L.append(p.info("[Service thread] Connection closed by localRank -1", p.pid + 301))
            L += p.warn("proxy.cc:1111", "[Service thread] Unknown command 66326 from localRank -1", tid=p.pid + 301)
            L += p.warn("proxy.cc:1111", "[Service thread] Unknown command 66326 from localRank -1", tid=p.pid + 301)
        return L
    write("healthy_stray_proxy_client", per_proc(ps, b42), {"exit": 0})

    # 43. A working NCCL 2.4 job's start, posted up to its rings: the topology search cannot
    # place a veth interface, an error NCCL handles (breadcrumbs, then init goes on). Too
    # little to judge, and nothing failed.
    ps = [P("ip-10-2-7-%d" % (31 + r), 4760 + r, 0, r, 2, "10.2.7.%d" % (31 + r), version="2.4.8+cuda10.2", net="Socket") for r in range(2)]
    def b43(p):
        L = p.init(old=True, complete=False)
        L.insert(8, p.info("Could not find real path of /sys/class/net/veth7e2c91a/device"))
        L.insert(9, p.info("include/net.h:19 -> 2"))
        L.insert(10, p.info("CUDA Dev 0[0], Socket NIC distance :  PHB SYS"))
        return L
    write("excerpt_2_4_handled_error", per_proc(ps, b43), {"exit": 3})

    # 44. Slurm and the framework both spawned workers: two processes claim rank 1.
    ps = [P("hpc-n%d" % (14 + r // 4), 18500 + r * 13, r % 4, r, 8, "172.18.9.%d" % (14 + r // 4), version="2.10.3+cuda11.3") for r in range(8)]
    files = {}
    lines = []
    for p in ps[:4]:
        lines += p.init(complete=False, old=True)[:6]
    lines += ps[0].warn("bootstrap.cc:131", "Bootstrap Root : rank 1 of 8 ranks has already checked in", tid=ps[0].pid + 266)
    files["slurm-88412.out"] = lines
    write("rank_checked_in_twice", files, {"exit": 1, "kind": "config", "rank": 1, "findings": 1, "say": ["checked in twice"]})

    # 45. Healthy, one process's log joined after its NET/IB line: its devices are unknown,
    # not missing.
    ps = two_nodes(version="2.17.1+cuda12.0", hca=("mlx5_0",))
    def b45(p):
        L = p.init()
        if p.rank == 3:
            L = [l for l in L if "NET/IB : Using" not in l]
        return L + p.colls(0, 40)
    write("healthy_ib_line_missing", per_proc(ps, b45), {"exit": 0})

    # 46. An IB error in the process's log and again in PyTorch's quote of it: one finding.
    # No COLL lines: when it came is not known.
    p = P("phx-ai-12", 24333, 2, 2, 16, "10.26.98.12", version="2.14.3+cuda11.7")
    lines = [p.info("comm %s rank 2 nranks 16 cudaDev 2 busId 3b000 - Init COMPLETE" % p.comm, p.pid + 120)]
    lines += p.warn("ib_plugin.c:978", "NET/IB : Got completion from peer 10.26.98.40<48611> with error 12, opcode 0, len 0, vendor err 129", tid=p.pid + 150)
    lines += p.crumbs("include/net.h:35", "transport/net.cc:1034", "proxy.cc:520", code=2, tid=p.pid + 150)
    lines += p.crumbs("proxy.cc:684", code=2, tid=p.pid + 150, tag=" [Proxy Thread]")
    lines += ["[E ProcessGroupNCCL.cpp:456] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
              "terminate called after throwing an instance of 'std::runtime_error'",
              "  what():  NCCL error: unhandled system error, NCCL version 2.14.3",
              "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
              "Last error:",
              "NET/IB : Got completion from peer 10.26.98.40<48611> with error 12, opcode 0, len 0, vendor err 129"]
    write("ib_error_quoted_twice", {"rank2.log": lines},
          {"exit": 1, "kind": "link", "rank": 2, "host": "phx-ai-12", "findings": 1, "say": ["did not answer"]})

    # 47. A container's veth interface among NCCL's: connects to the peer time out.
    p = P("worker", 10154, 0, 1, 2, "172.20.40.41", version="2.7.8+cuda11.0", net="Socket")
    lines = [p.info("Bootstrap : Using [0]eno1:172.20.40.41<0> [1]veth2c81f3e:fe80::4c1e:2bff:fe17:9a04%veth2c81f3e<0>", p.pid),
             p.info("NET/Socket : Using [0]eno1:172.20.40.41<0> [1]veth2c81f3e:fe80::4c1e:2bff:fe17:9a04%veth2c81f3e<0>", p.pid),
             p.info("Using network Socket", p.pid),
             p.info("Call to connect returned Connection timed out, retrying", p.pid + 390),
             p.info("Call to connect returned Connection timed out, retrying", p.pid + 390)]
    lines += p.warn("include/socket.h:403", "Connect to 172.20.40.52<42163> failed : Connection timed out", tid=p.pid + 390)
    lines += p.crumbs("transport/net_socket.cc:329", "include/net.h:24", "transport/net.cc:304", code=2, tid=p.pid + 390)
    write("veth_interface_timeout", {"worker.log": lines}, {"exit": 1, "kind": "config", "findings": 1, "say": ["veth2c81f3e", "NCCL_SOCKET_IFNAME"]})

    # 48. One process warns that its bootstrap connect failed; the others of its node only
    # print the error's breadcrumbs: one cause.
    ps = [P("n7-244-019", 12246 + r, r, r, 16, "10.7.244.19", version="2.18.1+cuda12.1") for r in range(4)]
    lines = []
    for p in ps:
        if p.rank == 2:
            lines += p.warn("misc/socket.cc:483", "socketStartConnect: Connect to fe80::8a66:39ff:fe02:11c0%ib1<17943> failed : Software caused connection abort", tid=p.pid + 150)
        lines += p.crumbs("misc/socket.cc:564", "misc/socket.cc:618", "bootstrap.cc:270", "init.cc:1350", code=2, tid=p.pid + 150)
        lines += p.crumbs("group.cc:65", code=2, tid=p.pid + 150, tag=" [Async thread]")
    write("silent_peers_echo_connect", {"node.log": lines}, {"exit": 1, "kind": "config", "findings": 1, "say": ["link-local"]})

    # 49. A RAS text report posted in a code fence, after the command that printed it.
    ps = [P("gpu-q%d" % (r // 2), 6300 + r, r % 2, r, 4, "10.10.63.%d" % (r // 2 + 1), version="2.26.2+cuda12.6", commid="0x4e1c0a3b77d2f301") for r in range(4)]
    files = per_proc(ps, lambda p: p.init())
    files["ras.txt"] = ["$ ncclras", "```"] + ras_dead_report("2.26.2", "12.6", "5.002s", "10.10.63.2", 6302, 0, 2, "4e1c0a3b77d2f301").split("\n")[:-1] + ["```"]
    write("ras_text_fenced", files, {"exit": 1, "kind": "crash", "rank": 2, "say": ["dead"]})

    # 50. The failing line quoted as inline code inside the poster's sentence, the log below
    # it in a fence.
    p = P("gw-a17", 30932, 0, 0, 2, "10.21.0.135", version="2.10.3+cuda10.2", net="Socket")
    lines = ["The master fails with `%s` so the worker must have dropped." % p.warn("include/socket.h:423", "Net : Connection closed by remote peer 10.21.0.136<20368>", tid=p.pid + 61)[1],
             "", "```bash"] + p.init(old=True, complete=False)[:9] + ["```"]
    write("posted_quote_in_sentence", {"master.txt": lines},
          {"exit": 1, "kind": "crash", "host": "10.21.0.136", "findings": 1, "say": ["from gw-a17 pid 30932"]})

    # 51. A process's first broken connection, then its own proxy's connection closing: one
    # cause, the peer of the first.
    p = P("p4-st-31", 18306, 1, 9, 16, "10.200.31.5", version="2.14.3+cuda11.7")
    lines = p.warn("misc/socket.cc:518", "Net : Call to recv from 10.200.84.17<58355> failed : Broken pipe", tid=p.pid + 214)[1:]
    lines += p.crumbs("misc/socket.cc:535", "transport/net_socket.cc:368", "include/net.h:26", "proxy.cc:991", tid=p.pid + 214)
    lines += p.warn("proxy.cc:1119", "[Proxy Service 9] Failed to execute operation Connect from rank 9, retcode 6", tid=p.pid + 214)[1:]
    lines += p.warn("misc/socket.cc:538", "Net : Connection closed by remote peer p4-st-31.cluster-7f0c.internal<47861>", tid=p.pid + 175)[1:]
    write("peer_broken_then_own_closed", {"rank9.log": lines}, {"exit": 1, "kind": "crash", "host": "10.200.84.17", "findings": 1,
                                                                "avoid": ["while the ranks were initializing"]})

    # 52. Only the failure posted: CUDA out of memory at the launch path, no Init or op line,
    # so when it came is not known.
    p = P("vm-12-3-ubuntu", 418, 3, 3, 8, "10.12.3.4", version="2.19.3+cuda12.3")
    lines = []
    for _ in range(3):
        lines += p.warn("enqueue.cc:43", "Cuda failure 'out of memory'", tid=p.pid + 102)
        lines += p.warn("enqueue.cc:54", "Cuda failure 'invalid resource handle'", tid=p.pid + 102)
    write("cuda_oom_excerpt", {"tp-worker.log": lines}, {"exit": 1, "kind": "gpu", "host": "vm-12-3-ubuntu", "findings": 1,
                                                         "say": ["out of memory"], "avoid": ["during initialization"]})

    # 53. NCCL 2.18: a NET/Socket connect fails without a WARN of its own (breadcrumbs only),
    # then the proxy reports the failed Connect and the connection closes; the poster
    # replaced the host name.
    p = P("<host_a>", 9922, 3, 11, 16, "10.31.0.9", version="2.18.6+cuda12.1", net="Socket")
    lines = [p.info("Channel 00/0 : 3[3] -> 11[3] [send] via NET/Socket/0", p.pid + 67)]
    lines += p.crumbs("misc/socket.cc:567", "misc/socket.cc:586", "transport/net_socket.cc:336", "transport/net.cc:592", "proxy.cc:1306", code=2, tid=p.pid + 236)
    lines += p.warn("proxy.cc:1485", "[Service thread] Error encountered progressing operation=Connect, res=2, closing connection", tid=p.pid + 236)
    lines += p.warn("proxy.cc:1519", "[Proxy Service 11] Failed to execute operation Connect from rank 11, retcode 2", tid=p.pid + 236)
    lines += p.warn("misc/socket.cc:49", "socketProgress: Connection closed by remote peer <host_b>.ibnet<53735>", tid=p.pid + 227)
    write("silent_socket_then_proxy_error", {"rank11.log": lines}, {"exit": 1, "kind": "crash", "findings": 1, "say": ["sockets"]})


def torchwords():
    """PyTorch's ProcessGroupNCCL wordings besides its timeout line: the heartbeat monitor,
    2.6+'s "failure detected by watchdog", a CUDA error in the watchdog thread, and a whole
    error pasted on one line with NCCL's last WARN inside. Only PyTorch's and the launcher's
    lines, as posted; ranks and addresses are made up."""
    # 54. The heartbeat monitor fires on every rank (PyTorch 2.3 glog prefix): rank 2 had far
    # fewer works queued than its peers, it stopped enqueuing first.
    lines = []
    for r, queued in ((0, 58), (1, 58), (2, 31), (3, 57)):
        pre = "[rank%d]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank %d] " % (r, r)
        lines += [pre + "Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=%d" % queued,
                  "[rank%d]:[E ProcessGroupNCCL.cpp:1153] [PG 0 Rank %d] ProcessGroupNCCL preparing to dump debug info." % (r, r)]
    for r in (0, 1, 2, 3):
        lines.append("[rank%d]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank %d] [PG 0 Rank %d] ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API hang blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA api, or other deadlock-prone behaviors." % (r, r, r))
    write("torch_heartbeat_fewest_queued", {"train.log": lines},
          {"exit": 1, "kind": "hang", "rank": 2, "findings": 1, "say": ["heartbeat monitor", "31 queued work(s)", "suspect"]})

    # 55. PyTorch 2.7: only "failure detected by watchdog at work sequence id" kept, without
    # its timeout line, on every rank of the default group; rank 1 completed one work less.
    lines = []
    ts = "E0214 03:17:42.5518%05d"
    for r in (0, 1, 2, 3):
        done = 9311 if r == 1 else 9312
        lines += ["[rank%d]:[%s ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank %d]  failure detected by watchdog at work sequence id: %d PG status: last enqueued work: %d, last completed work: %d" % (r, ts % (r * 7), r, done + 1, done + 2, done),
                  "[rank%d]:[%s ProcessGroupNCCL.cpp:670] Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value." % (r, ts % (r * 7 + 1)),
                  "[rank%d]:[%s ProcessGroupNCCL.cpp:684] [Rank %d] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data." % (r, ts % (r * 7 + 2), r)]
    write("torch_failure_detected_2_7", {"job.err": lines},
          {"exit": 1, "kind": "hang", "rank": 1, "findings": 1, "say": ["completed work only up to 9311", "suspect"]})

    # 56. Rank 1's watchdog thread dies of a CUDA error (a kernel faulted on its GPU); the
    # other ranks time out waiting for it.
    lines = []
    for r in (0, 2, 3):
        lines += torch_timeout(r, 4410, op="ALLGATHER", ts="E0822 11:05:31.40021%04d" % r)
    lines += ["[rank1]:[E0822 10:55:30.118273644 ProcessGroupNCCL.cpp:1515] [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
              "[rank1]:CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
              "[rank1]:For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
              "[rank1]:Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
              "[rank1]:",
              "[rank1]:Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 (most recent call first):",
              "[rank1]:frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3a1c96c446 in /opt/venv/lib/python3.11/site-packages/torch/lib/libc10.so)",
              "terminate called after throwing an instance of 'c10::DistBackendError'",
              "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered"]
    write("torch_watchdog_cuda_error", {"console.log": lines},
          {"exit": 1, "kind": "gpu", "rank": 1, "findings": 1, "say": ["illegal memory access", "PyTorch's NCCL watchdog"], "avoid": ["inside NCCL"]})

    # 57. PyTorch 1.13's whole error pasted as one line per rank, NCCL's last WARN inside:
    # rank 3's IB completion timed out talking to a peer; rank 1 only lost its connection.
    flat = ("[rank%d]:[E ProcessGroupNCCL.cpp:455] [Rank %d] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
            "subsequent GPU operations might run on corrupted/incomplete data. [E ProcessGroupNCCL.cpp:460] To avoid data inconsistency, we are taking the entire process down. "
            "terminate called after throwing an instance of 'std::runtime_error' what(): NCCL error: remote process exited or there was a network error, NCCL version 2.14.3 "
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely. Last error: %s")
    lines = [flat % (3, 3, "NET/IB : Got completion from peer 10.52.7.19<44871> with error 12, opcode 0, len 0, vendor err 129"),
             flat % (1, 1, "NET/IB : Got completion from peer 10.52.7.19<44902> with error 5, opcode 0, len 0, vendor err 249")]
    write("torch_one_line_last_error", {"issue.txt": lines},
          {"exit": 1, "kind": "link", "findings": 1, "say": ["10.52.7.19", "did not answer"]})

def fieldwarnrules():
    """NCCL WARNs that name their own cause: GPU peer-to-peer through CUDA IPC, nodes on
    different transports, a network plugin's failed delivery, a peer's queue pair in
    error, and NCCL's remote allocator answering a stray connection. Written from the
    format strings; hosts, pids and addresses are made up."""
    # 54. NCCL 2.4: two processes of one host cannot open each other's CUDA IPC handles.
    ps = [P("dgx-lab-3", 7301 + 9 * r, r, r, 2, "10.8.1.3", version="2.4.8+cuda10.1") for r in range(2)]
    lines = []
    for p, why in zip(ps, ("64 peer access is not supported between these two devices", "11 invalid argument")):
        lines += p.warn("transport/p2p.cu:548", "failed to open CUDA IPC handle : " + why)
        lines += p.crumbs("init.cu:568", "init.cu:642", code=1)
    write("p2p_ipc_unsupported", {"train.log": lines},
          {"exit": 1, "kind": "config", "host": "dgx-lab-3", "findings": 1, "say": ["CUDA IPC", "NCCL_P2P_DISABLE=1"], "avoid": ["out of memory"]})

    # 55. NCCL 2.18: a rank whose node fell back to NET/Socket accepts a NET/IB connection
    # from the other node; its proxy then fails the Connect.
    p = P("a100-n4", 28411, 2, 2, 16, "10.20.0.4", version="2.18.1+cuda12.1", net="Socket")
    lines = [p.info("Channel 00/0 : 2[2] -> 1[1] via P2P/IPC/read")]
    lines += p.warn("misc/socket.cc:441", "socketFinalizeAccept: wrong type 4 != 3", tid=p.pid + 66)
    lines += p.crumbs("misc/socket.cc:561", "misc/socket.cc:665", "transport/net_socket.cc:375", "transport/net.cc:728", "proxy.cc:1306", "proxy.cc:1377", code=3, tid=p.pid + 66)
    lines += p.warn("proxy.cc:1519", "[Proxy Service 2] Failed to execute operation Connect from rank 2, retcode 3", tid=p.pid + 66)
    write("wrong_socket_type_transports", {"rank2.log": lines},
          {"exit": 1, "kind": "config", "findings": 1, "say": ["NET/IB", "NET/Socket", "NCCL_IB_DISABLE"], "avoid": ["proxy_error"]})

    # 56. PyTorch quotes the AWS OFI plugin's failed completion as NCCL's last error.
    lines = ["[rank5]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3641, remote process exited or there was a network error, NCCL version 2.27.3",
             "[rank5]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
             "[rank5]: Last error:",
             "[rank5]: NET/OFI Request 0x7f3a5c2e1040 completed with error. RC: 113. Error: 2 (UNDELIVERABLE). Completed length: 0"]
    write("ofi_undeliverable_quoted", {"train.log": lines},
          {"exit": 1, "kind": "link", "rank": 5, "findings": 1, "say": ["libfabric", "no route to host"], "avoid": ["remote process exited"]})

    # 57. NCCL 2.20: one node's HCA puts a queue pair in error (local access violation);
    # the other node's request to it then fails with status 9.
    ps = two_nodes(version="2.20.5+cuda12.4")
    def b57(p):
        L = p.init() + p.colls(0, 40)
        if p.rank == 0:
            for _ in range(2):
                L += p.warn("transport/net_ib.cc:101", "NET/IB : mlx5_0:1 Got async event : local access violation work queue error", tid=p.pid + 3)
        if p.rank == 2:
            L += p.warn("transport/net_ib.cc:1909", "NET/IB : Got completion from peer %s<41023> with status=9 opcode=0 len=0 vendor err 138 (Send) localGid ::ffff:%s remoteGids::ffff:%s" % (ps[0].ip, p.ib_ip, ps[0].ib_ip), tid=p.pid + 90)
            L += p.crumbs("transport/net.cc:1137", "proxy.cc:698", tid=p.pid + 90)
        return L
    write("ib_qp_error_peer_consequence", per_proc(ps, b57),
          {"exit": 1, "kind": "link", "host": "gpu-node07", "findings": 1, "say": ["queue pair (QP)", "access violation"], "avoid": ["IB port event"]})

    # 58. NCCL 2.10: a stray connection reaches the bootstrap's remote allocator; its
    # "allocation" fails with out of memory, and the job goes on.
    p = P("azvm-0b1e77", 39, 0, 0, 1, "10.0.0.6", version="2.10.3+cuda11.4")
    lines = p.init() + p.colls(0, 30)
    lines += p.warn("include/socket.h:423", "Net : Connection closed by remote peer 10.0.0.9<52111>", tid=p.pid + 259)
    lines += p.crumbs("include/socket.h:445", "include/socket.h:457", "bootstrap.cc:229", code=2, tid=p.pid + 259)
    lines += p.warn("bootstrap.cc:279", "[Rem Allocator] Allocation failed (segment 0, fd 87)", tid=p.pid + 259)
    lines += p.warn("include/alloc.h:48", "Cuda failure 'out of memory'", tid=p.pid + 259)
    lines += p.crumbs("bootstrap.cc:231", code=1, tid=p.pid + 259)
    lines += p.colls(30, 60)
    write("stray_remote_allocator", {"train.log": lines},
          {"exit": 1, "kind": "config", "findings": 1, "say": ["stray connection", "not the GPU's"], "avoid": ["ran out of memory", "went away"]})
def lineformats():
    """Line shapes the reader skipped or misread: Open MPI's ISO timestamps stacked on its
    rank tags, NCCL 2.1-2.3 lines without the "NCCL" word, a paste GitHub turned into links,
    a collector's time before NCCL's own, nccl-tests' failure lines. Made-up hosts and pids."""
    # 54. Open MPI 4 --timestamp-output --tag-output, NCCL 2.4: three ranks of one node get
    # the HCA's fatal event.
    lines = []
    for rank, pid in ((4, 20311), (5, 20312), (6, 20313)):
        tag = "2020-07-14T09:21:05.%03dZ: [1,%d]<stdout>:" % (118 + rank, rank)
        lines += [tag, tag + "trn-c17:%d:%d [0] transport/net_ib.cc:80 NCCL WARN NET/IB : Got async event : local catastrophic error" % (pid, pid + 40),
                  tag, tag + "trn-c17:%d:%d [0] misc/ibvwrap.cc:220 NCCL WARN Call to ibv_get_async_event failed" % (pid, pid + 40)]
    write("openmpi_iso_tagged_catastrophic", {"mpirun.out": lines},
          {"exit": 1, "kind": "link", "host": "trn-c17", "findings": 1, "say": ["local catastrophic error", "trn-c17"], "avoid": ["port 0"]})

    # 55. NCCL 2.2 (no "NCCL" before the level): two machines both named "worker" join one
    # job; NCCL takes them for one host and connects them through P2P/IPC.
    def old_lines(host, pid, dev, ip, ring):
        pre = "%s:%d:%d [%d] " % (host, pid, pid + 14, dev)
        return [pre + "INFO NET : Using interface eth0:%s<0>" % ip,
                pre + "INFO NET/IB : Using interface eth0 for sideband communication",
                pre + "INFO Using internal Network Socket",
                pre + "INFO NET : Using interface eth0:%s<0>" % ip,
                pre + "INFO NET/Socket : 1 interfaces found",
                pre + "INFO %d -> %d via P2P/IPC" % ring]
    lines = old_lines("worker", 7301, 0, "10.22.0.5", (0, 1)) + old_lines("worker", 7302, 1, "10.22.0.5", (1, 2))
    lines += old_lines("worker", 5120, 0, "10.22.0.6", (2, 3)) + old_lines("worker", 5121, 1, "10.22.0.6", (3, 0))
    lines.insert(3, "NCCL version 2.2.13+cuda9.0")
    write("nccl_2_2_duplicate_hostname", {"horovod.log": lines},
          {"exit": 1, "kind": "config", "host": "worker", "findings": 1, "say": ["10.22.0.5", "10.22.0.6", "host name"]})
    # The same lines from one machine: its processes share an address, nothing to say.
    lines = old_lines("worker", 7301, 0, "10.22.0.5", (0, 1)) + old_lines("worker", 7302, 1, "10.22.0.5", (1, 0))
    write("nccl_2_2_one_host", {"horovod.log": lines}, {"exit": 3})

    # 56. A paste GitHub rendered: blockquoted lines, "file.cc:NNN" and addresses as links.
    def link(t):
        return "[%s](http://%s/)" % (t, t)
    lines = ["> gn-204:61720:61788 [0] transport/%s NCCL WARN NET/IB : Got completion from peer %s<51234> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:%s remoteGids::ffff:%s" % (
                link("net_ib.cc:1909"), link("10.61.2.9"), link("10.61.2.4"), link("10.61.2.9")),
             "> gn-204:61720:61788 [0] NCCL INFO transport/%s -> 6" % link("net.cc:1137"),
             "> gn-204:61720:61788 [0] NCCL INFO %s -> 6" % link("proxy.cc:698"),
             "> "]
    write("github_autolinked_paste", {"issue.txt": lines},
          {"exit": 1, "kind": "link", "host": "gn-204", "findings": 1, "say": ["10.61.2.9<51234>"], "avoid": ["](http", "[10."]})

    # 57. A collector's zoned time before NCCL's own timestamp (NCCL_DEBUG_TIMESTAMP_FORMAT).
    lines = []
    for n, (tid, where, msg) in enumerate((
            (912, "transport/net_ib.cc:139", "communicator encountered a fatal error (detected in ncclIbTest)"),
            (905, "transport/net_ib.cc:180", "NET/IB : mlx5_4:1 async fatal event on QP (0x7f1c2a0b1c40): local access violation work queue error"),
            (912, "transport/net_ib.cc:2451", "NET/IB: Got completion from peer 10.77.1.30<43817> with status=4 opcode=0 len=0 vendor err 83 (Send) hca mlx5_4"))):
        lines.append("2025-03-02 18:04:%02d.%03d +08:00 [2025-03-02 10:04:%02d] b200-09:517:%d [3] %s NCCL WARN %s" % (12 + n, 40 + n, 11 + n, tid, where, msg))
    write("collector_time_before_nccl_time", {"worker.log": lines},
          {"exit": 1, "kind": "link", "host": "b200-09", "say": ["mlx5_4"]})

    # 58. nccl-tests' own failure lines name the host, then its pid.
    lines = ["tn-0417: Test NCCL failure common.cu:1012 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '",
             " .. tn-0417 pid 60233: Test failure common.cu:891"]
    write("nccl_tests_failure_host", {"all_reduce_perf.log": lines},
          {"exit": 1, "kind": "crash", "host": "tn-0417", "findings": 1, "say": ["tn-0417 pid 60233"], "avoid": ["PyTorch"]})


def frtrace():
    """PyTorch's Flight Recorder analyzer (fr_trace / torchfrtrace) pasted alone: its report
    names the culprit ranks of a mismatched collective, or the ranks that never joined one.
    Made-up process groups, sizes and stack frames."""
    # 59. 16 ranks; ranks 3 and 11 all-reduce a tensor of another size at collective 214.
    expected = "{" + ", ".join(str(r) for r in range(16)) + "}"
    err = ", ".join("Culprit rank %d; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[4096, 512]]' does not match found input sizes: '[[2048, 512]]'" % r
                    for r in (3, 11))
    lines = ["$ torchfrtrace --prefix nccl_trace_rank_ /scratch/fr_dumps",
             "Collective 214 at entry 213 errors",
             "group info: 0:default_pg",
             "collective: nccl:all_reduce",
             "input sizes: [[4096, 512]]",
             "output sizes: [[4096, 512]]",
             "world size: 16",
             "expected ranks: " + expected,
             "collective state: scheduled",
             "error msg: " + err,
             "collective stack trace: ",
             " all_reduce at /opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:2806",
             "sync_grads at /workspace/train/engine.py:144"]
    write("fr_trace_size_mismatch", {"fr_trace.txt": lines},
          {"exit": 1, "kind": "mismatch", "rank": 3, "findings": 1, "say": ["Flight Recorder", "collective 214", "ranks 3,11", "[[2048, 512]]"]})

    # 60. 2.8+ wording: rank 6 never issued collective 57 of a 8-rank group.
    lines = ["Not all ranks joining collective, sequence number: 57",
             "internal record id: 56",
             "group info: 1:tp_group",
             "collective: nccl:all_gather_into_tensor_coalesced",
             "missing ranks: {6}",
             "input sizes: [[1024]]",
             "output sizes: [[8192]]",
             "world size: 8",
             "expected ranks: {0, 1, 2, 3, 4, 5, 6, 7}",
             "collective state: scheduled",
             "collective stack trace: ",
             " all_gather_into_tensor at /opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3934"]
    write("fr_trace_missing_rank", {"fr_trace.txt": lines},
          {"exit": 1, "kind": "hang", "rank": 6, "findings": 1, "say": ["Flight Recorder", "collective 57", "rank 6"]})
def corpus3a():
    """Shapes a third check on posted logs found misread: a timed-out rank's communicator
    abort read as its death, a CollNet (SHARP) set-up NCCL recovered from read as a failed
    init, SHARP's group failure, NVML that does not see a GPU, NVLS set-up's CUDA errors,
    and a bus error inside NCCL reported by UCX. Made-up hosts, pids and lines."""
    # 59. One node, no Init lines: PyTorch times out ranks 1, 3 and 0; as it aborts each,
    # the other local ranks' service threads see its connection close (some closes printed
    # before the timeout line). Rank 2 logged no timeout.
    ps = [P("trn-w04", 4100 + 3 * d, d, d, 4, "10.31.0.4") for d in range(4)]
    lines = [p.info("Channel 00/0 : %d[%d] -> %d[%d] via P2P/IPC/read" % (p.dev, p.dev, (p.dev + 1) % 4, (p.dev + 1) % 4)) for p in ps]
    for r in (1, 3, 0):
        closes = [ps[d].info("[Service thread] Connection closed by localRank %d" % r, ps[d].pid + 61) for d in range(4) if d != 2 or r != 0]
        t = torch_timeout(r, 412, ts="E0310 04:12:5%d.118220311" % r)[:1]
        lines += (closes[:1] + t + closes[1:]) if r == 3 else (t + closes)
    write("torch_timeout_localrank_teardown", {"console.log": lines},
          {"exit": 1, "kind": "hang", "findings": 1, "no_culprit": True, "say": ["rank(s) 2 logged no timeout"], "avoid": ["died"]})

    # 60. NCCL 2.19: the SHARP plugin cannot create its job; the ranks' CollNet set-up fails
    # (breadcrumbs, no WARN of their own) and local rank 0 of each node falls back.
    ps = [P("sh-n%d" % (1 + r // 2), 61200 + 17 * r, r % 2, r, 4, "10.40.0.%d" % (1 + r // 2), version="2.19.3+cuda12.3") for r in range(4)]
    lines = []
    for p in ps:
        if p.rank == 1:
            lines += p.warn("sharp_plugin.c:318", "NET/IB : SHARP coll init error: Cannot create SHARP job(-11)", tid=p.pid + 240)
        lines.append(p.info("transport.cc:302 -> 2"))
        lines.append(p.info("init.cc:688 -> 2"))
    for p in ps:
        if p.dev == 0:
            lines += p.warn("transport.cc:334", "Cannot initialize CollNet, using point-to-point network instead")
    write("collnet_sharp_fallback", {"nccl.log": lines},
          {"exit": 1, "kind": "config", "findings": 1, "say": ["fell back", "NCCL_COLLNET_ENABLE=0"], "avoid": ["without a warning"]})

    # 61. SHARP cannot lock its streaming tree: the group is not created and no fallback follows.
    p = P("sh-n7", 3301, 2, 2, 8, "10.40.0.7", version="2.21.5+cuda12.4")
    lines = ["[sh-n7:0:3301 - tree_ops.c:290][2024-11-02 08:14:03] ERROR Failed to lock SAT tree(ID:0x1a0. ret:0x4)"]
    lines += p.warn("sharp_plugin.c:361", "SHARP group create: Streaming Tree lock failed (-18)", tid=p.pid + 12)
    lines.append(p.info("transport.cc:331 -> 2", p.pid + 5))
    write("collnet_sharp_group_failed", {"nccl.log": lines},
          {"exit": 1, "kind": "config", "host": "sh-n7", "findings": 1, "say": ["Aggregation Manager", "NCCL_COLLNET_ENABLE=0"], "avoid": ["without a warning"]})

    # 62. Two containers on one node: NVML in one cannot find a GPU by its bus id; the other
    # process only prints its breadcrumb.
    a, b = P("ctr-host-5", 812, 0, 0, 2, "10.50.0.5"), P("ctr-host-5", 813, 1, 1, 2, "10.50.0.5")
    lines = a.warn("misc/nvmlwrap.cc:181", "nvmlDeviceGetHandleByPciBusId() failed: Not Found", tid=a.pid + 90)
    lines += a.crumbs("graph/xml.cc:841", "graph/topo.cc:680", "init.cc:990", "init.cc:1530", code=2, tid=a.pid + 90)
    lines += [a.info("group.cc:64 -> 2 [Async thread]", a.pid + 90), a.info("group.cc:421 -> 2", a.pid), b.info("group.cc:421 -> 2", b.pid)]
    write("nvml_gpu_not_found", {"train.log": lines},
          {"exit": 1, "kind": "config", "host": "ctr-host-5", "findings": 1, "say": ["NVML", "ctr-host-5 pid 812"], "avoid": ["without a warning"]})

    # 63. NVLS: CUDA refuses the multicast set-up in its present state.
    p = P("hgx-17", 5521, 3, 3, 8, "10.60.0.17", version="2.21.5+cuda12.4")
    lines = p.warn("transport/nvls.cc:251", "Cuda failure 401 'the operation cannot be performed in the present state'", tid=p.pid)
    lines += p.crumbs("transport/nvls.cc:402", "init.cc:1120", code=1, tid=p.pid)
    write("nvls_present_state", {"nccl.log": lines},
          {"exit": 1, "kind": "gpu", "host": "hgx-17", "findings": 1, "say": ["NVLink SHARP", "NCCL_NVLS_ENABLE=0"]})

    # 64. A container with the default /dev/shm: UCX reports a bus error in a rank while
    # NCCL sets up its channels, the backtrace in NCCL.
    ps = [P("7f3ac9e1d2b4", 930 + d, d, d, 4, "172.17.0.3") for d in range(4)]
    lines = [p.info("Channel 00/0 : %d[%d] -> %d[%d] via SHM/direct/direct" % (p.dev, p.dev, (p.dev + 1) % 4, (p.dev + 1) % 4), p.pid + 40) for p in ps]
    lines += ["[7f3ac9e1d2b4:932 :0:975] Caught signal 7 (Bus error: nonexistent physical address)",
              "==== backtrace (tid:    975) ====",
              " 0 0x0000000000042520 __sigaction()  ???:0",
              " 1 0x000000000009b1f4 ncclGroupEnd()  ???:0",
              " 2 0x0000000000094ac3 start_thread()  ???:0",
              "================================="]
    lines += [p.info("Connected all rings", p.pid + 40) for p in ps if p.dev != 2]
    write("ucx_bus_error_shm", {"train.log": lines},
          {"exit": 1, "kind": "config", "host": "7f3ac9e1d2b4", "findings": 1, "say": ["bus error", "--shm-size", "ncclGroupEnd"]})


def ras_report_227(version, cuda, body):
    """A RAS text STATUS reply in the 2.27+ layout of a 3-node job whose nodes run different
    process counts: the distribution table, the outlier node, then the given sections."""
    return (ras_versions(version, cuda) + """
Job summary
===========

  Nodes  Processes         GPUs
          per node  per process
      2          4            1
      1          3            1

  Nodes  Processes         GPUs
(total)    (total)      (total)
      3         11           11

The outlier node:
  Node 10.44.1.23 running processes 5521,5522,5523

Communicators... (0.01s)
=============

""") + body


def corpus3b():
    """Shapes a third check on posted logs found unread: a RAS report with the job's PyTorch
    lines after it, or a warning before it (and the 2.27 layout), PyTorch's dump signal
    naming the rank that timed out, a work counter PyTorch printed unset. Made-up hosts,
    pids, addresses and hashes."""
    # 59. ncclras says every communicator is RUNNING and OK; then rank 11's watchdog times
    # out. Both are facts: RAS raises nothing, the timeout is the finding.
    ts = "E0412 03:17:45.118204331"
    report = ras_report("2.26.6+cuda12.8", "12.8", 2, 8, "0.02s", """Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         8        16        16   RUNNING      OK

Errors
======

Warnings
========
""")
    lines = report.split("\n") + [
        "[rank11]:[%s ProcessGroupNCCL.cpp:632] [Rank 11] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=44107, OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=1800000) ran for 1800052 milliseconds before timing out." % ts,
        "[rank11]:[%s ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank 11]  failure detected by watchdog at work sequence id: 44107 PG status: last enqueued work: 44110, last completed work: 44106" % ts]
    write("ras_ok_then_torch_timeout", {"console.txt": lines},
          {"exit": 1, "kind": "hang", "findings": 1, "no_culprit": True, "say": ["timed out 1 rank(s)"], "avoid": ["RAS"]})

    # 60. A PyTorch warning, then a 2.27-layout report in which one process is dead.
    body = """Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         3       3-4        11        11   RUNNING  INCOMPLETE
    1         2         1         1         2         1    NOCOMM  INCOMPLETE,MISMATCH

Errors
======

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process 5522 on node 10.44.1.23 managing GPU 1

#0-0 (00e1a7c35b0d9f21) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 9 -- GPU 1 managed by process 5522 on node 10.44.1.23

Warnings
========
"""
    lines = ["W0412 03:02:11.902114662 ProcessGroupNCCL.cpp:981] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS is the default now, this environment variable is thus deprecated. (function operator())"]
    lines += ras_report_227("2.27.6", "12.9", body).split("\n")
    write("ras_2_27_layout_after_warning", {"ras.txt": lines},
          {"exit": 1, "kind": "crash", "say": ["dead"]})

    # 61. Only rank 0's console: the flight recorder's dump signal names rank 6, whose
    # collective timed out first; rank 0's counters are its own.
    ts = "E0412 04:51:09.66120%04d"
    lines = ["[rank0]:[%s ProcessGroupNCCL.cpp:1849] [PG ID 0 PG GUID 0(default_pg) Rank 0] Observed flight recorder dump signal from another rank via TCPStore." % (ts % 1),
             "[rank0]:[%s ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from  rank 6 and we will try our best to dump the debug info. Last enqueued NCCL work: 3318, last completed NCCL work: 3316.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in the communications library (e.g. NCCL), etc. " % (ts % 2),
             "[rank0]:[%s ProcessGroupNCCL.cpp:1628] [PG ID 0 PG GUID 0(default_pg) Rank 0] ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1, only active collectives: 0" % (ts % 3)]
    write("torch_dump_signal_names_rank", {"rank0.log": lines},
          {"exit": 1, "kind": "hang", "findings": 1, "no_culprit": True, "say": ["rank 6 timed out first"]})

    # 62. Two Ray workers time out; one's status line printed an unset completed counter,
    # which would make the other look behind.
    pre = "(RayWorkerWrapper pid=77302) [rank0]:"
    lines = [pre + "[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=786432, NumelOut=786432, Timeout(ms)=600000) ran for 600015 milliseconds before timing out.",
             pre + "[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank 0] Timeout at NCCL work: 3, last enqueued NCCL work: 3, last completed NCCL work: 2."]
    pre = "(RayWorkerWrapper pid=77314) [rank1]:"
    lines += [pre + "[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=786432, NumelOut=786432, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
             pre + "[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank 1] Timeout at NCCL work: 3, last enqueued NCCL work: 3, last completed NCCL work: 81723649120037.",
             pre + "[E ProcessGroupNCCL.cpp:577] [Rank 1] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data."]
    write("torch_unset_completed_counter", {"worker.log": lines},
          {"exit": 1, "kind": "hang", "findings": 1, "no_culprit": True, "say": ["timed out 2 rank(s)"], "avoid": ["81723649120037", "suspect"]})

def corpus4():
    """Shapes a fourth set of posted logs found misread (issue 31), in made-up logs."""
    # 81. A rank's CUDA out-of-memory traceback behind a collector's time and torchrun's
    # [rankN]: prefix, no NCCL line at all: the rank and the size it could not allocate.
    t = "2026-03-02 11:07:%02d "
    lines = [t % 40 + "[rank5]: Traceback (most recent call last):",
             t % 40 + '[rank5]:   File "/work/train.py", line 211, in <module>',
             t % 40 + "[rank5]:     loss = model(batch).loss",
             t % 41 + "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.11 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use.",
             t % 41 + "INFO:filelock:Lock 1402 released on /tmp/cache.lock"]
    write("torch_oom_collector_rank", {"console.log": lines},
          {"exit": 1, "kind": "gpu", "rank": 5, "findings": 1, "say": ["out of memory", "2.00 GiB"]})

    # 82. Only torchrun's failure summary: every worker exited 1, and its record names rank 2
    # the first observed failure.
    rec = []
    for r in (0, 1, 3, 2):
        if r == 2:
            rec += ["------------------------------------------------------------", "Root Cause (first observed failure):"]
        rec += ["[%d]:" % r, "  time      : 2026-03-02_11:07:41", "  host      : trn-a07.cluster",
                "  rank      : %d (local_rank: %d)" % (r, r), "  exitcode  : 1 (pid: %d)" % (52210 + r),
                "  error_file: <N/A>", "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]
    rec += ["============================================================"]
    write("torchrun_root_cause_record", {"torchrun.log": ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                                                          "============================================================", "train.py FAILED",
                                                          "------------------------------------------------------------", "Failures:"] + rec},
          {"exit": 1, "kind": "crash", "rank": 2, "findings": 1, "say": ["first"]})

    # 83. One rank's proxy saw a broken pipe from a peer whose log is not here: a suspect,
    # likely dead, not a confirmed death.
    lines = ["sv-22:40111:40170 [3] misc/socket.cc:518 NCCL WARN Net : Call to recv from 10.31.8.40<51822> failed : Broken pipe",
             "sv-22:40111:40170 [3] NCCL INFO misc/socket.cc:535 -> 6",
             "sv-22:40111:40170 [3] NCCL INFO transport/net_socket.cc:368 -> 6",
             "sv-22:40111:40170 [3] proxy.cc:1119 NCCL WARN [Proxy Service 11] Failed to execute operation Connect from rank 11, retcode 6"]
    write("witness_broken_pipe_unconfirmed", {"rank11.log": lines},
          {"exit": 1, "kind": "crash", "host": "10.31.8.40", "findings": 1, "say": ["likely", "not a confirmed death"]})

    # 84. TORCH_NCCL_DESYNC_DEBUG=1: rank 0's timeout carries PyTorch's desync report, which
    # names rank 3 (it finished collective 117 and never joined 118); ranks 1 and 2 only
    # time out. No NCCL COLL lines: without the report no rank could be named.
    ts = "E0302 11:40:0%d.%09d"
    def timeout(r, n):
        return "[rank%d]:[%s ProcessGroupNCCL.cpp:632] [Rank %d] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=118, OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) ran for %d milliseconds before timing out." % (r, ts % (r, 1000 + r), r, 600010 + n)
    lines = [timeout(0, 2),
             "[rank0]:\t - [0] Timeout at collective: ALLREDUCE, #118",
             "[rank0]:\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
             "[rank0]:\t     [3] finished collective #117, but didn't join collective #118 (count from 1)",
             "[rank0]:\t - Snapshot of ranks' latest states:",
             "[rank0]:\t   #117 finished ranks:",
             "[rank0]:\t     [3] finished ALLREDUCE",
             "[rank0]:\t   #118 started ranks:",
             "[rank0]:\t     [0, 1, 2] started ALLREDUCE",
             timeout(1, 5), timeout(2, 7)]
    write("torch_desync_report_names_rank", {"console.log": lines},
          {"exit": 1, "kind": "hang", "rank": 3, "findings": 1, "say": ["desync report", "collective #118"]})

    # 85. A benchmark collector's prefix on every line ("<bench>.<node> [stderr] "), and a
    # terminal that wrapped the long WARN at 120 columns: rank 2's IB retries ran out.
    ps = two_nodes(version="2.21.5+cuda12.4")
    def b85(p):
        L = p.init() + p.colls(0, 60)
        if p.rank == 2:
            L += p.warn("transport/net_ib.cc:1683", "NET/IB : Got completion from peer 192.168.4.7<48213> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:192.168.4.12 remoteGids::ffff:192.168.4.7 hca mlx5_3", tid=p.pid + 90)
            L += p.crumbs("transport/net.cc:1134", "proxy.cc:692", tid=p.pid + 90)
        out = []
        for line in L:
            line = "allreduce_perf.%s [stderr] %s" % (p.host, line) if line else line
            while len(line) > 120:
                out.append(line[:120])
                line = line[120:]
            out.append(line)
        return out
    write("collector_stream_prefix_wrapped", per_proc(ps, b85),
          {"exit": 1, "kind": "link", "rank": 2, "host": "gpu-node12", "findings": 1, "say": ["RETRY_EXC"]})


def corpus5():
    """Issue 31's rest, in made-up logs: Slurm labels over torchrun, one resolver of ranks,
    two jobs in a folder, a rank that leaves early or runs one step more, a host-only line."""
    # 86. srun --label with one task per node, torchrun starting two ranks in each: every
    # line of node 1's two processes says "1: ", NCCL's and Python's alike. Rank 3 runs out
    # of GPU memory; the label is the task, not a rank, and must not become one.
    ps = two_nodes(version="2.21.5+cuda12.4")
    for p in ps:
        p.commid = "0x5a1e7c0de0f3b2a4"
    lines = []
    for p in ps:
        task = 0 if p.host == "gpu-node07" else 1
        for line in p.init():
            lines.append("%d: %s" % (task, line))
    for k in range(0, 41):
        for p in ps:
            task = 0 if p.host == "gpu-node07" else 1
            if k < 40 or p.rank != 3:
                lines += ["%d: %s" % (task, line) for line in p.colls(k, k + 1)]
    lines += ["1: [rank3]: Traceback (most recent call last):",
              '1: [rank3]:   File "/work/train.py", line 188, in <module>',
              "1: [rank3]:     out = model(batch)",
              "1: [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 1 has a total capacity of 79.15 GiB of which 2.06 GiB is free.",
              "1: E0302 11:52:03.118000 62120 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: 1) local_rank: 1 (pid: %d) of binary: /usr/bin/python3" % ps[3].pid]
    for p in ps[:3]:
        task = 0 if p.host == "gpu-node07" else 1
        lines += ["%d: %s" % (task, l) for l in torch_timeout(p.rank, 42, ts="E0302 12:02:0%d.000000000" % p.rank)]
    write("slurm_label_over_torchrun_oom", {"slurm-9120.out": lines},
          {"exit": 1, "kind": "gpu", "rank": 3, "host": "gpu-node12", "findings": 1, "say": ["out of memory", "3.50 GiB"]})

    # 87. srun --label with one task per GPU (the label is the rank): rank 2's IB retries run
    # out; the other tasks' Python tracebacks follow its WARN in the console and are theirs,
    # not more of its message.
    ps = two_nodes(version="2.20.5+cuda12.4")
    lines = []
    for p in ps:
        lines += ["%d: %s" % (p.rank, l) for l in p.init()]
    for k in range(0, 30):
        for p in ps:
            lines += ["%d: %s" % (p.rank, l) for l in p.colls(k, k + 1)]
    p2 = ps[2]
    lines += ["%d: %s" % (2, l) for l in p2.warn("transport/net_ib.cc:1414", "NET/IB : Got completion from peer 192.168.4.7<39817> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:192.168.4.12 remoteGids::ffff:192.168.4.7 hca mlx5_3", tid=p2.pid + 90) if l]
    for r in (0, 1, 3):
        lines += ["%d: Traceback (most recent call last):" % r,
                  '%d:   File "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2050, in all_reduce' % r,
                  "%d:     work = group.allreduce([tensor], opts)" % r,
                  "%d: torch.distributed.DistBackendError: NCCL communicator was aborted on rank %d." % (r, r)]
    write("slurm_label_warn_then_tracebacks", {"slurm-9121.out": lines},
          {"exit": 1, "kind": "link", "rank": 2, "host": "gpu-node12", "findings": 1, "say": ["RETRY_EXC"],
           "avoid_anywhere": ["Traceback", "File \"", "DistBackendError"]})

    # 88. srun --label, one task and one GPU per node, torchrun's rendezvous ranking the
    # nodes the other way round: task 0 runs rank 1. Init lines are NCCL's word on the rank,
    # the label only the task's: the culprit is rank 1 on gpu-node07, and the report says the
    # labels are not the ranks.
    a = P("gpu-node07", 7101, 0, 1, 2, "10.10.4.7", version="2.21.5+cuda12.4", commid="0x7e3a5d2c4b1f0a99")
    b = P("gpu-node12", 3307, 0, 0, 2, "10.10.4.12", version="2.21.5+cuda12.4", commid="0x7e3a5d2c4b1f0a99")
    lines = ["0: " + l for l in a.init()] + ["1: " + l for l in b.init()]
    for k in range(0, 50):
        lines += ["1: " + l for l in b.colls(k, k + 1)]
        if k < 44:
            lines += ["0: " + l for l in a.colls(k, k + 1)]
    lines += ["1: " + l for l in torch_timeout(0, 46, ts="E0302 12:12:00.000000000")]
    write("slurm_task_is_not_rank", {"slurm-9122.out": lines},
          {"exit": 1, "kind": "hang", "rank": 1, "host": "gpu-node07", "limits": ["task 0", "rank 1"]})

    # 89. Two jobs' logs in one folder, each with its torchrun console: in job A rank 1 was
    # killed (SIGKILL, its log just ends); in job B rank 2 stopped issuing at 30 while its
    # peers wait in 31 until PyTorch's watchdog fires. Each console's lines are its own job's
    # (torchrun names the pids): two findings, neither mixing the other job in.
    def job(hosts, base, commid):
        return [P(hosts[r // 2], base + r * 13, r % 2, r, 4, "10.20.%d.%d" % (base % 7, r + 1), version="2.21.5+cuda12.4", commid=commid)
                for r in range(4)]
    ja = job(("trn-a01", "trn-a02"), 20100, "0x1111a0a0c3c3e5e5")
    jb = job(("trn-b01", "trn-b02"), 30200, "0x2222b0b0d4d4f6f6")
    files = {}
    for p in ja:
        files["nccl.%s.%d.log" % (p.host, p.pid)] = p.init() + p.colls(0, 25 if p.rank == 1 else 26)
    for p in jb:
        files["nccl.%s.%d.log" % (p.host, p.pid)] = p.init() + p.colls(0, 30 if p.rank == 2 else 31)
    files["torchrun-a.log"] = [
        "W0302 13:00:05.000000 20001 torch/distributed/elastic/multiprocessing/api.py:897] Sending process %d closing signal SIGTERM" % ja[0].pid,
        "E0302 13:00:06.000000 20001 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 1 (pid: %d) of binary: /usr/bin/python3" % ja[1].pid]
    files["torchrun-b.log"] = []
    for p in jb:
        if p.rank != 2:
            files["torchrun-b.log"] += torch_timeout(p.rank, 31, ts="E0302 14:10:0%d.000000000" % p.rank)
    files["torchrun-b.log"] += ["E0302 14:10:09.000000 30001 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 0 (pid: %d) of binary: /usr/bin/python3" % jb[0].pid]
    write("two_jobs_one_folder", files,
          {"exit": 1, "findings": 2, "jobs": [{"kind": "crash", "rank": 1, "host": "trn-a01", "avoid_anywhere": ["trn-b0"]},
                                              {"kind": "hang", "rank": 2, "host": "trn-b02", "avoid_anywhere": ["trn-a0"]}]})

    # 90. Rank 2 ran out of data and left early: it destroyed its communicator after 40
    # collectives and exited 0; its peers wait in 41 until PyTorch's watchdog fires. The
    # culprit is rank 2, and no unknown rank stands beside it.
    ps = two_nodes(version="2.21.5+cuda12.4")
    def b90(p):
        L = p.init()
        if p.rank == 2:
            return L + p.colls(0, 40) + p.destroy()
        return L + p.colls(0, 41)
    files = per_proc(ps, b90)
    con = []
    for p in ps:
        if p.rank != 2:
            con += torch_timeout(p.rank, 41, ts="E0302 12:22:0%d.000000000" % p.rank)
    con += ["E0302 12:22:09.000000 9001 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) local_rank: 0 (pid: %d) of binary: /usr/bin/python3" % ps[0].pid]
    files["torchrun.log"] = con
    write("rank_left_early", files,
          {"exit": 1, "kind": "hang", "rank": 2, "host": "gpu-node12", "avoid_anywhere": ["rank -1", "rank ?"]})

    # 91. The peers ran 50 steps and destroyed their communicators; rank 2 ran one step
    # more and waits in collective 51 for peers that are gone. The peers ended cleanly:
    # the one that went on is the culprit.
    ps = two_nodes(version="2.21.5+cuda12.4")
    def b91(p):
        L = p.init()
        if p.rank == 2:
            return L + p.colls(0, 51)
        return L + p.colls(0, 50) + p.destroy()
    write("one_step_more_after_destroy", per_proc(ps, b91),
          {"exit": 1, "kind": "hang", "rank": 2, "host": "gpu-node12", "findings": 1, "say": ["one step more"]})

    # 92. nccl-tests with two ranks per host: rank 3's QP hit a fatal async event, and
    # nccl-tests' own failure line names the host alone, quoting it. The line is about the
    # process on that host whose own log shows the event: no second process without a pid
    # beside it, the event once.
    ps = two_nodes(version="2.19.3+cuda12.3")
    def b92(p):
        L = p.init() + p.colls(0, 20)
        if p.rank == 3:
            L += p.warn("transport/net_ib.cc:180", "NET/IB : mlx5_3:1 async fatal event on QP (0x7f1c2a0b1c40): local access violation work queue error", tid=p.pid + 4)
        return L
    files = per_proc(ps, b92)
    files["all_reduce_perf.out"] = ["gpu-node12: Test NCCL failure common.cu:1279 'remote process exited or there was a network error / NET/IB : mlx5_3:1 async fatal event on QP (0x7f1c2a0b1c40): local access violation work queue error'"]
    write("host_only_failure_line", files,
          {"exit": 1, "kind": "link", "host": "gpu-node12", "port": "mlx5_3:1", "findings": 1, "ranks": 4, "avoid_anywhere": ["pid 0"]})


def stamped(lines, start, step_us):
    """NCCL_DEBUG_TIMESTAMP_FORMAT='[%F %T.%6f] ' on each line, step_us apart from start."""
    out = []
    for i, l in enumerate(lines):
        t = start + datetime.timedelta(microseconds=i * step_us)
        out.append(t.strftime("[%Y-%m-%d %H:%M:%S.%f] ") + l if l else l)
    return out


def glog(level, t, tid, where, msg):
    """glog's prefix as torchrun's agent prints it: month and day, no year."""
    return "%s%s %d %s] %s" % (level, t.strftime("%m%d %H:%M:%S.%f"), tid, where, msg)


def corpus6():
    """A job the launcher killed at the end, its console timed by glog (month and day, no
    year): the deaths are the teardown of the root, one line of its evidence, not a crash
    per rank."""
    api = "torch/distributed/elastic/multiprocessing/api.py:882"

    # 93. Four ranks on one host; rank 2 freezes (SIGSTOP) after collective 40 just before
    # midnight on new year's eve, and its peers wait in 41. 25 s later torchrun kills all
    # four (exit -9, within 200 ms, after midnight: the glog time is in the new year). One
    # hang naming rank 2; the four kills are its teardown.
    ps = [P("dgx-a07", 51200 + r, r, r, 4, "10.10.4.7", version="2.27.3+cuda12.9", commid="0x3c9e1f2a7b6d5e40", net="Socket")
          for r in range(4)]
    start = datetime.datetime(2025, 12, 31, 23, 59, 20)
    files = {}
    for p in ps:
        files["nccl.%s.%d.log" % (p.host, p.pid)] = stamped(p.init() + p.colls(0, 40 if p.rank == 2 else 41), start, 250000)
    kill = datetime.datetime(2026, 1, 1, 0, 0, 2, 756592)
    con = []
    for i, r in enumerate((0, 1, 3, 2)):
        con.append(glog("E", kill + datetime.timedelta(milliseconds=50 * i), 461, api,
                        "failed (exitcode: -9) local_rank: %d (pid: %d) of binary: python3" % (r, ps[r].pid)))
    files["stdout.log"] = con
    write("launcher_kills_frozen_rank_glog", files,
          {"exit": 1, "kind": "hang", "rank": 2, "host": "dgx-a07", "findings": 1,
           "say": ["stopped issuing collectives"], "avoid": ["died", "killed"]})

    # 94. Rank 2 destroys its communicators after collective 40 and stays alive; its peers
    # see their connections to it closed at once ("Connection closed by remote peer") and
    # wait in 41. 15 s later torchrun kills all four: the closures witnessed rank 2 leaving,
    # not the kill that came long after. One hang naming rank 2.
    ps = [P("dgx-a08", 61300 + r, r, r, 4, "10.10.4.8", version="2.27.3+cuda12.9", commid="0x4d0f2a3b8c7e6f51", net="Socket")
          for r in range(4)]
    start = datetime.datetime(2026, 3, 9, 14, 2, 0)
    left = start + datetime.timedelta(seconds=20)
    files = {}
    for p in ps:
        L = stamped(p.init() + p.colls(0, 40 if p.rank == 2 else 41), start, 250000)
        if p.rank == 2:
            L += stamped(p.destroy(), left, 1)
        else:
            L += stamped(p.warn("misc/socket.cc:72", "socketProgress: Connection closed by remote peer localhost<%d>" % (37700 + p.rank), tid=p.pid + 70)[1:] +
                         p.crumbs("misc/socket.cc:845", "transport/net_socket.cc:557", "transport/net.cc:1508", tid=p.pid + 70),
                         left + datetime.timedelta(milliseconds=5), 10)
        files["nccl.%s.%d.log" % (p.host, p.pid)] = L
    kill = left + datetime.timedelta(seconds=15)
    files["stdout.log"] = [glog("E", kill + datetime.timedelta(milliseconds=40 * i), 771, api,
                                "failed (exitcode: -9) local_rank: %d (pid: %d) of binary: python3" % (r, ps[r].pid))
                           for i, r in enumerate((0, 2, 3, 1))]
    write("left_rank_killed_with_job_glog", files,
          {"exit": 1, "kind": "hang", "rank": 2, "host": "dgx-a08", "findings": 1, "avoid": ["died"]})


if __name__ == "__main__":
    main()
