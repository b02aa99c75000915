#!/usr/bin/python3
"""RDMA's costs, measured (issue #18).

The classic cost model of one 64 KiB message on a data-centre link -- TCP
copies the data three times and spends system calls, an interrupt and
thousands of instructions; RDMA posts a work request of a few dozen
instructions, copies nothing, and the target of a READ runs nothing --
printed exactly, and beside each of its figures the same quantity measured
on this machine, for TCP on loopback, uroce through its same-host rings,
uroce by loopback UDP (UROCE_SHM=0) and, as root, TCP and uroce between two
network namespaces joined by a veth pair (the stand-in for two hosts).

    bench/costs.py [--size 65536] [--iters 2000] [--reads 10000] [--wait block|spin|both]
                   [--model-only] [--no-namespaces] [--json FILE] [--build DIR]

Each measured row runs bench/costs_peer (a client and a server: a
ping-pong of SIZE bytes ITERS times, then READS READs of SIZE bytes; the
READ target application's fixed cost, two side-channel calls and a
wake-up, is spread over them) and reads, per
side and phase: its threads' CPU time split into the application's and
uroce's (the engine: what a hardware NIC would do), uroce's own counts of
the system calls it made and of the payload bytes it copied, by stage (the
counters `uroce stat` shows), the TCP program's own counts of its system
calls and bytes, hardware instructions where perf_event_open has them, and
the latency.  A message's copies, system calls and CPU are both sides'
together over the messages of the ping-pong (each side sends one and
receives one a round trip).

--wait block (the model's case: the receiver sleeps in the kernel and is
woken) waits in recv or on a completion channel; spin polls (non-blocking
recv, ibv_poll_cq); both (the default) runs each row both ways.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench as B  # noqa: E402  (its namespace helpers)

# The model's constants (issue #18): a 3 GHz CPU, copies 32 bytes a cycle.
CYCLE_NS = 0.33
SYSCALL_NS = 1500.0
INTERRUPT_NS = 2000.0
DMA_NS = 8000.0
WIRE_NS = 5000.0
RDMA_POST_INSTR = 50


def group(n, digits=0):
    """1,234.5 as the model prints figures."""
    return "{:,.{d}f}".format(n, d=digits)


def model(size):
    """The model's figures for one message of `size` bytes."""
    copy_in, seg, copy_out = size / 32, size / 64, size / 32
    tcp_instr = copy_in + seg + copy_out
    tcp_cpu = SYSCALL_NS + INTERRUPT_NS + SYSCALL_NS + tcp_instr * CYCLE_NS
    rdma_cpu = RDMA_POST_INSTR * CYCLE_NS
    tcp_lat = tcp_cpu + DMA_NS + WIRE_NS
    rdma_lat = rdma_cpu + DMA_NS + WIRE_NS
    return dict(size=size, tcp_copies=3, rdma_copies=0, copy_in=copy_in, seg=seg, copy_out=copy_out,
                tcp_instr=tcp_instr, rdma_instr=RDMA_POST_INSTR, tcp_cpu_ns=tcp_cpu, rdma_cpu_ns=rdma_cpu,
                tcp_lat_ns=tcp_lat, rdma_lat_ns=rdma_lat, cpu_ratio=tcp_cpu / rdma_cpu,
                lat_ratio=tcp_lat / rdma_lat, read_target_instr=0)


def us(ns, digits=1):
    return "%.*f µs" % (digits, ns / 1000.0)


