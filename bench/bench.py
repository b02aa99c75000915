#!/usr/bin/env python3
"""uroce benchmark: uroce (perftest through `uroce run`) against loopback TCP,
plain UDP and a memcpy bound, in one run on one machine.

Run it through bench/run.sh (which builds first).  Every figure printed or
written comes from this run; nothing is hard-coded.  Each measurement is
repeated --reps times (interleaved: repetition is the outer loop) and the
median is reported.  A tool that fails or hangs is recorded as failed, with
the reason, and the run goes on.

CPU seconds per GB: user+system CPU of both processes (server and client),
from wait4()'s rusage of each (the whole process lifetime, engine threads
included; for qperf's server, the CPU of the forked child that served the
test), divided by the bytes moved (1 GB = 1e9 bytes).
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time

SIZES = [2, 64, 4096, 65536, 1048576]
CLK_TCK = os.sysconf("SC_CLK_TCK")

# ----------------------------------------------------------------- metrics --

BW_METRICS = [
    # id, label
    ("uroce_write_bw", "uroce RDMA WRITE (ib_write_bw)"),
    ("uroce_read_bw", "uroce RDMA READ (ib_read_bw)"),
    ("uroce_send_bw", "uroce SEND (ib_send_bw)"),
    ("uroce_write_bw_udp", "uroce RDMA WRITE by loopback UDP (UROCE_SHM=0)"),
    ("tcp_bw", "TCP (qperf tcp_bw)"),
    ("tcp_stream", "TCP stream (bench, blocking)"),
    ("udp_stream", "UDP stream (bench, blocking)"),
    ("memcpy_warm", "memcpy, warm buffer"),
    ("memcpy_cold", "memcpy, cold (> LLC)"),
]
LAT_METRICS = [
    ("uroce_send_lat", "uroce SEND (ib_send_lat)"),
    ("uroce_write_lat", "uroce WRITE (ib_write_lat)"),
    ("uroce_read_lat", "uroce READ (ib_read_lat, RTT)"),
    ("uroce_send_lat_udp", "uroce SEND by loopback UDP (UROCE_SHM=0)"),
    ("uroce_write_lat_udp", "uroce WRITE by loopback UDP (UROCE_SHM=0)"),
    ("uroce_read_lat_udp", "uroce READ by loopback UDP (UROCE_SHM=0, RTT)"),
    ("qperf_tcp_lat", "TCP blocking (qperf tcp_lat, mean)"),
    ("tcp_pp_blocking", "TCP blocking ping-pong (bench)"),
    ("tcp_pp_busy", "TCP busy-poll ping-pong (bench)"),
    ("udp_pp_blocking", "UDP blocking ping-pong (bench)"),
    ("udp_pp_busy", "UDP busy-poll ping-pong (bench)"),
    ("shm_pp_busy", "shared-memory busy-poll ping-pong (bench, the bound)"),
    ("shm_pp_matched", "shared-memory ping-pong slowed to ib_send_lat's median (the tail floor)"),
    ("memcpy_warm", "memcpy per copy, warm"),
    ("memcpy_cold", "memcpy per copy, cold"),
]
# uroce reaches another uroce process of the host through shared-memory rings;
# the *_udp metrics run the same tools with UROCE_SHM=0 (loopback UDP, the
# path to other hosts, namespaces, rxe and NICs)
PERFTEST_BW = {"uroce_write_bw": "ib_write_bw", "uroce_read_bw": "ib_read_bw", "uroce_send_bw": "ib_send_bw",
               "uroce_write_bw_udp": "ib_write_bw"}
PERFTEST_LAT = {"uroce_send_lat": "ib_send_lat", "uroce_write_lat": "ib_write_lat", "uroce_read_lat": "ib_read_lat",
                "uroce_send_lat_udp": "ib_send_lat", "uroce_write_lat_udp": "ib_write_lat",
                "uroce_read_lat_udp": "ib_read_lat"}
ATOMICS = [("uroce_atomic_fadd", "FETCH_AND_ADD"), ("uroce_atomic_cas", "CMP_AND_SWAP")]

# "one-sided latency by target behaviour" (bench/onesided_lat, issue #14): a
# client times one operation at a time, paced, while the target application
# does each of these; idle first, the baseline of the ratios
ONESIDED_TARGETS = ["idle", "compute", "spin-mem", "poll-compute", "poll-sleep", "poll-spin", "poll-threads",
                    "poll-once-read", "fork-child"]
ONESIDED_TARGETS_QUICK = ["idle", "compute", "poll-compute", "poll-sleep", "poll-once-read"]
ONESIDED_CASES = [("read", 64), ("read", 65536), ("write", 64), ("write", 65536), ("fadd", 8)]
ONESIDED_CASES_QUICK = [("read", 64), ("write", 64), ("fadd", 8)]
ONESIDED_PATHS = [("rings", None), ("udp", "0")]  # path, UROCE_SHM
ONESIDED_OP_LABEL = {"read": "READ", "write": "WRITE", "fadd": "FETCH_AND_ADD"}
# issue #14's acceptance: a target's behaviour costs at most 2x the idle
# target's median, and the p99 stays within 200 us
ONESIDED_MAX_RATIO, ONESIDED_MAX_P99_US = 2.0, 200.0

# "connection setup and block I/O" (issue #15's bench rows): cmtime's steps
# for N rdma_cm connections beside N TCP connect/close (bench/tcp_connect),
# and fio's rdma engine (4 KiB RDMA READs at iodepth 1 and 32; the engine
# allows no random offsets) beside fio's net engine over TCP (pingpong=1: a
# 4 KiB request, its 4 KiB echo: one round trip per I/O, as a READ is)
CMTIME_STEPS = ["create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"]
TCP_CONNECT_STEPS = ["connect", "close"]
FIO_CASES = [("fio_rdma_read_qd1", 1), ("fio_rdma_read_qd32", 32), ("fio_tcp_pingpong_qd1", 1)]

# "between two network namespaces" (issue #17's bench rows, as root): a veth
# pair at each MTU stands in for two hosts; uroce's perftest runs with
# UROCE_ADDR on each side (the UDP path: no rings cross a namespace) beside
# qperf TCP, the bench's UDP stream and ping-pongs between the same two
# namespaces.  Bandwidth runs are perftest's duration mode (-D NS_BW_SECS,
# measured within -f 1 s margins); CPU per GB is sampled from both
# processes' schedstat while the traffic runs.
NS_MTUS = [1500, 9000]
NS_SIZES = [64, 4096, 65536, 1048576]
NS_SIZES_QUICK = [64, 65536]
NS_BW = [("write_bw", "ib_write_bw", [], "uroce WRITE (ib_write_bw)"),
         ("read_bw", "ib_read_bw", [], "uroce READ (ib_read_bw)"),
         ("send_bw", "ib_send_bw", [], "uroce SEND (ib_send_bw)"),
         ("write_bw_q8", "ib_write_bw", ["-q", "8"], "uroce WRITE, 8 QPs (ib_write_bw -q 8)"),
         ("write_bw_2pairs", "ib_write_bw", [], "uroce WRITE, 2 process pairs at once (sum)"),
         ("write_bw_xdp", "ib_write_bw", [], "uroce WRITE by AF_XDP (UROCE_XDP=1)")]
NS_LAT = [("send_lat", "ib_send_lat", "uroce SEND (ib_send_lat)"), ("write_lat", "ib_write_lat", "uroce WRITE (ib_write_lat)"),
          ("read_lat", "ib_read_lat", "uroce READ (ib_read_lat, RTT)"),
          ("send_lat_xdp", "ib_send_lat", "uroce SEND by AF_XDP (ib_send_lat, UROCE_XDP=1)"),
          ("write_lat_xdp", "ib_write_lat", "uroce WRITE by AF_XDP (ib_write_lat, UROCE_XDP=1)"),
          ("read_lat_xdp", "ib_read_lat", "uroce READ by AF_XDP (ib_read_lat, RTT, UROCE_XDP=1)")]
NS_BW_SECS = 3


def fmt_size(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return "%d KiB" % (n >> 10)
    return "%d B" % n


def median(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else None


# ----------------------------------------------------------------- processes --

def ns_setup(mtu, prefix="urbench", veth="urb"):
    """Two namespaces joined by a veth pair at `mtu` (issue #17's stand-in for
    two hosts; bench/costs.py's too, under its own prefix, so that neither
    removes the other's as left behind); (nsA, nsB, addrA, addrB), or raises
    with the failing command's message."""
    tag = "%d-%d" % (os.getpid() % 100000, mtu)
    na, nb = "%s-a-%s" % (prefix, tag), "%s-b-%s" % (prefix, tag)
    va, vb = "%sa%d" % (veth, mtu), "%sb%d" % (veth, mtu)
    net = 30 + NS_MTUS.index(mtu) if mtu in NS_MTUS else 29
    aa, ab = "198.19.%d.1" % net, "198.19.%d.2" % net
    # a bench killed before its teardown left its namespaces behind
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    ns_teardown(*[n for n in listed if n.startswith(prefix + "-")])
    subprocess.run(["ip", "link", "del", va], capture_output=True)
    for cmd in (["ip", "netns", "add", na], ["ip", "netns", "add", nb],
                ["ip", "link", "add", va, "type", "veth", "peer", "name", vb],
                ["ip", "link", "set", va, "netns", na], ["ip", "link", "set", vb, "netns", nb],
                ["ip", "-n", na, "addr", "add", aa + "/24", "dev", va],
                ["ip", "-n", nb, "addr", "add", ab + "/24", "dev", vb],
                ["ip", "-n", na, "link", "set", va, "mtu", str(mtu), "up"],
                ["ip", "-n", nb, "link", "set", vb, "mtu", str(mtu), "up"],
                ["ip", "-n", na, "link", "set", "lo", "up"], ["ip", "-n", nb, "link", "set", "lo", "up"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            ns_teardown(na, nb)
            subprocess.run(["ip", "link", "del", va], capture_output=True)
            raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))
    return na, nb, aa, ab


def ns_teardown(*names):
    for n in names:
        r = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True)
        for pid in r.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def in_ns(ns, addr, argv, env=()):
    return ["ip", "netns", "exec", ns, "env", "UROCE_ADDR=" + addr] + list(env) + argv


def ns_env(name):
    """The metrics named *_xdp run uroce's AF_XDP backend (src/net/xdp.c)."""
    return ["UROCE_XDP=1"] if name.endswith("_xdp") else []


class Proc:
    """A child in its own session; reaped with wait4() to get its CPU time."""

    def __init__(self, argv, logbase, env=None):
        self.argv = argv
        self.out_path = logbase + ".out"
        self.err_path = logbase + ".err"
        self.rc = None
        self.cpu = None
        self.t0 = time.monotonic()
        self.wall = None
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                      start_new_session=True, env=env)
        self.pid = self.p.pid

    def _reaped(self, status, ru):
        self.rc = os.waitstatus_to_exitcode(status)
        self.cpu = ru.ru_utime + ru.ru_stime
        self.wall = time.monotonic() - self.t0
        self.p.returncode = self.rc

    def poll(self):
        if self.rc is not None:
            return True
        try:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            self.rc = -999
            return True
        if pid == 0:
            return False
        self._reaped(status, ru)
        return True

    def wait(self, timeout):
        end = time.monotonic() + timeout
        delay = 0.002
        while not self.poll():
            if time.monotonic() > end:
                return False
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)
        return True

    def kill(self):
        if self.poll():
            return
        for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass
            if self.wait(grace):
                return

    @staticmethod
    def _read(path):
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def out(self):
        return self._read(self.out_path)

    def err(self):
        return self._read(self.err_path)

    def tail(self, n=3):
        lines = [l.strip() for l in (self.err() + "\n" + self.out()).splitlines() if l.strip()]
        return " | ".join(lines[-n:])[-300:]