def model_text(m):
    """The four sections of the model, each figure as the model prints it."""
    return {
        "intro": ["The model: one %s-byte message on a data-centre link; a cycle %.2f ns (3 GHz), a copy 32 bytes "
                  "a cycle (AVX), a system call %s ns, an interrupt %s ns, the NIC's DMA %s ns, the wire %s ns."
                  % (group(m["size"]), CYCLE_NS, group(SYSCALL_NS), group(INTERRUPT_NS), group(DMA_NS),
                     group(WIRE_NS))],
        "copies": ["model: TCP copies = %d (application -> kernel -> NIC -> kernel -> application); "
                   "RDMA copies = %d (the NIC reads and writes the application's memory)"
                   % (m["tcp_copies"], m["rdma_copies"])],
        "cpu": ["model: TCP instructions = %s (copy into the kernel) + %s (segmentation, checksums) + %s (copy out) "
                "= %s;" % (group(m["copy_in"]), group(m["seg"]), group(m["copy_out"]), group(m["tcp_instr"])),
                "       TCP CPU time = %s (send) + %s (the peer's interrupt) + %s (recv) + %s × %.2f = %s ns "
                "≈ %s" % (group(SYSCALL_NS), group(INTERRUPT_NS), group(SYSCALL_NS), group(m["tcp_instr"]),
                          CYCLE_NS, group(m["tcp_cpu_ns"], 1), us(m["tcp_cpu_ns"])),
                "       RDMA instructions = %d (posting the work request, ringing the doorbell); RDMA CPU time = "
                "%s ns ≈ %s" % (m["rdma_instr"], group(m["rdma_cpu_ns"], 1), us(m["rdma_cpu_ns"], 2)),
                "       ratio: CPU %s×" % group(m["cpu_ratio"])],
        "latency": ["model: TCP latency = CPU + DMA + wire = %s; RDMA latency = %s; ratio %.1f×"
                    % (us(m["tcp_lat_ns"]), us(m["rdma_lat_ns"]), m["lat_ratio"])],
        "read": ["model: TCP needs the peer's application to recv the request and send the data; the RDMA READ's "
                 "target runs nothing: a READ costs the target %d instructions" % m["read_target_instr"]],
    }


# -- measuring ------------------------------------------------------------

UROCE_COPY_STAGES = [  # counter, the copy it counts
    ("copy_inline_bytes", "application memory -> work request (IBV_SEND_INLINE)"),
    ("copy_to_kernel_bytes", "application memory -> kernel (sendmmsg)"),
    ("copy_from_kernel_bytes", "kernel -> packet buffer (recvmmsg)"),
    ("copy_forward_bytes", "forwarded on to another process of the address (in and out, headers included)"),
    ("copy_ring_in_bytes", "application memory -> same-host ring"),
    ("copy_ring_out_bytes", "ring -> packet buffer"),
    ("copy_place_bytes", "packet buffer -> application memory (placement)"),
    ("ref_bytes_rx", "peer's memory -> application memory (process_vm_readv)"),
]
UROCE_SYSCALLS = ["sys_sendmmsg", "sys_recvmmsg", "sys_poll", "sys_eventfd", "sys_yield", "sys_vm_readv",
                  "sys_sched", "sys_other"]
# what uroce's system call counters leave out (docs/architecture.md "A message's costs, counted")
UNCOUNTED = ("futex calls inside contended pthread locks (an application's post beside the engine's receive "
             "on one QP): not countable from inside; the voluntary context switches include their waits")


class Row:
    def __init__(self, label, transport, env=None, ns=None, wait="block"):
        self.label, self.transport, self.env, self.ns, self.wait = label, transport, env or {}, ns, wait
        self.phases = {}      # (role, phase) -> the side's JSON
        self.error = None


def run_row(row, a):
    """Runs costs_peer's server and client for the row; fills row.phases."""
    peer = os.path.join(a.build, "bin", "costs_peer")
    uroce = os.path.join(a.build, "bin", "uroce")
    base = [peer, "--transport=" + row.transport]
    if row.transport == "verbs":
        base = [uroce, "run", "--"] + base
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("UROCE_"):
            del env[k]
    env.update(row.env)
    with tempfile.TemporaryDirectory(prefix="costs.") as tmp:
        pf = os.path.join(tmp, "port")
        srv_argv = base + ["--port=0", "--port-file=" + pf]
        host = "127.0.0.1"
        if row.ns:
            na, nb, aa, ab = row.ns
            srv_argv = B.in_ns(nb, ab, srv_argv)
            host = ab
        srv = subprocess.Popen(srv_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            end = time.monotonic() + 20
            while not os.path.exists(pf) and srv.poll() is None and time.monotonic() < end:
                time.sleep(0.01)
            if not os.path.exists(pf):
                row.error = "the server did not start: " + (srv.stderr.read() if srv.poll() is not None else "")
                return
            port = open(pf).read().strip()
            cli_argv = base + ["--port=" + port, "--size=%d" % a.size, "--iters=%d" % a.iters, "--reads=%d" % a.reads,
                               "--wait=" + row.wait, host]
            if row.ns:
                cli_argv = B.in_ns(na, aa, cli_argv)
            cli = subprocess.run(cli_argv, capture_output=True, text=True, env=env, timeout=300)
            sout, serr = srv.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            row.error = "timed out"
            return
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
        if cli.returncode or srv.returncode:
            row.error = "client rc %d, server rc %d: %s %s" % (cli.returncode, srv.returncode,
                                                                cli.stderr.strip()[-300:], serr.strip()[-300:])
            return
        for line in (cli.stdout + sout).splitlines():
            if line.startswith("{"):
                d = json.loads(line)
                row.phases[(d["role"], d["phase"])] = d


def counters(d):
    return d.get("counters") or {}


def both(c, s, key):
    return c[key] + s[key]


def per_message(row):
    """The ping-pong's per-message figures: both sides together over the 2n
    messages (each side sends one and receives one a round trip), and each
    side's per round trip."""
    c, s = row.phases[("client", "pingpong")], row.phases[("server", "pingpong")]
    rounds = c["n"]
    n, size = 2 * rounds, c["size"]
    r = {"lat_median_ns": c["lat_ns"][0], "lat_p99_ns": c["lat_ns"][1], "counted": True}
    stages = []
    if row.transport == "tcp":
        stages.append(("application memory -> kernel (send)", both(c, s, "own_tx_bytes") / (n * size)))
        stages.append(("kernel -> application memory (recv)", both(c, s, "own_rx_bytes") / (n * size)))
        r["sys_app"] = both(c, s, "own_syscalls") / n
        r["sys_uroce"] = 0.0
        r["sys_kinds"] = []
    else:
        cc, sc = counters(c), counters(s)
        # no stats page: not uroce's library (rxe, a NIC), or it could not be read
        r["counted"] = c.get("counters") is not None and s.get("counters") is not None
        for name, what in UROCE_COPY_STAGES:
            v = (cc.get(name, 0) + sc.get(name, 0)) / (n * size)
            if v:
                stages.append((what, v))
        total = sum(cc.get(k, 0) + sc.get(k, 0) for k in UROCE_SYSCALLS)
        eng = cc.get("sys_by_engine", 0) + sc.get("sys_by_engine", 0)
        r["sys_app"] = (total - eng + both(c, s, "own_syscalls")) / n
        r["sys_uroce"] = eng / n
        r["sys_kinds"] = [(k[4:], (cc.get(k, 0) + sc.get(k, 0)) / n) for k in UROCE_SYSCALLS
                          if cc.get(k, 0) + sc.get(k, 0)]
        r["retransmits"] = cc.get("retransmits", 0) + sc.get("retransmits", 0)
        # the path taken, not the one asked for: a rings row whose packets
        # went by UDP (no private rendezvous directory, an overflow uid...)
        if row.ns is None and row.env.get("UROCE_SHM") != "0" and r["counted"] and \
                not cc.get("shm_packets_tx", 0) + sc.get("shm_packets_tx", 0):
            r["path_note"] = ("no same-host ring was used: the packets went by UDP (the counters shm_dir_refused "
                              "and shm_region_failed of `uroce stat` say why; an overflow uid such as nobody's "
                              "gets no rings: docs/architecture.md)")
        rx = cc.get("rx_packets", 0) + sc.get("rx_packets", 0)
        r["rx_by_engine"] = (cc.get("rx_by_engine", 0) + sc.get("rx_by_engine", 0)) / rx if rx else None
    r["stages"] = stages
    r["copies"] = sum(v for _, v in stages)
    r["cpu_app_ns"] = both(c, s, "app_cpu_ns") / n
    r["cpu_uroce_ns"] = both(c, s, "uroce_cpu_ns") / n
    r["vcsw_app"] = both(c, s, "app_vcsw") / n
    r["vcsw_uroce"] = both(c, s, "uroce_vcsw") / n
    def side_sys(d):
        """a side's system calls a round trip: the application's threads', uroce's engine's"""
        k = counters(d)
        eng = k.get("sys_by_engine", 0)
        return (sum(k.get(x, 0) for x in UROCE_SYSCALLS) - eng + d["own_syscalls"]) / rounds, eng / rounds
    r["sides"] = [(role, d["app_cpu_ns"] / rounds, d["uroce_cpu_ns"] / rounds, d["app_vcsw"] / rounds,
                   d["uroce_vcsw"] / rounds) + side_sys(d) for role, d in (("client", c), ("server", s))]
    if c["instr_app"] is not None and s["instr_app"] is not None:
        r["instr_app"] = both(c, s, "instr_app") / n
        r["instr_uroce"] = both(c, s, "instr_uroce") / n
    r["instr_note"] = c["instr_note"] or s["instr_note"]
    return r


def per_read(row):
    """The READ phase: what the target (the server) and the initiator spent
    per READ."""
    c, s = row.phases[("client", "read")], row.phases[("server", "read")]
    n = c["n"]
    sc = counters(s)
    sys_total = sum(sc.get(k, 0) for k in UROCE_SYSCALLS)
    eng = sc.get("sys_by_engine", 0)
    return {"target_app_ns": s["app_cpu_ns"] / n, "target_uroce_ns": s["uroce_cpu_ns"] / n,
            "target_app_sys": (s["own_syscalls"] + sys_total - eng) / n, "target_uroce_sys": eng / n,
            "initiator_app_ns": c["app_cpu_ns"] / n, "initiator_uroce_ns": c["uroce_cpu_ns"] / n,
            "lat_median_ns": c["lat_ns"][0], "lat_p99_ns": c["lat_ns"][1]}


# -- printing -------------------------------------------------------------

def table(rows, header):
    widths = [max(len(str(x[i])) for x in [header] + rows) for i in range(len(header))]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    out = ["    " + (fmt % tuple(header)).rstrip()]
    out += ["    " + (fmt % tuple(r)).rstrip() for r in rows]
    return out


def report(m, rows):
    out = ["RDMA's costs, measured: one %s-byte message (issue #18; bench/costs.py)" % group(m["size"]), ""]
    text = model_text(m)
    out += text["intro"] + [""]
    ok = [r for r in rows if not r.error]
    for r in rows:
        if r.error:
            out.append("(%s: not measured: %s)" % (r.label, r.error))
    pm = {r.label: per_message(r) for r in ok}
    pr = {r.label: per_read(r) for r in ok}

    out += ["1. Copies of the payload, one message", "  " + text["copies"][0],
            "  measured (counted on the path taken, by stage; a resent packet is copied again):"]
    crows = []
    for r in ok:
        p = pm[r.label]
        if not p["counted"]:
            crows.append([r.label, "not counted", "(no uroce stats page)"])
            continue
        note = ", ".join("%s %.2f" % (w, v) for w, v in p["stages"]) or "none"
        if p.get("retransmits"):
            note += " (%d packets resent)" % p["retransmits"]
        crows.append([r.label, "%.2f" % p["copies"], note])
    out += table(crows, ["path", "copies", "each copy, per message"])
    for r in ok:
        if pm[r.label].get("path_note"):
            out.append("    %s: %s" % (r.label, pm[r.label]["path_note"]))
    out.append("")

    out += ["2. CPU per message (sender and receiver together)"] + ["  " + x for x in text["cpu"]]
    out.append("  measured (system calls counted where they are made; CPU from each thread's CPU-time clock; "
               "uroce's CPU is its engine's, spinning after traffic included):")
    instr_note = next((pm[r.label]["instr_note"] for r in ok if pm[r.label].get("instr_note")), "")
    rows_cpu = []
    for r in ok:
        p = pm[r.label]
        instr = "%s / %s" % (group(p["instr_app"]), group(p["instr_uroce"])) if "instr_app" in p else "-"
        rows_cpu.append([r.label, "%.2f / %.2f" % (p["sys_app"], p["sys_uroce"]),
                         "%s / %s" % (us(p["cpu_app_ns"], 2), us(p["cpu_uroce_ns"], 2)),
                         "%.2f / %.2f" % (p["vcsw_app"], p["vcsw_uroce"]), instr,
                         ", ".join("%s %.2f" % (k, v) for k, v in p["sys_kinds"]) or "-"])
    out += table(rows_cpu, ["path", "syscalls app / uroce", "CPU app / uroce", "sleeps app / uroce",
                            "instructions app / uroce", "uroce's calls by kind"])
    out.append("    sleeps: voluntary context switches (a wait in the kernel that ended in a wake-up)")
    out.append("    not in uroce's counts: " + UNCOUNTED)
    if instr_note:
        out.append("    instructions: " + instr_note)
    out.append("  each side, per round trip (it sends one message and receives one):")
    srows = []
    for r in ok:
        for role, app, ur, vapp, vur, sapp, sur in pm[r.label]["sides"]:
            srows.append([r.label, role, "%.2f / %.2f" % (sapp, sur), us(app, 2), us(ur, 2),
                          "%.2f / %.2f" % (vapp, vur)])
    out += table(srows, ["path", "side", "syscalls app / uroce", "CPU app", "CPU uroce", "sleeps app / uroce"])
    out.append("")

    out += ["3. End-to-end latency, one message (half a round trip)", "  " + text["latency"][0], "  measured:"]
    out += table([[r.label, us(pm[r.label]["lat_median_ns"]), us(pm[r.label]["lat_p99_ns"])] for r in ok],
                 ["path", "median", "p99"])
    out.append("")

    out += ["4. One-sided READ: what the target runs", "  " + text["read"][0],
            "  measured (the target's application blocks in read() on a side channel meanwhile; TCP's answers each "
            "request with send; the initiator waits for each READ before the next):"]
    rrows = []
    for r in ok:
        p = pr[r.label]
        share = "%.2f %%" % (100.0 * p["target_app_ns"] / p["target_uroce_ns"]) if p["target_uroce_ns"] else "-"
        rrows.append([r.label, us(p["target_app_ns"], 3), "%.4f" % p["target_app_sys"], us(p["target_uroce_ns"], 2),
                      share, "%s / %s" % (us(p["initiator_app_ns"], 2), us(p["initiator_uroce_ns"], 2)),
                      us(p["lat_median_ns"]), us(p["lat_p99_ns"])])
    out += table(rrows, ["path", "target app CPU / READ", "target app syscalls / READ",
                         "target uroce CPU / READ (a NIC's)", "app / uroce", "initiator CPU app / uroce",
                         "READ latency median", "p99"])
    out.append("")
    out += ["5. What the measurement says about the model"]
    for x in conclusions(m, ok, pm, pr):
        out += textwrap.wrap(x, width=110, initial_indent="  ", subsequent_indent="    ")
    return out


def conclusions(m, ok, pm, pr):
    """Statements computed from this run's figures."""
    lines = []
    tcp = [r for r in ok if r.transport == "tcp"]
    ur = [r for r in ok if r.transport == "verbs" and pm[r.label]["counted"]]
    if not ur:
        return ["no uroce row was measured"]
    for r in ur:
        p, q = pm[r.label], pr[r.label]
        where = ("%.0f %% of the packets received on the engine's thread, the rest inside the application's polls"
                 % (100.0 * p["rx_by_engine"]) if p["rx_by_engine"] is not None else "no packet received")
        lines.append("%s: %.2f copies a message (model: a NIC 0, TCP 3), every one made by uroce's code, none by "
                     "the application's (%s); %.2f system calls on the application's threads and %.2f on the "
                     "engine's; %s of the application's CPU and %s of uroce's a message (the model's RDMA: %s); "
                     "a READ's target application ran %s (%.2f %% of its engine's %s)."
                     % (r.label, p["copies"], where, p["sys_app"], p["sys_uroce"], us(p["cpu_app_ns"], 2),
                        us(p["cpu_uroce_ns"], 2), us(m["rdma_cpu_ns"], 2), us(q["target_app_ns"], 3),
                        100.0 * q["target_app_ns"] / q["target_uroce_ns"] if q["target_uroce_ns"] else 0.0,
                        us(q["target_uroce_ns"], 2)))
    for t in tcp:
        tp, tq = pm[t.label], pr[t.label]
        lines.append("%s: %.2f copies, %.2f system calls and %s of CPU a message; each READ-like request cost the "
                     "target's application %s and %.2f system calls." % (t.label, tp["copies"], tp["sys_app"],
                                                                         us(tp["cpu_app_ns"], 2),
                                                                         us(tq["target_app_ns"], 2),
                                                                         tq["target_app_sys"]))
    holds = all(100.0 * pr[r.label]["target_app_ns"] <= pr[r.label]["target_uroce_ns"] for r in ur)
    lines.append("Holds for a software NIC: %s the target application's CPU for a one-sided READ is %s 1 %% of what "
                 "its engine spends (the application runs nothing; the engine does the NIC's work)."
                 % ("yes:" if holds else "NOT in every row:", "within" if holds else "not always within"))
    lines.append("Moves from the NIC into the host's CPUs: the copies (a NIC's DMA makes them without a CPU) and "
                 "the protocol work, made by uroce's code on its engine's thread or inside the application's "
                 "verbs calls (the share above); uroce's CPU a message is what the model counts as the NIC's, 0 "
                 "on a host CPU.")
    for r in ur:
        # beside TCP on the same path (one host, or between the namespaces), waiting the same way
        same = [t for t in tcp if t.wait == r.wait and (t.ns is None) == (r.ns is None)]
        if not same:
            continue
        t, p = pm[same[0].label], pm[r.label]
        fewer = "fewer" if p["sys_app"] < t["sys_app"] else "not fewer"
        lines.append("%s beside %s: %s system calls on the application's threads (%.2f against %.2f a message); "
                     "application CPU %.2fx TCP's, all CPU (uroce's included) %.2fx, sleeps %.2f against %.2f, "
                     "latency %.2fx."
                     % (r.label, same[0].label, fewer, p["sys_app"], t["sys_app"], p["cpu_app_ns"] / t["cpu_app_ns"],
                        (p["cpu_app_ns"] + p["cpu_uroce_ns"]) / t["cpu_app_ns"], p["vcsw_app"] + p["vcsw_uroce"],
                        t["vcsw_app"], p["lat_median_ns"] / t["lat_median_ns"]))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--iters", type=int, default=2000, help="ping-pongs a row")
    ap.add_argument("--reads", type=int, default=10000, help="READs a row")
    ap.add_argument("--wait", choices=["block", "spin", "both"], default="both")
    ap.add_argument("--model-only", action="store_true", help="print the model's figures only")
    ap.add_argument("--json", help="also write every side's figures to FILE")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    ap.add_argument("--no-namespaces", action="store_true", help="skip the rows between two namespaces (root)")
    a = ap.parse_args()
    m = model(a.size)
    if a.model_only:
        t = model_text(m)
        print("\n".join(t["intro"] + t["copies"] + t["cpu"] + t["latency"] + t["read"]))
        return 0
    waits = ["block", "spin"] if a.wait == "both" else [a.wait]
    rows = []
    for w in waits:
        rows += [Row("TCP, loopback (%s)" % w, "tcp", wait=w),
                 Row("uroce, rings (%s)" % w, "verbs", wait=w),
                 Row("uroce, loopback UDP (%s)" % w, "verbs", env={"UROCE_SHM": "0"}, wait=w)]
    t0 = time.monotonic()
    for r in rows:
        run_row(r, a)
    ns_rows, ns = [], None
    if a.no_namespaces:
        pass
    elif os.geteuid() != 0:
        print("(the rows between two namespaces need root: skipped)")
    else:
        try:
            ns = B.ns_setup(1500, prefix="urcosts", veth="urc")
        except (RuntimeError, OSError) as e:
            print("(namespaces: %s: skipped)" % e)
        if ns:
            try:
                for w in waits:
                    ns_rows += [Row("TCP, two namespaces (%s)" % w, "tcp", ns=ns, wait=w),
                                Row("uroce, two namespaces (%s)" % w, "verbs", ns=ns, wait=w)]
                for r in ns_rows:
                    run_row(r, a)
            finally:
                B.ns_teardown(ns[0], ns[1])
    rows += ns_rows
    print("\n".join(report(m, rows)))
    print("\n(%d rows, %.1f s; %d ping-pongs and %d READs of %s bytes a row%s)"
          % (len(rows), time.monotonic() - t0, a.iters, a.reads, group(a.size),
             "; veth MTU 1500 between namespaces" if ns_rows else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": m, "rows": [{"label": r.label, "transport": r.transport, "wait": r.wait,
                                              "error": r.error,
                                              "sides": {"%s_%s" % k: v for k, v in r.phases.items()}}
                                             for r in rows]}, f, indent=1)
    return 0 if all(not r.error for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