def listening_tcp(port):
    hexport = ":%04X" % port
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if len(parts) > 3 and parts[1].endswith(hexport) and parts[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def listening_tcp_in(pid, port):
    """listening_tcp in the network namespace of process pid."""
    hexport = ":%04X" % port
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if len(parts) > 3 and parts[1].endswith(hexport) and parts[3] == "0A":
                        return True
        except (OSError, StopIteration):
            pass
    return False


def proc_stat_ticks(pid, children=False):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    # fields[0] is state (field 3); utime is field 14 -> index 11
    t = int(fields[11]) + int(fields[12])
    if children:
        t += int(fields[13]) + int(fields[14])
    return t


def proc_run_ns(pid):
    """CPU time of all threads in ns from schedstat (precise), or None."""
    total = 0
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def has_children(pid):
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                if f.read().strip():
                    return True
    except OSError:
        return False
    return False


# ------------------------------------------------------------------ bench --

class Bench:
    def __init__(self, args):
        self.args = args
        self.root = os.path.abspath(args.root)
        self.bindir = os.path.join(self.root, "build", "bin")
        self.uroce = os.path.join(self.bindir, "uroce")
        self.pp_bin = os.path.join(self.bindir, "tcp_pingpong")
        self.shm_pp_bin = os.path.join(self.bindir, "shm_pingpong")
        self.stalls_bin = os.path.join(self.bindir, "cpu_stalls")
        self.memcpy = os.path.join(self.bindir, "memcpy_bw")
        self.onesided_bin = os.path.join(self.bindir, "onesided_lat")
        self.out = os.path.abspath(args.out)
        self.logdir = os.path.join(self.out, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        for f in os.listdir(self.logdir):
            if f.endswith((".out", ".err")):
                os.unlink(os.path.join(self.logdir, f))
        self.quick = args.quick
        self.reps = 1 if args.quick else args.reps
        self.sizes = args.sizes
        self.t_start = time.monotonic()
        self.budget = args.budget if args.budget else (100.0 if self.quick else 800.0)
        self.used_ports = set()
        self.runs = []
        self.est = {}  # (metric, size) -> seconds per iteration
        self.base = {}  # (perftest tool, size) -> (client CPU s, server CPU s) of a -n 5 run
        self.nlog = 0
        self.qperf = None
        self.qperf_error = None
        if self.quick:
            self.cfg = dict(bw_target_s=None, lat_target_s=None, pp_s=0.2, stream_s=0.25, qperf_s=1,
                            memcpy_s=0.05, memcpy_pool_mb=256, idle_s=2.0)
        else:
            self.cfg = dict(bw_target_s=0.8, lat_target_s=0.5, pp_s=0.6, stream_s=0.8, qperf_s=1,
                            memcpy_s=0.25, memcpy_pool_mb=0, idle_s=5.0)

    # -- helpers --------------------------------------------------------
    def elapsed(self):
        return time.monotonic() - self.t_start

    def remaining(self):
        return self.budget - self.elapsed()

    def log(self, msg):
        print("[%6.1fs] %s" % (self.elapsed(), msg), file=sys.stderr, flush=True)

    def logbase(self, tag):
        self.nlog += 1
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", tag)
        return os.path.join(self.logdir, "%04d_%s" % (self.nlog, safe))

    def free_port(self):
        for _ in range(200):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("0.0.0.0", 0))
            port = s.getsockname()[1]
            s.close()
            if port in self.used_ports:
                continue
            try:
                u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                u.bind(("0.0.0.0", port))
                u.close()
            except OSError:
                continue
            self.used_ports.add(port)
            return port
        raise RuntimeError("no free port")

    def record(self, metric, size, rep, ok, values=None, reason=None, **extra):
        r = dict(metric=metric, size=size, rep=rep, ok=ok, values=values or {}, reason=reason)
        r.update(extra)
        self.runs.append(r)
        if ok:
            shown = ", ".join("%s=%s" % (k, ("%.4g" % v) if isinstance(v, float) else v)
                              for k, v in (values or {}).items() if k in
                              ("bw_GBps", "lat_median_us", "lat_p99_us", "lat_mean_us", "cpu_s_per_GB",
                               "ops_per_s", "loss_pct", "pct_core"))
            self.log("%-18s %8s rep %-5s ok   %s" % (metric, fmt_size(size) if size else "-", rep, shown))
        else:
            self.log("%-18s %8s rep %-5s FAIL %s" % (metric, fmt_size(size) if size else "-", rep, reason))
        return r

    def skip_if_out_of_time(self, metric, size, rep, need=3.0):
        if self.remaining() < need:
            self.record(metric, size, rep, False, reason="skipped: time budget (%.0f s) used up" % self.budget,
                        skipped=True)
            return True
        return False

    def run_pair(self, tag, server_argv, client_argv, ready, client_timeout, server_grace=10.0, env=None):
        """Start the server, wait until ready(server) is true, run the client.
        Returns (ok, reason, server, client)."""
        client_timeout = max(3.0, min(client_timeout, self.remaining() + 15.0))
        srv = Proc(server_argv, self.logbase(tag + "_server"), env)
        t_end = time.monotonic() + 15.0
        while not ready(srv):
            if srv.poll():
                return False, "server exited before it was ready (rc %s): %s" % (srv.rc, srv.tail()), srv, None
            if time.monotonic() > t_end:
                srv.kill()
                return False, "server not ready after 15 s: %s" % srv.tail(), srv, None
            time.sleep(0.01)
        cli = Proc(client_argv, self.logbase(tag + "_client"), env)
        if not cli.wait(client_timeout):
            cli.kill()
            srv.kill()
            return False, "client hung: killed after %.0f s (%s)" % (client_timeout, cli.tail()), srv, cli
        if not srv.wait(server_grace):
            srv.kill()
            if cli.rc == 0:
                return False, "server did not exit %.0f s after the client (killed): %s" % (server_grace, srv.tail()), srv, cli
        if cli.rc != 0:
            return False, "client rc %s: %s" % (cli.rc, cli.tail()), srv, cli
        if srv.rc != 0:
            return False, "server rc %s: %s" % (srv.rc, srv.tail()), srv, cli
        return True, None, srv, cli

    # -- perftest -------------------------------------------------------
    def perftest(self, tool, opts, tag, timeout):
        port = self.free_port()
        base = [self.uroce, "run", "--", tool, "-p", str(port), "-F"] + opts
        env, prefix = None, ""
        if "_udp_" in tag:  # the metric's name ends in _udp
            env, prefix = dict(os.environ, UROCE_SHM="0"), "UROCE_SHM=0 "
        ok, reason, srv, cli = self.run_pair(tag, base, base + ["127.0.0.1"], lambda s: listening_tcp(port), timeout,
                                             env=env)
        return ok, reason, srv, cli, prefix + " ".join(base + ["127.0.0.1"])

    @staticmethod
    def parse_perftest(text, size):
        lines = text.splitlines()
        for i, l in enumerate(lines):
            if "#bytes" in l:
                header = l
                for l2 in lines[i + 1:]:
                    f = l2.split()
                    if len(f) >= 5 and f[0] == str(size):
                        try:
                            return header, [float(x) for x in f]
                        except ValueError:
                            continue
        return None, None

    def uroce_bw(self, metric, size, rep):
        tool = PERFTEST_BW[metric]
        if self.skip_if_out_of_time(metric, size, rep):
            return
        key = (metric, size)
        if self.quick or key not in self.est:
            n = max(5, min(5000, (128 << 20) // size))  # <= 5000 messages, <= 128 MiB
            probe = not self.quick
        else:
            n = int(self.cfg["bw_target_s"] / self.est[key])
            n = max(5, min(2000000, n))
            probe = False
        if probe:  # calibration run (not counted): sets the iteration count
            self._uroce_bw_once(metric, tool, size, n, "probe")
            if key not in self.est:
                self.record(metric, size, rep, False, reason="calibration run failed; see the probe record")
                return
            n = max(5, min(2000000, int(self.cfg["bw_target_s"] / self.est[key])))
        self._uroce_bw_once(metric, tool, size, n, rep)

    def perftest_base(self, metric, tool, size):
        """CPU of a -n 5 run of the same tool and size: perftest's fixed costs
        (device and QP set-up, its TSC calibration loop before the report,
        teardown), subtracted from the measured runs' CPU."""
        key = (tool, size)
        if key not in self.base:
            self.base[key] = None
            ok, reason, srv, cli, cmd = self.perftest(tool, ["-s", str(size), "-n", "5", "--report_gbits"],
                                                      "%s_%d_base" % (metric, size), 30)
            if ok:
                self.base[key] = (cli.cpu or 0.0, srv.cpu or 0.0)
                self.record(metric, size, "base", True, dict(cpu_client_s=cli.cpu, cpu_server_s=srv.cpu), cmd=cmd)
            else:
                self.record(metric, size, "base", False, reason=reason, cmd=cmd)
        return self.base[key]

    def _uroce_bw_once(self, metric, tool, size, n, rep):
        expect = self.est.get((metric, size), 0.002) * n
        ok, reason, srv, cli, cmd = self.perftest(tool, ["-s", str(size), "-n", str(n), "--report_gbits"],
                                                  "%s_%d_%s" % (metric, size, rep), 20 + 5 * expect)
        if not ok:
            return self.record(metric, size, rep, False, reason=reason, cmd=cmd)
        header, f = self.parse_perftest(cli.out(), size)
        if not f:
            return self.record(metric, size, rep, False, reason="no result line in output: " + cli.tail(), cmd=cmd)
        iters, avg, rate = f[1], f[3], f[4]
        if "Gb/sec" in header:
            bps = avg * 1e9 / 8
        else:
            bps = avg * (1 << 20)
        gb = iters * size / 1e9
        cpu = (cli.cpu or 0) + (srv.cpu or 0)
        if rate > 0:
            self.est[(metric, size)] = 1.0 / (rate * 1e6)
        base = self.perftest_base(metric, tool, size) if rep != "probe" else None
        net = cpu - sum(base) if base else None
        vals = dict(bw_GBps=bps / 1e9, msg_rate=rate * 1e6, iters=int(iters), bytes=iters * size,
                    cpu_client_s=cli.cpu, cpu_server_s=srv.cpu, cpu_raw_s_per_GB=cpu / gb if gb else None,
                    cpu_base_s=sum(base) if base else None,
                    cpu_s_per_GB=(net / gb if net > 0 else None) if (base and gb) else None,
                    wall_client_s=cli.wall)
        return self.record(metric, size, rep, True, vals, cmd=cmd)

    def uroce_lat(self, metric, size, rep):
        tool = PERFTEST_LAT[metric]
        if self.skip_if_out_of_time(metric, size, rep):
            return
        key = (metric, size)
        probe_n = 300 if size <= 4096 else (100 if size <= 65536 else 30)
        if self.quick or key not in self.est:
            n, probe = probe_n, not self.quick
        else:
            n, probe = max(200, min(20000, int(self.cfg["lat_target_s"] / self.est[key]))), False
        if probe:
            self._uroce_lat_once(metric, tool, size, probe_n, "probe")
            if key not in self.est:
                self.record(metric, size, rep, False, reason="calibration run failed; see the probe record")
                return
            n = max(200, min(20000, int(self.cfg["lat_target_s"] / self.est[key])))
        self._uroce_lat_once(metric, tool, size, n, rep)

    def _uroce_lat_once(self, metric, tool, size, n, rep):
        expect = self.est.get((metric, size), 0.005) * n
        ok, reason, srv, cli, cmd = self.perftest(tool, ["-s", str(size), "-n", str(n)],
                                                  "%s_%d_%s" % (metric, size, rep), 20 + 5 * expect)
        if not ok:
            return self.record(metric, size, rep, False, reason=reason, cmd=cmd)
        header, f = self.parse_perftest(cli.out(), size)
        if not f or len(f) < 8:
            return self.record(metric, size, rep, False, reason="no result line in output: " + cli.tail(), cmd=cmd)
        # bytes iters t_min t_max t_typical t_avg t_stdev 99% 99.9%
        per_iter = f[5] * 1e-6 * (1 if metric.startswith("uroce_read_lat") else 2)
        self.est[(metric, size)] = per_iter
        vals = dict(lat_median_us=f[4], lat_p99_us=f[7], lat_mean_us=f[5], lat_min_us=f[2], lat_max_us=f[3],
                    lat_p999_us=f[8] if len(f) > 8 else None, iters=int(f[1]),
                    cpu_client_s=cli.cpu, cpu_server_s=srv.cpu)
        return self.record(metric, size, rep, True, vals, cmd=cmd)

    def uroce_atomic(self, metric, op, rep):
        if self.skip_if_out_of_time(metric, 8, rep):
            return
        key = (metric, 8)
        if self.quick or key not in self.est:
            n, probe = 2000, not self.quick
        else:
            n, probe = max(100, min(2000000, int(self.cfg["bw_target_s"] / self.est[key]))), False
        if probe:
            self._uroce_atomic_once(metric, op, n, "probe")
            if key not in self.est:
                self.record(metric, 8, rep, False, reason="calibration run failed; see the probe record")
                return
            n = max(100, min(2000000, int(self.cfg["bw_target_s"] / self.est[key])))
        self._uroce_atomic_once(metric, op, n, rep)

    def _uroce_atomic_once(self, metric, op, n, rep):
        expect = self.est.get((metric, 8), 0.0001) * n
        ok, reason, srv, cli, cmd = self.perftest("ib_atomic_bw", ["-A", op, "-n", str(n)],
                                                  "%s_%s" % (metric, rep), 20 + 5 * expect)
        if not ok:
            return self.record(metric, 8, rep, False, reason=reason, cmd=cmd)
        header, f = self.parse_perftest(cli.out(), 8)
        if not f:
            return self.record(metric, 8, rep, False, reason="no result line in output: " + cli.tail(), cmd=cmd)
        rate = f[4] * 1e6
        if rate > 0:
            self.est[(metric, 8)] = 1.0 / rate
        vals = dict(ops_per_s=rate, iters=int(f[1]), cpu_client_s=cli.cpu, cpu_server_s=srv.cpu,
                    cpu_us_per_op=((cli.cpu or 0) + (srv.cpu or 0)) / f[1] * 1e6 if f[1] else None)
        return self.record(metric, 8, rep, True, vals, cmd=cmd)

    # -- qperf ----------------------------------------------------------
    def qperf_server(self):
        if self.qperf and not self.qperf[0].poll():
            return self.qperf
        port = self.free_port()
        try:
            p = Proc(["qperf", "-lp", str(port)], self.logbase("qperf_daemon"))
        except OSError as e:
            self.qperf_error = "cannot start qperf -lp %d: %s" % (port, e)
            return None
        end = time.monotonic() + 10
        while not listening_tcp(port):
            if p.poll() or time.monotonic() > end:
                p.kill()
                self.qperf = None
                self.qperf_error = "qperf -lp %d did not listen (rc %s): %s" % (port, p.rc, p.tail())
                return None
            time.sleep(0.01)
        self.qperf = (p, port)
        return self.qperf

    def qperf_test(self, metric, test, size, rep):
        if self.skip_if_out_of_time(metric, size, rep):
            return
        q = self.qperf_server()
        if not q:
            return self.record(metric, size, rep, False, reason=self.qperf_error, cmd="qperf -lp PORT")
        daemon, port = q
        t = str(int(self.cfg["qperf_s"]))  # qperf -t takes whole seconds (0 = forever)
        argv = ["qperf", "-lp", str(port), "-t", t, "-m", str(size), "-vvs", "-vvt", "127.0.0.1", test]
        cmd = " ".join(argv)
        try:
            before = proc_stat_ticks(daemon.pid, children=True)
        except OSError:
            before = None
        cli = Proc(argv, self.logbase("%s_%d_%s" % (metric, size, rep)))
        if not cli.wait(int(t) + 20):
            cli.kill()
            daemon.kill()
            self.qperf = None
            return self.record(metric, size, rep, False, reason="qperf client hung (killed)", cmd=cmd)
        end = time.monotonic() + 3
        while has_children(daemon.pid) and time.monotonic() < end:
            time.sleep(0.01)
        try:
            after = proc_stat_ticks(daemon.pid, children=True)
        except OSError:
            after = None
        out = cli.out()
        if cli.rc != 0:
            return self.record(metric, size, rep, False, reason="qperf rc %s: %s" % (cli.rc, cli.tail()), cmd=cmd)
        kv = {}
        for line in out.splitlines():
            m = re.match(r"\s*(\w+)\s*=\s*([0-9.,]+)\s*(\S*)", line)
            if m:
                kv[m.group(1)] = (float(m.group(2).replace(",", "")), m.group(3))
        srv_cpu = (after - before) / CLK_TCK if before is not None and after is not None else None
        if test == "tcp_bw":
            if "bw" not in kv:
                return self.record(metric, size, rep, False, reason="no bw in qperf output: " + cli.tail(), cmd=cmd)
            v, unit = kv["bw"]
            mult = {"GB/sec": 1e9, "MB/sec": 1e6, "KB/sec": 1e3, "bytes/sec": 1, "B/sec": 1}.get(unit)
            if mult is None:
                return self.record(metric, size, rep, False, reason="unknown qperf unit %r" % unit, cmd=cmd)
            bps = v * mult
            msgs = kv.get("rem_recv_msgs", kv.get("loc_send_msgs", (None, None)))[0]
            secs = kv.get("loc_real_time", (float(t), None))[0]
            nbytes = msgs * size if msgs else bps * secs
            cpu = (cli.cpu or 0) + (srv_cpu or 0)
            vals = dict(bw_GBps=bps / 1e9, bytes=nbytes, cpu_client_s=cli.cpu, cpu_server_s=srv_cpu,
                        cpu_s_per_GB=cpu / (nbytes / 1e9) if nbytes else None,
                        qperf_send_cost=kv.get("send_cost", (None,))[0], qperf_recv_cost=kv.get("recv_cost", (None,))[0])
            return self.record(metric, size, rep, True, vals, cmd=cmd)
        else:
            if "latency" not in kv:
                return self.record(metric, size, rep, False, reason="no latency in qperf output: " + cli.tail(), cmd=cmd)
            v, unit = kv["latency"]
            mult = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}.get(unit)
            if mult is None:
                return self.record(metric, size, rep, False, reason="unknown qperf unit %r" % unit, cmd=cmd)
            vals = dict(lat_mean_us=v * mult, cpu_client_s=cli.cpu, cpu_server_s=srv_cpu)
            return self.record(metric, size, rep, True, vals, cmd=cmd)

    # -- bench programs -------------------------------------------------
    @staticmethod
    def parse_result(text, **match):
        for line in text.splitlines():
            if not line.startswith("RESULT "):
                continue
            kv = {}
            for tok in line.split()[1:]:
                if "=" in tok:
                    k, v = tok.split("=", 1)
                    try:
                        kv[k] = float(v)
                    except ValueError:
                        kv[k] = v
            if all(kv.get(k) == v for k, v in match.items()):
                return kv
        return None

    def pingpong(self, metric, size, rep):
        if self.skip_if_out_of_time(metric, size, rep):
            return
        udp = metric.startswith("udp")
        blocking = metric.endswith("blocking")
        port = self.free_port()
        srv = [self.pp_bin, "-p", str(port)] + (["--udp"] if udp else [])
        cli = srv + ["-s", str(size), "-n", "1000000", "-w", "100", "-D", str(self.cfg["pp_s"])] + \
            (["--blocking"] if blocking else []) + ["127.0.0.1"]
        ok, reason, s, c = self.run_pair("%s_%d_%s" % (metric, size, rep), srv, cli,
                                         lambda p: "READY" in p.out(), 30 + 2 * self.cfg["pp_s"])
        cmd = " ".join(cli)
        if not ok:
            return self.record(metric, size, rep, False, reason=reason, cmd=cmd)
        kv = self.parse_result(c.out(), mode="pingpong")
        if not kv or not kv.get("iters"):
            return self.record(metric, size, rep, False, reason="no samples: " + c.tail(), cmd=cmd)
        vals = {k: kv.get(k) for k in ("lat_median_us", "lat_p99_us", "lat_mean_us", "lat_min_us", "lat_max_us",
                                       "iters", "lost")}
        vals.update(cpu_client_s=c.cpu, cpu_server_s=s.cpu)
        return self.record(metric, size, rep, True, vals, cmd=cmd)

    def shm_pingpong(self, metric, size, rep, work_ns=0):
        if self.skip_if_out_of_time(metric, size, rep):
            return
        argv = [self.shm_pp_bin, "-s", str(size), "-D", str(self.cfg["pp_s"]), "-w", "100"]
        if work_ns:
            argv += ["-W", str(work_ns)]
        p = Proc(argv, self.logbase("%s_%d_%s" % (metric, size, rep)))
        cmd = " ".join(argv)
        if not p.wait(30 + 2 * self.cfg["pp_s"]):
            p.kill()
            return self.record(metric, size, rep, False, reason="hung: " + p.tail(), cmd=cmd)
        kv = self.parse_result(p.out(), mode="pingpong")
        if p.rc != 0 or not kv or not kv.get("iters"):
            return self.record(metric, size, rep, False, reason="rc %s: %s" % (p.rc, p.tail()), cmd=cmd)
        vals = {k: kv.get(k) for k in ("lat_median_us", "lat_p99_us", "lat_mean_us", "lat_min_us", "lat_max_us",
                                       "iters")}
        vals.update(cpu_client_s=p.cpu, work_ns=work_ns)
        return self.record(metric, size, rep, True, vals, cmd=cmd)

    def this_rep(self, metric, size, rep, key):
        for r in self.runs:
            if r["metric"] == metric and r["size"] == size and r["rep"] == rep and r["ok"]:
                return r["values"].get(key)
        return None

    def shm_pingpong_matched(self, size, rep):
        """The tail floor: the bare shared-memory ping-pong with busy work on
        every hop, as much as makes its median ib_send_lat's of this
        repetition.  Stalls of the CPUs (cpu_stalls) hit it as they hit
        uroce; its p99/median is what any transport of that median gets
        here."""
        med, bare = self.this_rep("uroce_send_lat", size, rep, "lat_median_us"), \
            self.this_rep("shm_pp_busy", size, rep, "lat_median_us")
        if med is None or bare is None:
            return self.record("shm_pp_matched", size, rep, False, reason="no ib_send_lat or shm_pp_busy median")
        return self.shm_pingpong("shm_pp_matched", size, rep, max(0, int(round((med - bare) * 1000))))

    def cpu_stalls(self, rep):
        if self.skip_if_out_of_time("cpu_stalls", 0, rep):
            return
        argv = [self.stalls_bin, "-D", "0.5" if self.quick else "1"]
        p = Proc(argv, self.logbase("cpu_stalls_%s" % rep))
        cmd = " ".join(argv)
        if not p.wait(30) or p.rc != 0:
            p.kill()
            return self.record("cpu_stalls", 0, rep, False, reason="rc %s: %s" % (p.rc, p.tail()), cmd=cmd)
        kv = self.parse_result(p.out(), mode="stalls")
        if not kv or kv.get("per_s") is None:
            return self.record("cpu_stalls", 0, rep, False, reason="no result: " + p.tail(), cmd=cmd)
        return self.record("cpu_stalls", 0, rep, True, {k: kv.get(k) for k in
                                                         ("cpus", "per_s", "lost_pct", "median_us", "p99_us",
                                                          "max_us")}, cmd=cmd)

    def stream(self, metric, size, rep):
        if self.skip_if_out_of_time(metric, size, rep):
            return
        udp = metric.startswith("udp")
        port = self.free_port()
        srv = [self.pp_bin, "-p", str(port)] + (["--udp"] if udp else [])
        cli = srv + ["-s", str(size), "--stream", "--blocking", "-D", str(self.cfg["stream_s"]), "127.0.0.1"]
        ok, reason, s, c = self.run_pair("%s_%d_%s" % (metric, size, rep), srv, cli,
                                         lambda p: "READY" in p.out(), 30 + 2 * self.cfg["stream_s"])
        cmd = " ".join(cli)
        if not ok:
            return self.record(metric, size, rep, False, reason=reason, cmd=cmd)
        rx = self.parse_result(s.out(), role="recv")
        tx = self.parse_result(c.out(), role="send")
        if not rx or not rx.get("bytes"):
            return self.record(metric, size, rep, False, reason="receiver got nothing: " + s.tail(), cmd=cmd)
        gb = rx["bytes"] / 1e9
        cpu = (c.cpu or 0) + (s.cpu or 0)
        vals = dict(bw_GBps=rx["bw_GBps"], bytes=rx["bytes"], send_GBps=tx.get("bw_GBps") if tx else None,
                    loss_pct=rx.get("loss_pct", 0.0) if udp else None,
                    cpu_client_s=c.cpu, cpu_server_s=s.cpu, cpu_s_per_GB=cpu / gb if gb else None)
        return self.record(metric, size, rep, True, vals, cmd=cmd)

    def memcpy_run(self, rep):
        if self.skip_if_out_of_time("memcpy_warm", 0, rep, need=5.0):
            return
        argv = [self.memcpy, "-s", ",".join(str(s) for s in self.sizes), "-t", str(self.cfg["memcpy_s"])]
        if self.cfg["memcpy_pool_mb"]:
            argv += ["--pool-mb", str(self.cfg["memcpy_pool_mb"])]
        p = Proc(argv, self.logbase("memcpy_%s" % rep))
        cmd = " ".join(argv)
        if not p.wait(60) or p.rc != 0:
            p.kill()
            for s in self.sizes:
                for kind in ("warm", "cold"):
                    self.record("memcpy_" + kind, s, rep, False, reason="memcpy_bw failed: rc %s %s" % (p.rc, p.tail()),
                                cmd=cmd)
            return
        text = p.out()
        m = re.search(r"INFO l3_bytes=(\d+) pool_bytes=(\d+)", text)
        for s in self.sizes:
            for kind in ("warm", "cold"):
                kv = self.parse_result(text, kind=kind, size=float(s))
                if not kv or "bw_GBps" not in kv:
                    self.record("memcpy_" + kind, s, rep, False, reason="no result: " + (kv or {}).get("error", "?"),
                                cmd=cmd)
                    continue
                vals = dict(bw_GBps=kv["bw_GBps"], cpu_s_per_GB=kv["cpu_s_per_GB"],
                            lat_median_us=kv["copy_ns_median"] / 1e3, lat_p99_us=kv["copy_ns_p99"] / 1e3,
                            l3_bytes=int(m.group(1)) if m else None, pool_bytes=int(m.group(2)) if m else None)
                self.record("memcpy_" + kind, s, rep, True, vals, cmd=cmd)

    # -- one-sided latency by target behaviour ----------------------------
    @staticmethod
    def onesided_metric(path, op, target):
        return "onesided_%s_%s_%s" % (path, op, target)

    def onesided(self, path, shm, op, size, target, iters, end):
        """One onesided_lat pair: the client's median, p99 and max of `iters`
        operations paced 100 us apart, the target doing `target`."""
        metric = self.onesided_metric(path, op, target)
        if time.monotonic() > end:
            return self.record(metric, size, 0, False, skipped=True,
                               reason="skipped: the section's time (%.0f s) used up" % self.args.onesided_budget)
        port = self.free_port()
        base = [self.uroce, "run", "--", self.onesided_bin, "--port=%d" % port]
        srv = base + ["--target=" + target]
        cli = base + ["--op=" + op, "--size=%d" % size, "--iters=%d" % iters, "--pace-us=100", "127.0.0.1"]
        env = dict(os.environ, UROCE_SHM=shm) if shm is not None else None
        cmd = ("UROCE_SHM=%s " % shm if shm is not None else "") + " ".join(srv) + " & " + " ".join(cli)
        # the client ends a stalled operation itself after 10 s; 20 ms an
        # operation is past the worst cliff seen (p99 8-12 ms)
        ok, reason, s, c = self.run_pair("%s_%d" % (metric, size), srv, cli, lambda p: listening_tcp(port),
                                         30 + 0.02 * iters, env=env)
        if not ok:
            return self.record(metric, size, 0, False, reason=reason, cmd=cmd, path=path, op=op, target=target)
        kv = None
        for line in c.out().splitlines():
            if line.startswith("onesided "):
                kv = {}
                for tok in line.split()[1:]:
                    k, _, v = tok.partition("=")
                    try:
                        kv[k] = float(v)
                    except ValueError:
                        kv[k] = v
        if not kv or "median_us" not in kv:
            return self.record(metric, size, 0, False, reason="no result line: " + c.tail(), cmd=cmd, path=path,
                               op=op, target=target)
        vals = dict(lat_median_us=kv["median_us"], lat_p99_us=kv["p99_us"], lat_max_us=kv["max_us"],
                    lat_min_us=kv.get("min_us"), iters=kv["iters"], cpu_client_s=c.cpu, cpu_server_s=s.cpu)
        return self.record(metric, size, 0, True, vals, cmd=cmd, path=path, op=op, target=target)

    def onesided_section(self):
        iters = self.args.onesided_iters or (300 if self.quick else 2000)
        targets = self.onesided_targets()
        cases = ONESIDED_CASES_QUICK if self.quick else ONESIDED_CASES
        self.log("one-sided latency by target behaviour: %d targets x %d cases x 2 paths, %d operations each" %
                 (len(targets), len(cases), iters))
        end = time.monotonic() + self.args.onesided_budget
        # the section has its own time, whatever the sections before it used
        self.budget = max(self.budget, self.elapsed() + self.args.onesided_budget)
        for path, shm in ONESIDED_PATHS:
            for op, size in cases:
                for target in targets:
                    self.guard(self.onesided, self.onesided_metric(path, op, target), size, 0,
                               path, shm, op, size, target, iters, end)

    def onesided_targets(self):
        if self.args.onesided_targets:
            chosen = [t for t in self.args.onesided_targets.split(",") if t]
        else:
            chosen = ONESIDED_TARGETS_QUICK if self.quick else ONESIDED_TARGETS
        return ["idle"] + [t for t in chosen if t != "idle"]  # idle: the ratios' baseline

    # -- connection setup and block I/O (issue #15) ----------------------
    @staticmethod
    def parse_steps(text):
        """cmtime's (and tcp_connect's) table: step -> (total ms, us per conn)."""
        steps = {}
        for line in text.splitlines():
            m = re.match(r"^\s*([a-z ]+?)\s*:\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$", line)
            if m:
                steps[m.group(1)] = (float(m.group(2)), float(m.group(5)))
        return steps

    def connect_pair(self, metric, server, client, ready, env_s, env_c, rep):
        """A server that may never exit by itself (cmtime's) and its client,
        started again while the server's CM still rejects (no listener yet)."""
        srv = Proc(server, self.logbase(metric + "_server"), env_s)
        t_end = time.monotonic() + 15.0
        while not ready(srv) and time.monotonic() < t_end and not srv.poll():
            time.sleep(0.05)
        cli = None
        for _ in range(10):
            cli = Proc(client, self.logbase(metric + "_client"), env_c)
            if not cli.wait(120):
                cli.kill()
                break
            if cli.rc == 0 or "REJECTED" not in cli.out() + cli.err():
                break
            time.sleep(0.5)
        srv.kill()
        cmd = " ".join("%s=%s" % kv for kv in sorted((env_c or {}).items()) if kv[0] == "UROCE_ADDR")
        cmd = (cmd + " " if cmd else "") + " ".join(client)
        if cli is None or cli.rc != 0:
            self.record(metric, 0, rep, False, reason="client rc %s: %s" % (cli.rc if cli else "-", cli.tail() if cli else ""),
                        cmd=cmd)
            return None
        steps = self.parse_steps(cli.out())
        if not steps:
            self.record(metric, 0, rep, False, reason="no step table in the output: %s" % cli.tail(), cmd=cmd)
            return None
        vals = {}
        for name, (total_ms, per_us) in steps.items():
            key = name.replace(" ", "_")
            vals[key + "_ms"] = total_ms
            vals[key + "_us_per_conn"] = per_us
        self.record(metric, 0, rep, True, vals, cmd=cmd)
        return steps

    def connect_section(self, rep):
        n = self.args.connect_conns or (200 if self.quick else 1000)
        sa, ca = "127.96.2.1", "127.96.2.2"
        port = self.free_port()
        env_s = dict(os.environ, UROCE_ADDR=sa)
        env_c = dict(os.environ, UROCE_ADDR=ca)
        self.connect_pair("cmtime", [self.uroce, "run", "--", "cmtime", "-b", sa, "-p", str(port), "-c", str(n)],
                          [self.uroce, "run", "--", "cmtime", "-s", sa, "-p", str(port), "-c", str(n)],
                          lambda p: time.sleep(1.0) or True, env_s, env_c, rep)
        port = self.free_port()
        tc = os.path.join(self.bindir, "tcp_connect")
        self.connect_pair("tcp_connect", [tc, "-s", "127.0.0.1", str(port), str(n)],
                          [tc, "-c", "127.0.0.1", str(port), str(n)], lambda p: listening_tcp(port), None, None, rep)

    def fio_case(self, metric, qd, rep):
        port = self.free_port()
        secs = 1.0 if self.quick else 3.0
        common = ["--bs=4k", "--size=64m", "--output-format=json"]
        if metric.startswith("fio_rdma"):
            sa, ca = "127.96.3.1", "127.96.3.2"
            # fio's rdma engine refuses rw=randread ("RDMA network IO can't be
            # random", engines/rdma.c fio_rdmaio_init); its READ verb reads,
            # each time, one of the server's buffers chosen at random
            # (fio_rdmaio_send): the server offers 64 of them
            server = [self.uroce, "run", "--", "fio", "--name=srv", "--ioengine=rdma", "--port=%d" % port,
                      "--rw=read", "--iodepth=64"] + common
            client = [self.uroce, "run", "--", "fio", "--name=cli", "--ioengine=rdma", "--hostname=" + sa,
                      "--port=%d" % port, "--verb=read", "--rw=write", "--iodepth=%d" % qd, "--runtime=%g" % secs,
                      "--time_based"] + common
            env_s, env_c = dict(os.environ, UROCE_ADDR=sa), dict(os.environ, UROCE_ADDR=ca)
            ready = lambda p: time.sleep(1.0) or True  # noqa: E731 - its CM port is no TCP socket
            cmd = "UROCE_ADDR=%s " % ca + " ".join(client)
        else:
            server = ["fio", "--name=srv", "--ioengine=net", "--protocol=tcp", "--listen", "--port=%d" % port,
                      "--rw=read", "--pingpong=1"] + common
            client = ["fio", "--name=cli", "--ioengine=net", "--protocol=tcp", "--hostname=127.0.0.1",
                      "--port=%d" % port, "--rw=write", "--pingpong=1", "--runtime=%g" % secs,
                      "--time_based"] + common
            env_s = env_c = None
            ready = lambda p: listening_tcp(port)  # noqa: E731
            cmd = " ".join(client)
        srv = Proc(server, self.logbase(metric + "_server"), env_s)
        t_end = time.monotonic() + 15.0
        while not ready(srv) and time.monotonic() < t_end and not srv.poll():
            time.sleep(0.02)
        cli = Proc(client, self.logbase(metric + "_client"), env_c)
        if not cli.wait(secs + 60):
            cli.kill()
        srv.wait(10)
        srv.kill()
        if cli.rc != 0:
            self.record(metric, 4096, rep, False, reason="fio rc %s: %s" % (cli.rc, cli.tail()), cmd=cmd)
            return
        try:
            w = json.loads(cli.out()[cli.out().index("{"):])["jobs"][0]["write"]
            pct = w["clat_ns"].get("percentile", {})
            vals = dict(iops=w["iops"], lat_mean_us=w["clat_ns"]["mean"] / 1e3,
                        lat_median_us=pct.get("50.000000", 0) / 1e3, lat_p99_us=pct.get("99.000000", 0) / 1e3)
        except (ValueError, KeyError, IndexError) as e:
            self.record(metric, 4096, rep, False, reason="fio output: %s" % e, cmd=cmd)
            return
        self.record(metric, 4096, rep, True, vals, cmd=cmd)

    def connect_and_fio_section(self):
        reps = 1 if self.quick else self.reps
        self.log("connection setup (cmtime vs TCP) and fio (rdma vs TCP), %d repetition(s)" % reps)
        self.budget = max(self.budget, self.elapsed() + 300)
        have_fio = shutil.which("fio") is not None
        for rep in range(reps):
            self.guard(self.connect_section, "cmtime", 0, rep, rep)
            for metric, qd in FIO_CASES:
                if have_fio:
                    self.guard(self.fio_case, metric, 4096, rep, metric, qd, rep)
                else:
                    self.record(metric, 4096, rep, False, reason="fio not installed")

    # -- between two network namespaces (issue #17) ------------------------
    def ns_perftest_pairs(self, ns, tool, opts, npairs, tag, timeout, env=()):
        """npairs perftest server/client pairs at once (server in B, client
        in A, each pair its own TCP port); the CPU of each process sampled
        over the middle of the run.  Returns (ok, reason, clients' outputs,
        cpu client s, cpu server s, seconds sampled, cmd)."""
        na, nb, aa, ab = ns
        ports = [self.free_port() for _ in range(npairs)]
        base = lambda port: [self.uroce, "run", "--", tool, "-p", str(port), "-F"] + opts
        srvs = [Proc(in_ns(nb, ab, base(p), env), self.logbase("%s_server%d" % (tag, i))) for i, p in enumerate(ports)]
        cmd = " & ".join(" ".join(in_ns(nb, ab, base(p), env)) for p in ports) + " ; " + \
            " & ".join(" ".join(in_ns(na, aa, base(p) + [ab], env)) for p in ports)
        end = time.monotonic() + 15
        while not all(listening_tcp_in(sv.pid, p) for sv, p in zip(srvs, ports)):
            if any(sv.poll() for sv in srvs) or time.monotonic() > end:
                for sv in srvs:
                    sv.kill()
                return False, "server not ready: " + srvs[0].tail(), [], 0, 0, 0, cmd
            time.sleep(0.01)
        clis = []
        try:
            return self._ns_pairs_run(na, aa, ab, base, ports, srvs, clis, opts, tag, timeout, cmd, env)
        finally:
            for pr in clis + srvs:
                pr.kill()

    def _ns_pairs_run(self, na, aa, ab, base, ports, srvs, clis, opts, tag, timeout, cmd, env):
        clis.extend(Proc(in_ns(na, aa, base(p) + [ab], env), self.logbase("%s_client%d" % (tag, i)))
                    for i, p in enumerate(ports))
        # sample inside the measured part of a -D run (after set-up and the
        # first margin), before its last margin
        secs = 0
        c0 = s0 = c1 = s1 = None
        if "-D" in opts:
            time.sleep(1.3)
            c0 = [proc_run_ns(c.pid) for c in clis]
            s0 = [proc_run_ns(sv.pid) for sv in srvs]
            t0 = time.monotonic()
            time.sleep(max(0.2, NS_BW_SECS - 2.0))
            c1 = [proc_run_ns(c.pid) for c in clis]
            s1 = [proc_run_ns(sv.pid) for sv in srvs]
            secs = time.monotonic() - t0
        ok, reason = True, None
        for c in clis:
            if not c.wait(timeout):
                ok, reason = False, "client hung (killed): " + c.tail()
        for sv in srvs:
            if not sv.wait(10):
                ok, reason = False, reason or "server did not exit: " + sv.tail()
        for pr in clis + srvs:
            pr.kill()
            if ok and pr.rc != 0:
                ok, reason = False, "rc %s: %s" % (pr.rc, pr.tail())

        def delta(a, b):
            if a is None or b is None or any(x is None for x in a + b):
                return None
            return sum(y - x for x, y in zip(a, b)) / 1e9
        return ok, reason, [c.out() for c in clis], delta(c0, c1), delta(s0, s1), secs, cmd

    def ns_bw(self, ns, mtu, name, tool, opts, size, rep):
        metric = "ns%d_%s" % (mtu, name)
        if self.skip_if_out_of_time(metric, size, rep, need=NS_BW_SECS + 3):
            return
        npairs = 2 if name.endswith("2pairs") else 1
        ok, reason, outs, cpu_c, cpu_s, secs, cmd = self.ns_perftest_pairs(
            ns, tool, ["-s", str(size), "-D", str(NS_BW_SECS), "-f", "1", "--report_gbits"] + opts, npairs,
            "%s_%d_%s" % (metric, size, rep), NS_BW_SECS + 30, ns_env(name))
        if not ok:
            return self.record(metric, size, rep, False, reason=reason, cmd=cmd)
        rate = 0.0
        for out in outs:
            header, f = self.parse_perftest(out, size)
            if not f:
                return self.record(metric, size, rep, False, reason="no result line in output", cmd=cmd)
            rate += f[4] * 1e6
        # from the message rate: perftest rounds its bandwidth to 0.01 Gb/s
        # (a 64 B row would read 0.025 GB/s whatever the rate)
        bps = rate * size
        gb = bps * secs / 1e9 if secs else None
        vals = dict(bw_GBps=bps / 1e9, msg_rate=rate, cpu_client_s=cpu_c, cpu_server_s=cpu_s, sampled_s=secs,
                    cpu_client_s_per_GB=cpu_c / gb if gb and cpu_c is not None else None,
                    cpu_server_s_per_GB=cpu_s / gb if gb and cpu_s is not None else None)
        if vals["cpu_client_s_per_GB"] is not None and vals["cpu_server_s_per_GB"] is not None:
            vals["cpu_s_per_GB"] = vals["cpu_client_s_per_GB"] + vals["cpu_server_s_per_GB"]
        return self.record(metric, size, rep, True, vals, cmd=cmd)

    def ns_lat(self, ns, mtu, name, tool, rep):
        metric = "ns%d_%s" % (mtu, name)
        if self.skip_if_out_of_time(metric, 2, rep):
            return
        n = 2000 if self.quick else 20000
        ok, reason, outs, _, _, _, cmd = self.ns_perftest_pairs(ns, tool, ["-s", "2", "-n", str(n)], 1,
                                                                "%s_%s" % (metric, rep), 60, ns_env(name))
        if not ok:
            return self.record(metric, 2, rep, False, reason=reason, cmd=cmd)
        header, f = self.parse_perftest(outs[0], 2)
        if not f or len(f) < 8:
            return self.record(metric, 2, rep, False, reason="no result line in output", cmd=cmd)
        return self.record(metric, 2, rep, True, dict(lat_median_us=f[4], lat_p99_us=f[7], lat_mean_us=f[5],
                                                      lat_min_us=f[2], iters=int(f[1])), cmd=cmd)

    def ns_qperf(self, ns, mtu, test, size, rep):
        """qperf between the namespaces: tcp_bw at `size`, or tcp_lat."""
        metric = "ns%d_%s" % (mtu, "tcp_bw" if test == "tcp_bw" else "qperf_tcp_lat")
        if self.skip_if_out_of_time(metric, size, rep):
            return
        na, nb, aa, ab = ns
        port = self.free_port()
        daemon = Proc(["ip", "netns", "exec", nb, "qperf", "-lp", str(port)], self.logbase("%s_qperfd" % metric))
        end = time.monotonic() + 10
        while not listening_tcp_in(daemon.pid, port):
            if daemon.poll() or time.monotonic() > end:
                daemon.kill()
                return self.record(metric, size, rep, False, reason="qperf daemon: " + daemon.tail())
            time.sleep(0.01)
        argv = ["ip", "netns", "exec", na, "qperf", "-lp", str(port), "-t", "2", "-m", str(size), "-vvs", ab, test]
        cli = Proc(argv, self.logbase("%s_%d_%s" % (metric, size, rep)))
        done = cli.wait(30)
        daemon.kill()
        cli.kill()
        cmd = " ".join(argv)
        kv = {}
        for line in cli.out().splitlines():
            m = re.match(r"\s*(\w+)\s*=\s*([0-9.,]+)\s*(\S*)", line)
            if m:
                kv[m.group(1)] = (float(m.group(2).replace(",", "")), m.group(3))
        if not done or cli.rc != 0:
            return self.record(metric, size, rep, False, reason="qperf rc %s: %s" % (cli.rc, cli.tail()), cmd=cmd)
        if test == "tcp_bw":
            v, unit = kv.get("bw", (None, None))
            mult = {"GB/sec": 1e9, "MB/sec": 1e6, "KB/sec": 1e3, "bytes/sec": 1}.get(unit)
            if v is None or mult is None:
                return self.record(metric, size, rep, False, reason="no bw in qperf output", cmd=cmd)
            return self.record(metric, size, rep, True, dict(bw_GBps=v * mult / 1e9), cmd=cmd)
        v, unit = kv.get("latency", (None, None))
        mult = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}.get(unit)
        if v is None or mult is None:
            return self.record(metric, size, rep, False, reason="no latency in qperf output", cmd=cmd)
        return self.record(metric, size, rep, True, dict(lat_mean_us=v * mult), cmd=cmd)

    def ns_bench_prog(self, ns, mtu, metric, size, rep, stream):
        """The bench's own TCP/UDP programs between the namespaces: a UDP
        stream's message rate, or a busy-polling ping-pong."""
        full = "ns%d_%s" % (mtu, metric)
        if self.skip_if_out_of_time(full, size, rep):
            return
        na, nb, aa, ab = ns
        udp = metric.startswith("udp")
        port = self.free_port()
        srv = ["ip", "netns", "exec", nb, self.pp_bin, "-p", str(port), "--bind", ab] + (["--udp"] if udp else [])
        extra = ["--stream", "--blocking", "-D", str(self.cfg["stream_s"])] if stream else \
            ["-n", "1000000", "-w", "100", "-D", str(self.cfg["pp_s"])]
        cli = ["ip", "netns", "exec", na, self.pp_bin, "-p", str(port)] + (["--udp"] if udp else []) + \
            ["-s", str(size)] + extra + [ab]
        ok, reason, s, c = self.run_pair("%s_%d_%s" % (full, size, rep), srv, cli, lambda p: "READY" in p.out(), 40)
        cmd = " ".join(srv) + " & " + " ".join(cli)
        if not ok:
            return self.record(full, size, rep, False, reason=reason, cmd=cmd)
        if stream:
            rx = self.parse_result(s.out(), role="recv")
            if not rx or not rx.get("bytes"):
                return self.record(full, size, rep, False, reason="receiver got nothing: " + s.tail(), cmd=cmd)
            return self.record(full, size, rep, True, dict(bw_GBps=rx["bw_GBps"], msg_rate=rx["bw_GBps"] * 1e9 / size,
                                                           loss_pct=rx.get("loss_pct")), cmd=cmd)
        kv = self.parse_result(c.out(), mode="pingpong")
        if not kv or not kv.get("iters"):
            return self.record(full, size, rep, False, reason="no samples: " + c.tail(), cmd=cmd)
        return self.record(full, size, rep, True, {k: kv.get(k) for k in ("lat_median_us", "lat_p99_us",
                                                                          "lat_mean_us", "iters")}, cmd=cmd)

    def namespaces_section(self):
        if os.geteuid() != 0:
            for mtu in NS_MTUS:
                self.record("ns%d_write_bw" % mtu, NS_SIZES[0], 0, False, skipped=True,
                            reason="skipped: network namespaces need root")
            return
        sizes = NS_SIZES_QUICK if self.quick else NS_SIZES
        self.budget = max(self.budget, self.elapsed() + (200 if self.quick else 900))
        for mtu in NS_MTUS:
            try:
                ns = ns_setup(mtu)
            except (RuntimeError, OSError) as e:
                self.record("ns%d_write_bw" % mtu, NS_SIZES[0], 0, False, reason="namespaces: %s" % e)
                continue
            self.log("between two namespaces, veth MTU %d (%s / %s), %d repetition(s)" % (mtu, ns[2], ns[3],
                                                                                       self.reps))
            try:
                for rep in range(self.reps):
                    for size in sizes:
                        for name, tool, opts, _ in NS_BW:
                            if name.endswith("2pairs") and size != 65536:
                                continue
                            self.guard(self.ns_bw, "ns%d_%s" % (mtu, name), size, rep, ns, mtu, name, tool, opts,
                                       size, rep)
                        self.guard(self.ns_qperf, "ns%d_tcp_bw" % mtu, size, rep, ns, mtu, "tcp_bw", size, rep)
                    self.guard(self.ns_bench_prog, "ns%d_udp_stream" % mtu, 64, rep, ns, mtu, "udp_stream", 64, rep,
                               True)
                    for name, tool, _ in NS_LAT:
                        self.guard(self.ns_lat, "ns%d_%s" % (mtu, name), 2, rep, ns, mtu, name, tool, rep)
                    self.guard(self.ns_qperf, "ns%d_qperf_tcp_lat" % mtu, 2, rep, ns, mtu, "tcp_lat", 2, rep)
                    for metric in ("tcp_pp_busy", "udp_pp_busy"):
                        self.guard(self.ns_bench_prog, "ns%d_%s" % (mtu, metric), 2, rep, ns, mtu, metric, 2, rep,
                                   False)
            finally:
                ns_teardown(ns[0], ns[1])

    # -- idle CPU -------------------------------------------------------
    def idle_cpu(self):
        """CPU used by uroce processes that sit with no traffic: an ib_write_bw
        server waiting for its client (device open, engine thread running) and
        an ibv_rc_pingpong server waiting for its client (its QP is created and
        receives are posted before it waits).  Sampled together."""
        secs = self.cfg["idle_s"]
        procs = []
        p1 = self.free_port()
        procs.append(("idle_ib_write_bw_server", Proc([self.uroce, "run", "--", "ib_write_bw", "-p", str(p1), "-F"],
                                                      self.logbase("idle_ib_write_bw")), p1,
                      "uroce run -- ib_write_bw -p %d -F  (waiting for a client)" % p1))
        p2 = self.free_port()
        procs.append(("idle_rc_pingpong_server", Proc([self.uroce, "run", "--", "ibv_rc_pingpong", "-g", "0", "-p", str(p2)],
                                                      self.logbase("idle_rc_pingpong")), p2,
                      "uroce run -- ibv_rc_pingpong -g 0 -p %d  (QP created, receives posted, waiting)" % p2))
        end = time.monotonic() + 10
        while time.monotonic() < end and not all(listening_tcp(port) or p.poll() for _, p, port, _ in procs):
            time.sleep(0.02)
        time.sleep(1.0)  # let start-up work finish
        samples = {}
        t0 = time.monotonic()
        for name, p, port, desc in procs:
            if p.poll():
                samples[name] = None
            else:
                samples[name] = (proc_run_ns(p.pid), proc_stat_ticks(p.pid))
        time.sleep(secs)
        t1 = time.monotonic()
        for name, p, port, desc in procs:
            s0 = samples.get(name)
            if p.poll() or not s0:
                self.record(name, 0, 0, False, reason="exited while idle (rc %s): %s" % (p.rc, p.tail()), cmd=desc)
                continue
            try:
                ns1, t1k = proc_run_ns(p.pid), proc_stat_ticks(p.pid)
                threads = len(os.listdir("/proc/%d/task" % p.pid))
            except OSError as e:
                self.record(name, 0, 0, False, reason=str(e), cmd=desc)
                continue
            wall = t1 - t0
            if s0[0] is not None and ns1 is not None:
                cpu = (ns1 - s0[0]) / 1e9
                method = "schedstat"
            else:
                cpu = (t1k - s0[1]) / CLK_TCK
                method = "stat"
            self.record(name, 0, 0, True, dict(pct_core=100.0 * cpu / wall, cpu_s=cpu, seconds=wall,
                                               stat_ticks=t1k - s0[1], threads=threads, method=method), cmd=desc)
        for _, p, _, _ in procs:
            p.kill()

    # -- the plan -------------------------------------------------------
    def guard(self, fn, metric, size, rep, *a):
        """A bug or an unexpected tool output fails one measurement, not the run."""
        try:
            fn(*a)
        except Exception as e:  # noqa: BLE001
            self.record(metric, size, rep, False, reason="bench.py error: %s: %s" % (type(e).__name__, e))

    def run(self):
        if self.args.onesided:
            self.guard(self.onesided_section, "onesided", 0, 0)
            return
        if self.args.connect:
            self.connect_and_fio_section()
            return
        if self.args.namespaces:
            self.guard(self.namespaces_section, "namespaces", 0, 0)
            return
        self.log("idle CPU sample (%.0f s)" % self.cfg["idle_s"])
        self.guard(self.idle_cpu, "idle", 0, 0)
        write_read_lat_sizes = [s for s in self.sizes if s == 2] if self.quick else self.sizes
        for rep in range(self.reps):
            self.log("=== repetition %d/%d" % (rep + 1, self.reps))
            self.guard(self.memcpy_run, "memcpy", 0, rep, rep)
            self.guard(self.cpu_stalls, "cpu_stalls", 0, rep, rep)
            for size in self.sizes:
                for metric in PERFTEST_BW:
                    self.guard(self.uroce_bw, metric, size, rep, metric, size, rep)
                self.guard(self.qperf_test, "tcp_bw", size, rep, "tcp_bw", "tcp_bw", size, rep)
                for metric in ("tcp_stream", "udp_stream"):
                    self.guard(self.stream, metric, size, rep, metric, size, rep)
                for metric in PERFTEST_LAT:
                    if metric.startswith("uroce_send_lat") or size in write_read_lat_sizes:
                        self.guard(self.uroce_lat, metric, size, rep, metric, size, rep)
                self.guard(self.qperf_test, "qperf_tcp_lat", size, rep, "qperf_tcp_lat", "tcp_lat", size, rep)
                for metric in ("tcp_pp_blocking", "tcp_pp_busy", "udp_pp_blocking", "udp_pp_busy"):
                    self.guard(self.pingpong, metric, size, rep, metric, size, rep)
                self.guard(self.shm_pingpong, "shm_pp_busy", size, rep, "shm_pp_busy", size, rep)
                if size == 2:
                    self.guard(self.shm_pingpong_matched, "shm_pp_matched", size, rep, size, rep)
            for metric, op in ATOMICS:
                self.guard(self.uroce_atomic, metric, 8, rep, metric, op, rep)
        if self.qperf:
            self.qperf[0].kill()
        # once, not per repetition: its own idle baseline is in it
        self.guard(self.onesided_section, "onesided", 0, 0)
        self.connect_and_fio_section()
        self.guard(self.namespaces_section, "namespaces", 0, 0)

    # -- summary --------------------------------------------------------
    def summarize(self):
        summ = {}
        for r in self.runs:
            if r["rep"] in ("probe", "base"):
                continue
            d = summ.setdefault(r["metric"], {}).setdefault(str(r["size"]), dict(n_ok=0, n_failed=0, reasons=[],
                                                                                 reps=[]))
            if r["ok"]:
                d["n_ok"] += 1
                d["reps"].append(r["values"])
            else:
                d["n_failed"] += 1
                d["reasons"].append(r["reason"])
        for metric, bysize in summ.items():
            for size, d in bysize.items():
                keys = set()
                for v in d["reps"]:
                    keys.update(k for k, x in v.items() if isinstance(x, (int, float)) and not isinstance(x, bool))
                d["median"] = {k: median([v.get(k) for v in d["reps"]]) for k in sorted(keys)}
                for k in ("bw_GBps", "lat_median_us"):
                    xs = [v.get(k) for v in d["reps"] if v.get(k) is not None]
                    if xs:
                        d.setdefault("range", {})[k] = [min(xs), max(xs)]
        self.summary = summ
        return summ

    def get(self, metric, size, key):
        d = self.summary.get(metric, {}).get(str(size))
        if not d or not d["n_ok"]:
            return None
        return d["median"].get(key)

    def status(self, metric, size):
        d = self.summary.get(metric, {}).get(str(size))
        if not d:
            return "not run"
        if d["n_ok"] == 0:
            return "FAILED: " + (d["reasons"][0] if d["reasons"] else "?")
        if d["n_failed"]:
            return "%d/%d failed" % (d["n_failed"], d["n_ok"] + d["n_failed"])
        return ""


# ------------------------------------------------------------------ output --

def num(v, digits=3):
    if v is None:
        return "-"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return "%.0f" % v
    if a >= 100:
        return "%.1f" % v
    return "%.*g" % (digits, v)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def spread(b, metric, size, key):
    """(max - min) / median over the repetitions, as a percentage."""
    d = b.summary.get(metric, {}).get(str(size))
    xs = [v.get(key) for v in (d or {}).get("reps", []) if v.get(key) is not None]
    med = median(xs)
    if len(xs) < 2 or not med:
        return "-"
    return "%.0f%%" % (100.0 * (max(xs) - min(xs)) / med)


def rtxt(r):
    if r is None:
        return "-"
    if r >= 100:
        return "%.0fx" % r
    if r >= 0.1:
        return "%.2fx" % r
    return "%.2gx" % r


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception as e:  # noqa: BLE001 - header info is best effort
        return "? (%s)" % e


def collect_meta(b, phase):
    m = {}
    m["uptime_" + phase] = sh("uptime")
    m["loadavg_" + phase] = open("/proc/loadavg").read().strip()
    m["top_cpu_" + phase] = sh("ps -eo pid,pcpu,comm --sort=-pcpu | head -6")
    return m


def onesided_table(b):
    """The one-sided section: each target behaviour beside the idle target
    of the same path, op and size, with issue #14's pass mark."""
    hdr = ["path, op, size", "target", "median us", "p99 us", "max us", "idle median us", "med/idle", "pass", "note"]
    rows = []
    npass = nrows = 0
    cases = ONESIDED_CASES_QUICK if b.quick else ONESIDED_CASES
    for path, _ in ONESIDED_PATHS:
        for op, size in cases:
            idle = b.get(b.onesided_metric(path, op, "idle"), size, "lat_median_us")
            for target in b.onesided_targets():
                metric = b.onesided_metric(path, op, target)
                if not b.summary.get(metric, {}).get(str(size)):
                    continue
                med, p99, mx = (b.get(metric, size, k) for k in ("lat_median_us", "lat_p99_us", "lat_max_us"))
                r = ratio(med, idle)
                mark = "-"
                if med is not None and r is not None:
                    why = []
                    if r > ONESIDED_MAX_RATIO:
                        why.append("median %s idle" % rtxt(r))
                    if p99 > ONESIDED_MAX_P99_US:
                        why.append("p99 > %.0f us" % ONESIDED_MAX_P99_US)
                    mark = "FAIL: " + ", ".join(why) if why else "pass"
                    nrows += 1
                    npass += not why
                rows.append(["%s %s %s" % (path, ONESIDED_OP_LABEL[op], fmt_size(size)), target, num(med), num(p99),
                             num(mx), num(idle), rtxt(r), mark, b.status(metric, size)])
            rows.append(None)
    iters = b.args.onesided_iters or (300 if b.quick else 2000)
    title = ("One-sided latency by target behaviour (bench/onesided_lat: one operation at a time, paced 100 us, "
             "%d each, post to completion at the client; rings = same-host rings, udp = UROCE_SHM=0; med/idle = "
             "median / the idle target's median of the same path, op and size, this run; pass = median <= %gx "
             "idle and p99 <= %.0f us (issue #14): %d of %d pass)" % (iters, ONESIDED_MAX_RATIO, ONESIDED_MAX_P99_US,
                                                                    npass, nrows))
    return (title, hdr, rows)


def connect_tables(b):
    """cmtime's steps beside TCP's, and fio rdma beside fio over TCP."""
    hdr = ["step", "uroce rdma_cm total ms", "us / conn", "TCP total ms", "us / conn", "uroce / TCP", "note"]
    rows = []
    pairs = [("create id", None), ("resolve addr", None), ("resolve route", None), ("create qp", None),
             ("connect", "connect"), ("disconnect", "close"), ("destroy", None)]
    for step, tcp_step in pairs:
        k = step.replace(" ", "_")
        u_ms, u_us = b.get("cmtime", 0, k + "_ms"), b.get("cmtime", 0, k + "_us_per_conn")
        t_ms = b.get("tcp_connect", 0, tcp_step + "_ms") if tcp_step else None
        t_us = b.get("tcp_connect", 0, tcp_step + "_us_per_conn") if tcp_step else None
        note = "TCP: %s" % tcp_step if tcp_step else "(no TCP step)"
        rows.append([step, num(u_ms), num(u_us), num(t_ms), num(t_us), rtxt(ratio(u_us, t_us)),
                     "; ".join(x for x in (note, b.status("cmtime", 0)) if x)])
    n = b.args.connect_conns or (200 if b.quick else 1000)
    t1 = ("Connection setup: cmtime -c %d through uroce (two processes, two loopback addresses, every step of "
          "all %d connections at once) beside bench/tcp_connect: %d TCP connect() then close() on loopback, "
          "same run; median of the repetitions" % (n, n, n))
    hdr2 = ["fio, 4 KiB", "IOPS", "xTCP", "mean us", "median us", "p99 us", "n", "note"]
    rows2 = []
    tcp_iops = b.get("fio_tcp_pingpong_qd1", 4096, "iops")
    labels = {"fio_rdma_read_qd1": "uroce: rdma engine, RDMA READ, iodepth 1",
              "fio_rdma_read_qd32": "uroce: rdma engine, RDMA READ, iodepth 32",
              "fio_tcp_pingpong_qd1": "TCP: net engine, pingpong=1, iodepth 1"}
    for metric, _ in FIO_CASES:
        iops = b.get(metric, 4096, "iops")
        rows2.append([labels[metric], num(iops), rtxt(ratio(iops, tcp_iops)), num(b.get(metric, 4096, "lat_mean_us")),
                      num(b.get(metric, 4096, "lat_median_us")), num(b.get(metric, 4096, "lat_p99_us")),
                      str((b.summary.get(metric, {}).get("4096") or {}).get("n_ok", 0)), b.status(metric, 4096)])
    t2 = ("Block I/O: fio 3.33, 4 KiB, through uroce's rdma_cm and verbs (rdma engine: it refuses rw=randread, and "
          "its READ reads one of the server's 64 buffers chosen at random each time) beside fio's net engine over loopback TCP (pingpong=1: a request and its echo per I/O; "
          "the net engine has no deeper queue); same run")
    return [(t1, hdr, rows), (t2, hdr2, rows2)]


def ns_tables(b):
    """Between two namespaces: per MTU, bandwidth beside qperf TCP (and the
    64 B message rate beside the bare UDP stream's), then the latencies
    beside the busy UDP ping-pong (ib_read_lat, a round trip, beside twice
    its one-way time)."""
    out = []
    sizes = NS_SIZES_QUICK if b.quick else NS_SIZES
    for mtu in NS_MTUS:
        if not any(m.startswith("ns%d_" % mtu) for m in b.summary):
            continue
        pre = "ns%d_" % mtu
        hdr = ["size", "transport", "GB/s", "xTCP", "msg/s", "x bare UDP msg/s", "CPU s/GB client", "CPU s/GB server",
               "n", "note"]
        rows = []
        for s in sizes:
            tcp = b.get(pre + "tcp_bw", s, "bw_GBps")
            udp_rate = b.get(pre + "udp_stream", s, "msg_rate")
            for name, _, _, label in NS_BW:
                m = pre + name
                d = b.summary.get(m, {}).get(str(s))
                if not d:
                    continue
                bw, rate = b.get(m, s, "bw_GBps"), b.get(m, s, "msg_rate")
                rows.append([fmt_size(s), label, num(bw), rtxt(ratio(bw, tcp)), num(rate), rtxt(ratio(rate, udp_rate)),
                             num(b.get(m, s, "cpu_client_s_per_GB")), num(b.get(m, s, "cpu_server_s_per_GB")),
                             str(d["n_ok"]), b.status(m, s)])
            for m, label in ((pre + "tcp_bw", "TCP (qperf tcp_bw)"), (pre + "udp_stream", "UDP stream (bench, blocking)")):
                d = b.summary.get(m, {}).get(str(s))
                if d:
                    rows.append([fmt_size(s), label, num(b.get(m, s, "bw_GBps")), "", num(b.get(m, s, "msg_rate")), "",
                                 "", "", str(d["n_ok"]), b.status(m, s)])
            rows.append(None)
        out.append(("Between two network namespaces over a veth pair, MTU %d (uroce's path MTU %d; the UDP path unless a row says AF_XDP, "
                    "UROCE_ADDR on each side): bandwidth (perftest -D %d, measured within 1 s margins) beside qperf "
                    "tcp_bw, and the message rate beside the bench's UDP stream of the same size, same run; the AF_XDP "
                    "row's path MTU is min(that, 2048); CPU s/GB "
                    "= each process's CPU over about a second from 1.3 s after the client started / GB moved "
                    "meanwhile; the two pairs at once are four busy-polling processes on this machine's CPUs; "
                    "median of reps"
                    % (mtu, max(m for m in (256, 512, 1024, 2048, 4096) if m <= mtu - 80), NS_BW_SECS), hdr, rows))
        hdr = ["size", "transport", "median us", "p99 us", "p99/med", "med / bare UDP busy", "n", "note"]
        rows = []
        base = b.get(pre + "udp_pp_busy", 2, "lat_median_us")
        for name, _, label in NS_LAT:
            m = pre + name
            d = b.summary.get(m, {}).get("2")
            if d:
                med, p99 = b.get(m, 2, "lat_median_us"), b.get(m, 2, "lat_p99_us")
                # ib_read_lat is a round trip: beside the ping-pong's
                rt = 2 if name.startswith("read_lat") else 1
                rows.append(["2 B", label, num(med), num(p99), rtxt(ratio(p99, med)),
                             rtxt(ratio(med, base * rt if base else None)),
                             str(d["n_ok"]), b.status(m, 2)])
        for m, label in ((pre + "qperf_tcp_lat", "TCP blocking (qperf tcp_lat, mean)"),
                         (pre + "tcp_pp_busy", "TCP busy-poll ping-pong (bench)"),
                         (pre + "udp_pp_busy", "UDP busy-poll ping-pong (bench, the bare path)")):
            d = b.summary.get(m, {}).get("2")
            if d:
                med = b.get(m, 2, "lat_median_us")
                p99 = b.get(m, 2, "lat_p99_us")
                rows.append(["2 B", label, num(med if med is not None else b.get(m, 2, "lat_mean_us")), num(p99),
                             rtxt(ratio(p99, med)), rtxt(ratio(med, base)), str(d["n_ok"]), b.status(m, 2)])
        out.append(("Latency between the same two namespaces, MTU %d: one-way (RTT/2) except ib_read_lat; perftest "
                    "median = t_typical; med / bare UDP busy = median / the busy-polling UDP ping-pong's (for "
                    "ib_read_lat, / twice it: a round trip), same run"
                    % mtu, hdr, rows))
    return out


def tables(b):
    if b.args.onesided:
        return [onesided_table(b)]
    if b.args.connect:
        return connect_tables(b)
    if b.args.namespaces:
        return ns_tables(b)
    S = b.sizes
    out_txt, out_md = [], []

    # Bandwidth + CPU
    hdr = ["size", "transport", "GB/s", "spread", "xTCP", "CPU s/GB", "xTCP", "n", "note"]
    rows = []
    for s in S:
        tcp_bw, tcp_cpu = b.get("tcp_bw", s, "bw_GBps"), b.get("tcp_bw", s, "cpu_s_per_GB")
        for metric, label in BW_METRICS:
            bw, cpu = b.get(metric, s, "bw_GBps"), b.get(metric, s, "cpu_s_per_GB")
            d = b.summary.get(metric, {}).get(str(s))
            note = b.status(metric, s)
            if cpu is None and b.get(metric, s, "cpu_raw_s_per_GB") is not None:
                note = ("CPU not resolved: traffic CPU within the start-up baseline's noise; raw %s s/GB " %
                        num(b.get(metric, s, "cpu_raw_s_per_GB")) + note).strip()
            if metric == "udp_stream" and b.get(metric, s, "loss_pct") is not None:
                note = ("loss %.1f%%, sent %s GB/s " % (b.get(metric, s, "loss_pct"), num(b.get(metric, s, "send_GBps")))
                        + note).strip()
            rows.append([fmt_size(s), label, num(bw), spread(b, metric, s, "bw_GBps"), rtxt(ratio(bw, tcp_bw)),
                         num(cpu), rtxt(ratio(cpu, tcp_cpu)),
                         str(d["n_ok"]) if d else "0", note])
        rows.append(None)
    out_txt.append(("Bandwidth and CPU cost  (median of reps, spread = (max-min)/median over reps; GB = 1e9 B; CPU s/GB = user+sys CPU of server + "
                    "client per GB moved, for perftest less the fixed start-up/teardown CPU of a -n 5 run of the "
                    "same tool and size; xTCP = ratio to qperf tcp_bw at the same size, this run)", hdr, rows))

    # Latency
    hdr = ["size", "transport", "median us", "spread", "p99 us", "p99/med", "mean us", "mean/qperf", "med/TCPblk",
           "p99/TCPblk",
           "med/TCPbusy", "p99/TCPbusy", "n", "note"]
    rows = []
    for s in S:
        blk_m, blk_p = b.get("tcp_pp_blocking", s, "lat_median_us"), b.get("tcp_pp_blocking", s, "lat_p99_us")
        bsy_m, bsy_p = b.get("tcp_pp_busy", s, "lat_median_us"), b.get("tcp_pp_busy", s, "lat_p99_us")
        qp_mean = b.get("qperf_tcp_lat", s, "lat_mean_us")
        for metric, label in LAT_METRICS:
            d = b.summary.get(metric, {}).get(str(s))
            if not d:
                continue
            med, p99, mean = (b.get(metric, s, k) for k in ("lat_median_us", "lat_p99_us", "lat_mean_us"))
            sp = spread(b, metric, s, "lat_median_us" if med is not None else "lat_mean_us")
            rows.append([fmt_size(s), label, num(med), sp, num(p99), rtxt(ratio(p99, med)), num(mean),
                         rtxt(ratio(mean, qp_mean)),
                         rtxt(ratio(med, blk_m)), rtxt(ratio(p99, blk_p)), rtxt(ratio(med, bsy_m)),
                         rtxt(ratio(p99, bsy_p)), str(d["n_ok"]), b.status(metric, s)])
        rows.append(None)
    out_txt.append(("Latency (median of reps; spread = (max-min)/median of the per-rep medians), one-way = RTT/2 except ib_read_lat (full READ round trip); perftest median = "
                    "t_typical, p99 = its 99% column; memcpy = time per copy; ratios to TCP at the same size, this run: "
                    "qperf = qperf tcp_lat (blocking, mean only), TCPblk / TCPbusy = bench TCP ping-pong, "
                    "blocking / busy-polling", hdr, rows))

    # Extras
    hdr = ["measurement", "value", "n", "note"]
    rows = []
    for metric, op in ATOMICS:
        v = b.get(metric, 8, "ops_per_s")
        rows.append(["ib_atomic_bw -A %s" % op, (num(v / 1e3) + " K ops/s") if v else "-",
                     str((b.summary.get(metric, {}).get("8") or {}).get("n_ok", 0)), b.status(metric, 8)])
    for metric, tool in PERFTEST_LAT.items():
        med, p99 = b.get(metric, 2, "lat_median_us"), b.get(metric, 2, "lat_p99_us")
        rows.append(["%s -s 2%s: median / p99" % (tool, " (UROCE_SHM=0)" if metric.endswith("_udp") else ""),
                     "%s / %s us" % (num(med), num(p99)),
                     str((b.summary.get(metric, {}).get("2") or {}).get("n_ok", 0)), b.status(metric, 2)])
    med, p99 = b.get("uroce_send_lat", 2, "lat_median_us"), b.get("uroce_send_lat", 2, "lat_p99_us")
    fm, fp, w = (b.get("shm_pp_matched", 2, k) for k in ("lat_median_us", "lat_p99_us", "work_ns"))
    rows.append(["p99 / median, 2 B: ib_send_lat, and the shared-memory ping-pong slowed to its median "
                 "(-W %s ns a hop)" % ("%d" % w if w is not None else "?"),
                 "%s (%s / %s us) and %s (%s / %s us)" % (rtxt(ratio(p99, med)), num(med), num(p99),
                                                          rtxt(ratio(fp, fm)), num(fm), num(fp)),
                 str((b.summary.get("shm_pp_matched", {}).get("2") or {}).get("n_ok", 0)),
                 b.status("shm_pp_matched", 2)])
    st = {k: b.get("cpu_stalls", 0, k) for k in ("cpus", "per_s", "lost_pct", "median_us", "p99_us")}
    rows.append(["CPU stalls >= 1 us seen by a spinning thread per CPU (host preemption, interrupts)",
                 ("%s /s per CPU, median %s us, p99 %s us, %s %% of the time (%s CPUs)" %
                  (num(st["per_s"]), num(st["median_us"]), num(st["p99_us"]), num(st["lost_pct"]), num(st["cpus"])))
                 if st["per_s"] is not None else "-",
                 str((b.summary.get("cpu_stalls", {}).get("0") or {}).get("n_ok", 0)), b.status("cpu_stalls", 0)])
    for metric, label in (("idle_ib_write_bw_server", "idle CPU, ib_write_bw server waiting (device open)"),
                          ("idle_rc_pingpong_server", "idle CPU, ibv_rc_pingpong server waiting (QP + recvs posted)")):
        v = b.get(metric, 0, "pct_core")
        secs = b.get(metric, 0, "seconds")
        rows.append([label, ("%.2f %% of a core over %.1f s" % (v, secs)) if v is not None else "-",
                     str((b.summary.get(metric, {}).get("0") or {}).get("n_ok", 0)), b.status(metric, 0)])
    out_txt.append(("uroce extras", hdr, rows))
    out_txt.append(onesided_table(b))
    out_txt.extend(connect_tables(b))
    out_txt.extend(ns_tables(b))
    return out_txt


def render_text(tabs):
    lines = []
    for title, hdr, rows in tabs:
        lines.append("")
        lines.append(textwrap.fill("== " + title, 130, subsequent_indent="   "))
        real = [r for r in rows if r]
        widths = [max(len(str(x)) for x in col) for col in zip(hdr, *real)]
        widths[-1] = min(widths[-1], 70)
        num_cols = set(range(2, len(hdr) - 2)) if len(hdr) > 4 else {1}

        def fmt(r):
            cells = []
            for i, (x, w) in enumerate(zip(r, widths)):
                x = str(x)
                if i == len(r) - 1:
                    cells.append(x[:200])
                elif i in num_cols:
                    cells.append(x.rjust(w))
                else:
                    cells.append(x.ljust(w))
            return "  ".join(cells).rstrip()
        lines.append(fmt(hdr))
        lines.append("-" * min(160, sum(widths) + 2 * len(widths)))
        prev = None
        for r in rows:
            if r is None:
                lines.append("")
                prev = None
                continue
            r = list(r)
            if prev is not None and r[0] == prev:
                r[0] = ""
            else:
                prev = r[0]
            lines.append(fmt(r))
    return "\n".join(lines)


def render_md(tabs):
    lines = []
    for title, hdr, rows in tabs:
        lines.append("")
        lines.append("### " + title)
        lines.append("")
        lines.append("| " + " | ".join(hdr) + " |")
        lines.append("|" + "|".join("---" for _ in hdr) + "|")
        for r in rows:
            if r is None:
                continue
            lines.append("| " + " | ".join(str(x).replace("|", "/") for x in r) + " |")
    return "\n".join(lines)


def plot(b, outdir):
    gp = shutil.which("gnuplot")
    if not gp:
        return "gnuplot not found"
    bw_series = [("uroce_write_bw", "uroce WRITE"), ("uroce_read_bw", "uroce READ"), ("uroce_send_bw", "uroce SEND"),
                 ("tcp_bw", "TCP (qperf)"), ("tcp_stream", "TCP stream (bench)"), ("udp_stream", "UDP stream (bench)"),
                 ("memcpy_warm", "memcpy warm"), ("memcpy_cold", "memcpy cold")]
    lat_series = [("uroce_send_lat", "uroce SEND"), ("uroce_write_lat", "uroce WRITE"),
                  ("uroce_read_lat", "uroce READ (RTT)"), ("tcp_pp_blocking", "TCP blocking"),
                  ("tcp_pp_busy", "TCP busy-poll"), ("udp_pp_blocking", "UDP blocking"),
                  ("udp_pp_busy", "UDP busy-poll")]

    def val(metric, s, key):
        v = b.get(metric, s, key)
        return "NaN" if v is None or v <= 0 else "%.6g" % v
    with open(os.path.join(outdir, "bw.dat"), "w") as f:
        f.write("# size " + " ".join(m for m, _ in bw_series) + "   (GB/s, median)\n")
        for s in b.sizes:
            f.write("%d %s\n" % (s, " ".join(val(m, s, "bw_GBps") for m, _ in bw_series)))
    with open(os.path.join(outdir, "lat.dat"), "w") as f:
        f.write("# size " + " ".join("%s_median %s_p99" % (m, m) for m, _ in lat_series) + "   (us)\n")
        for s in b.sizes:
            cells = []
            for m, _ in lat_series:
                med, p99 = val(m, s, "lat_median_us"), val(m, s, "lat_p99_us")
                cells += [med, p99]
            f.write('"%s" %s\n' % (fmt_size(s), " ".join(cells)))
    meta = b.meta
    title = "uroce %s vs TCP / UDP / memcpy, loopback, %s, %d CPUs; median of %d rep(s); load avg at start %s" % (
        meta["git"], meta["date"], meta["cpus"], b.reps, meta["loadavg_start"].split()[0])
    bw_plots = ", ".join("'bw.dat' using 1:%d with linespoints lw 2 pt %d title '%s'" % (i + 2, i + 4, t)
                         for i, (_, t) in enumerate(bw_series))
    lat_plots = ", ".join("'lat.dat' using %d:%d:%d%s title '%s'" % (2 + 2 * i, 2 + 2 * i, 3 + 2 * i,
                                                                     ":xtic(1)" if i == 0 else "", t)
                          for i, (_, t) in enumerate(lat_series))
    script = """
set terminal pngcairo size 1600,800 enhanced font ',10'
set output 'results.png'
set datafile missing 'NaN'
set multiplot layout 1,2 title "%s"
set title 'Bandwidth vs message size (median)'
set logscale xy
unset xlabel
set ylabel 'GB/s (1e9 B/s)'
set format y '%%g'
set xtics (%s)
set xrange [1:2e6]
set key below
set grid
plot %s
unset logscale
set logscale y
set title 'Latency: median (bar), p99 (error bar); one-way except READ (round trip)'
unset xlabel
set ylabel 'microseconds'
set format y '%%g'
set xtics auto
set xrange [*:*]
set style data histogram
set style histogram errorbars gap 1 lw 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set key below
set yrange [0.5:*]
plot %s
unset multiplot
""" % (title, ", ".join('"%s" %d' % (fmt_size(x), x) for x in b.sizes), bw_plots, lat_plots)
    with open(os.path.join(outdir, "plot.gp"), "w") as f:
        f.write(script)
    try:
        r = subprocess.run([gp, "plot.gp"], cwd=outdir, capture_output=True, text=True, timeout=60)
    except Exception as e:  # noqa: BLE001
        return "gnuplot failed: %s" % e
    if r.returncode != 0 or not os.path.exists(os.path.join(outdir, "results.png")):
        return "gnuplot failed: " + r.stderr.strip()[-300:]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--root", default=os.path.dirname(here), help="uroce checkout (build/bin inside)")
    ap.add_argument("--quick", action="store_true", help="1 repetition, short runs (CI smoke)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3); medians are reported")
    ap.add_argument("--out", default=None, help="output directory (default bench/results, with --onesided "
                    "bench/results-onesided)")
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="message sizes, comma separated")
    ap.add_argument("--budget", type=float, default=0, help="seconds after which remaining tests are skipped "
                    "(default 800, --quick 100)")
    ap.add_argument("--onesided", action="store_true",
                    help="run only the section 'one-sided latency by target behaviour' (bench/onesided_lat)")
    ap.add_argument("--onesided-iters", type=int, default=0,
                    help="operations per one-sided run (default 2000, --quick 300)")
    ap.add_argument("--onesided-targets", default="",
                    help="target behaviours, comma separated (default all: %s; --quick: %s); idle always runs" % (
                        ",".join(ONESIDED_TARGETS), ",".join(ONESIDED_TARGETS_QUICK)))
    ap.add_argument("--connect", action="store_true",
                    help="run only the section 'connection setup and block I/O' (cmtime vs TCP, fio rdma vs TCP)")
    ap.add_argument("--namespaces", action="store_true",
                    help="run only the section 'between two network namespaces' (veth at MTU %s; needs root)" %
                    " and ".join(str(m) for m in NS_MTUS))
    ap.add_argument("--connect-conns", type=int, default=0,
                    help="connections for cmtime and tcp_connect (default 1000, --quick 200)")
    ap.add_argument("--onesided-budget", type=float, default=600,
                    help="seconds the one-sided section may take, after which its runs are skipped (default 600)")
    args = ap.parse_args()
    args.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    if args.out is None:
        args.out = os.path.join(here, "results-onesided" if args.onesided else
                                "results-connect" if args.connect else
                                "results-namespaces" if args.namespaces else "results")
    if args.reps < 1:
        ap.error("--reps must be >= 1")

    if args.onesided_iters < 0:
        ap.error("--onesided-iters must not be negative (0: the default)")
    bad = [t for t in args.onesided_targets.split(",") if t and t not in ONESIDED_TARGETS]
    if bad:
        ap.error("--onesided-targets: unknown %s (known: %s)" % (",".join(bad), ",".join(ONESIDED_TARGETS)))

    b = Bench(args)
    for path in ((b.uroce, b.onesided_bin) if args.onesided else
                 (b.uroce, os.path.join(b.bindir, "tcp_connect")) if args.connect else
                 (b.uroce, b.pp_bin) if args.namespaces else
                 (b.uroce, b.pp_bin, b.memcpy, b.onesided_bin, os.path.join(b.bindir, "tcp_connect"))):
        if not os.access(path, os.X_OK):
            print("bench.py: %s missing: build first (bench/run.sh does)" % path, file=sys.stderr)
            return 2
    meta = dict(date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"), host=platform.node(),
                kernel=platform.release(), cpus=os.cpu_count(),
                cpu_model=sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
                git=sh("git -C %s describe --always --dirty 2>/dev/null" % b.root),
                liburoce=os.path.join(b.root, "build", "lib", "liburoce.so"),
                perftest=sh("dpkg-query -W -f '${Version}' perftest"), qperf=sh("dpkg-query -W -f '${Version}' qperf"),
                gnuplot=sh("gnuplot --version"), python=platform.python_version(),
                uroce_env={k: v for k, v in os.environ.items() if k.startswith("UROCE_")},
                mode=("onesided " if args.onesided else "connect " if args.connect else
                      "namespaces " if args.namespaces else "") +
                ("quick" if b.quick else "full"), reps=b.reps,
                sizes=b.sizes, config=b.cfg)
    try:
        meta["liburoce_mtime"] = datetime.datetime.fromtimestamp(os.path.getmtime(meta["liburoce"])).strftime(
            "%Y-%m-%d %H:%M:%S")
    except OSError:
        meta["liburoce_mtime"] = None
    meta.update(collect_meta(b, "start"))
    b.meta = meta
    header = ["uroce benchmark  %s  host %s  %d CPUs (%s)  kernel %s" % (meta["date"], meta["host"], meta["cpus"],
                                                                         meta["cpu_model"], meta["kernel"]),
              ("uroce %s (liburoce.so built %s); mode %s, one pass" % (meta["git"], meta["liburoce_mtime"], meta["mode"])
               if args.onesided or args.connect else
               "uroce %s (liburoce.so built %s); perftest %s, qperf %s; mode %s, %d repetition(s), sizes %s" % (
                   meta["git"], meta["liburoce_mtime"], meta["perftest"], meta["qperf"], meta["mode"], b.reps,
                   ", ".join(fmt_size(s) for s in ((NS_SIZES_QUICK if b.quick else NS_SIZES) if args.namespaces
                                                    else b.sizes)))),
              "load at start: %s" % meta["uptime_start"]]
    print("\n".join(header), flush=True)
    try:
        b.run()
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", file=sys.stderr)
    finally:
        if b.qperf:
            b.qperf[0].kill()
    meta.update(collect_meta(b, "end"))
    meta["elapsed_s"] = round(b.elapsed(), 1)
    b.summarize()
    tabs = tables(b)
    header.append("load at end:   %s   (run took %.0f s)" % (meta["uptime_end"], meta["elapsed_s"]))
    failures = [r for r in b.runs if not r["ok"]]
    os.makedirs(b.out, exist_ok=True)
    perr = plot(b, b.out) if not (args.onesided or args.connect or args.namespaces) else \
        "not drawn for --onesided / --connect / --namespaces"
    text = "\n".join(header) + "\n" + render_text(tabs)
    if failures:
        text += "\n\n== Failures (%d; probe = calibration run)\n" % len(failures)
        for r in failures:
            text += "  %s %s rep %s: %s\n     cmd: %s\n" % (r["metric"], fmt_size(r["size"]) if r["size"] else "",
                                                         r["rep"], r["reason"], r.get("cmd", "-"))
    text += "\n\nwritten: %s/results.json, results.md, results.txt, %s, logs/\n" % (
        b.out, "results.png" if not perr else "NO PLOT (%s)" % perr)
    print(text.split("\n", len(header) - 1)[-1], flush=True)  # the first lines were printed at the start
    with open(os.path.join(b.out, "results.txt"), "w") as f:
        f.write(text + "\n")
    md = "# uroce benchmark results\n\n" + "\n".join("    " + h for h in header) + "\n" + render_md(tabs)
    if failures:
        md += "\n\n### Failures\n\n" + "\n".join("* `%s` %s rep %s: %s  \n  `%s`" % (
            r["metric"], fmt_size(r["size"]) if r["size"] else "", r["rep"], r["reason"], r.get("cmd", "-"))
            for r in failures)
    md += "\n\n![plot](results.png)\n" if not perr else "\n\nNo plot: %s\n" % perr
    with open(os.path.join(b.out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(b.out, "results.json"), "w") as f:
        json.dump(dict(meta=meta, summary=b.summary, runs=b.runs, plot_error=perr), f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
