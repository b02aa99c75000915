#!/usr/bin/python3
"""Tests of bench/costs.py, "RDMA's costs, measured" (issue #18).  None
depends on timing: they check the model's printed figures, and the copies
and system calls counted on paths whose counts are known.

    test_costs.py BUILD model        the model's figures, to the printed digit
    test_costs.py BUILD paths        copies and system calls of TCP, the rings and
                                     loopback UDP at 64 KiB and 4 KiB (one host)
    test_costs.py BUILD namespaces   the same between two namespaces (root; 77: skipped)
    test_costs.py BUILD unprivileged the one-host rows as an ordinary user (uid 4321,
                                     by setpriv: root needed to become it; 77: skipped)
    test_costs.py BUILD strace       uroce's sys_* counters against strace's count
                                     of the same calls in the same run, and no
                                     uncounted call (futex aside) growing with
                                     the messages

Exit 0: passed; 1: failed (what and why printed); 77: skipped.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COSTS = os.path.join(ROOT, "bench", "costs.py")
ITERS = 200
READS = 300
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def test_model(build):
    out = subprocess.run([sys.executable, COSTS, "--model-only", "--build", build], capture_output=True,
                         text=True, check=True).stdout
    # issue #18's figures, each as printed
    for want in ["TCP copies = 3", "RDMA copies = 0",
                 "= 2,048 (copy into the kernel) + 1,024 (segmentation, checksums) + 2,048 (copy out) = 5,120;",
                 "1,500 (send) + 2,000 (the peer's interrupt) + 1,500 (recv) + 5,120 × 0.33 = 6,689.6 ns ≈ 6.7 µs",
                 "RDMA instructions = 50", "RDMA CPU time = 16.5 ns ≈ 0.02 µs", "ratio: CPU 405×",
                 "TCP latency = CPU + DMA + wire = 19.7 µs", "RDMA latency = 13.0 µs", "ratio 1.5×",
                 "a READ costs the target 0 instructions"]:
        check(want in out, "the model prints %r" % want)
    # and follows --size: 4 KiB is 320 instructions, 5,105.6 ns
    out = subprocess.run([sys.executable, COSTS, "--model-only", "--size", "4096"], capture_output=True,
                         text=True, check=True).stdout
    check("= 320;" in out and "5,105.6 ns" in out, "the model at 4 KiB: 320 instructions, 5,105.6 ns")


def measure(build, size, extra):
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "costs.json")
        r = subprocess.run([sys.executable, COSTS, "--build", build, "--size", str(size), "--iters", str(ITERS),
                            "--reads", str(READS), "--wait", "block", "--json", js] + extra, capture_output=True, text=True, timeout=600)
        print(r.stdout[-3000:])
        check(r.returncode == 0, "costs.py --size %d %s ran every row%s" % (
            size, " ".join(extra), "" if r.returncode == 0 else " (rc %d: %s)" % (r.returncode, r.stderr[-500:])))
        return json.load(open(js)) if os.path.exists(js) else {"rows": []}


def sides(res, label):
    for row in res["rows"]:
        if row["label"].startswith(label) and not row["error"]:
            return row["sides"]
    check(False, "a row %r was measured" % label)
    return None


def check_tcp(res, label, size):
    s = sides(res, label)
    if not s:
        return
    msgs = ITERS  # each side sends ITERS messages in the ping-pong and receives ITERS
    for role in ("client", "server"):
        p = s[role + "_pingpong"]
        check(p["own_tx_bytes"] == msgs * size and p["own_rx_bytes"] == msgs * size,
              "%s %s: one copy into the kernel and one out per message (%d / %d bytes)"
              % (label, role, p["own_tx_bytes"], p["own_rx_bytes"]))
        # blocking send and recv(MSG_WAITALL): one call each a message
        check(p["own_syscalls"] == 2 * msgs, "%s %s: 2 system calls a round trip (%d)" % (label, role,
                                                                                         p["own_syscalls"]))
    t = s["server_read"]
    check(t["own_syscalls"] == 2 * READS + 1, "%s: the READ-like requests cost the target's application recv and "
          "send each (%d calls)" % (label, t["own_syscalls"]))


def exact_or_lost(c, name, want):
    """want bytes exactly; more only where packets were sent again"""
    got = c.get(name, 0)
    lossy = c.get("retransmits", 0) or c.get("duplicates", 0) or c.get("dup_responses", 0)
    return got == want or (lossy and got > want)


def check_uroce(res, label, size, path):
    s = sides(res, label)
    if not s:
        return
    msgs = ITERS
    stages = {"rings_ref": ["ref_bytes_rx"], "rings": ["copy_ring_in_bytes", "copy_ring_out_bytes", "copy_place_bytes"],
              "udp": ["copy_to_kernel_bytes", "copy_from_kernel_bytes", "copy_place_bytes"]}[path]
    # (a packet of a shared address that reached the other process's socket
    # is forwarded, copy_forward_bytes: rare, and counted, not checked here)
    others = {"ref_bytes_rx", "copy_ring_in_bytes", "copy_ring_out_bytes", "copy_place_bytes",
              "copy_to_kernel_bytes", "copy_from_kernel_bytes", "copy_inline_bytes"} - set(stages)
    for role in ("client", "server"):
        c = s[role + "_pingpong"]["counters"] or {}
        lossy = c.get("retransmits", 0) or c.get("duplicates", 0) or c.get("dup_responses", 0)
        for st in stages:
            check(exact_or_lost(c, st, msgs * size), "%s %s: %s = %d bytes, one copy per message (%d)"
                  % (label, role, st, msgs * size, c.get(st, 0)))
        # a message sent again goes as packets, never by reference
        check(lossy or not any(c.get(o, 0) for o in others), "%s %s: no other copy (%s)" % (
            label, role, {o: c.get(o) for o in others if c.get(o)}))
        if path == "rings_ref":
            check(exact_or_lost(c, "sys_vm_readv", msgs), "%s %s: one process_vm_readv per message received (%d)"
                  % (label, role, c.get("sys_vm_readv", 0)))
        if path == "udp":
            check(c.get("sys_sendmmsg", 0) >= msgs, "%s %s: at least one sendmmsg per message sent (%d)"
                  % (label, role, c.get("sys_sendmmsg", 0)))
    # the READ's target: its application made no uroce system call, and only
    # its two side-channel calls (it waits in read() for the client's done)
    t = s["server_read"]
    c = t["counters"] or {}
    app_sys = sum(v for k, v in c.items() if k.startswith("sys_") and k != "sys_by_engine") - c.get("sys_by_engine", 0)
    check(app_sys == 0 and t["own_syscalls"] == 2,
          "%s: READ target's application made no uroce system call (%d) and 2 of its own (%d)"
          % (label, app_sys, t["own_syscalls"]))
    bytes_out = c.get("ref_bytes_tx", 0) if path == "rings_ref" else c.get("copy_to_kernel_bytes", 0) + \
        c.get("copy_ring_in_bytes", 0)
    check(bytes_out >= READS * size, "%s: the target's engine answered every READ (%d bytes)" % (label, bytes_out))


def test_paths(build):
    res = measure(build, 65536, ["--no-namespaces"])
    check_tcp(res, "TCP, loopback", 65536)
    check_uroce(res, "uroce, rings", 65536, "rings_ref")
    check_uroce(res, "uroce, loopback UDP", 65536, "udp")
    # below UROCE_SHM_DIRECT_MIN (16 KiB) the rings carry the bytes: in, out, placed
    res = measure(build, 4096, ["--no-namespaces"])
    check_tcp(res, "TCP, loopback", 4096)
    check_uroce(res, "uroce, rings", 4096, "rings")
    check_uroce(res, "uroce, loopback UDP", 4096, "udp")


def test_namespaces(build):
    if os.geteuid() != 0:
        print("SKIP: network namespaces need root")
        sys.exit(77)
    res = measure(build, 65536, [])
    check_tcp(res, "TCP, two namespaces", 65536)
    check_uroce(res, "uroce, two namespaces", 65536, "udp")


# uroce's counters and the system calls each counts (strace's names)
def test_unprivileged(build):
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"):
        print("SKIP: becoming an ordinary user needs root and setpriv")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        js = os.path.join(tmp, "costs.json")
        r = subprocess.run(["/usr/bin/setpriv", "--reuid=4321", "--regid=4321", "--clear-groups", "env",
                            "HOME=" + tmp, "PYTHONDONTWRITEBYTECODE=1",
                            # Debian's: a python of root's own (pyenv) is not the user's to run
                            "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable,
                            COSTS, "--build", build,
                            "--iters", str(ITERS), "--reads", str(READS), "--wait", "block", "--json", js],
                           capture_output=True, text=True, timeout=600)
        print(r.stdout[-2000:])
        check(r.returncode == 0, "costs.py ran as uid 4321" + ("" if r.returncode == 0 else ": " + r.stderr[-500:]))
        check("the rows between two namespaces need root: skipped" in r.stdout,
              "it says the namespace rows need root")
        res = json.load(open(js)) if os.path.exists(js) else {"rows": []}
    check_tcp(res, "TCP, loopback", 65536)
    check_uroce(res, "uroce, rings", 65536, "rings_ref")
    check_uroce(res, "uroce, loopback UDP", 65536, "udp")


STRACE_KINDS = {"sendmmsg": ["sendmmsg"], "recvmmsg": ["recvmmsg"], "poll": ["epoll_pwait2", "ppoll"],
                "yield": ["sched_yield"], "vm_readv": ["process_vm_readv"], "sched": ["sched_setscheduler", "sched_getaffinity", "sched_setaffinity"],
                "eventfd": ["read", "write"],
                # clock_gettime: the engine's own CPU time (CLOCK_THREAD_CPUTIME_ID
                # has no vDSO path) when it looks where to sleep (engine_place)
                "other": ["sendto", "pread64", "accept4", "fcntl", "sendmsg", "clock_gettime"]}
# set-up calls of these names that uroce does not count (a ring's probe of
# its owner; the engine's first switch to real time, the device's look at its
# CPUs, and glibc's malloc asking for them when a thread takes a new arena;
# sysfs and /proc reads, the exit's printout): in a run's total, not in the
# difference of two runs
SETUP_SLACK = {"vm_readv": 2, "sched": 4}
# what uroce's code calls but cannot count (docs/architecture.md "A
# message's costs, counted")
UNCOUNTED = {"futex"}
LOW, HIGH = 100, 400


def strace_counts(path):
    """strace -c's table: syscall -> calls"""
    got = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 5 and f[-1].isidentifier() and f[3].isdigit():
            got[f[-1]] = int(f[3])
    return got


def stats_counts(err):
    """UROCE_STATS's printout at exit: counter -> value"""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^uroce:\s+(\w+)\s+(\d+)\s", err, re.M)}


def traced_run(build, env, size, iters):
    """A verbs server, and a client of `iters` round trips traced whole
    (strace -f -c: every thread, every call); (strace's counts, uroce's)."""
    uroce, peer = os.path.join(build, "bin", "uroce"), os.path.join(build, "bin", "costs_peer")
    e = dict(os.environ, UROCE_STATS="1", **env)
    with tempfile.TemporaryDirectory() as tmp:
        pf, so = os.path.join(tmp, "port"), os.path.join(tmp, "strace")
        base = [uroce, "run", "--", peer, "--transport=verbs"]
        srv = subprocess.Popen(base + ["--port=0", "--port-file=" + pf], env=e, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        end = time.monotonic() + 20
        while not os.path.exists(pf) and srv.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        if not os.path.exists(pf):
            srv.kill()
            check(False, "the server wrote its port (%s)" % srv.communicate()[1][-300:])
            return {}, {}
        port = open(pf).read().strip()
        cli = subprocess.run(["/usr/bin/strace", "-f", "-c", "-o", so] + base +
                             ["--port=" + port, "--iters=%d" % iters, "--reads=20", "--size=%d" % size, "127.0.0.1"],
                             env=e, capture_output=True, text=True, timeout=300)
        srv.communicate(timeout=60)
        check(cli.returncode == 0, "the traced client ran" + ("" if cli.returncode == 0 else ": " + cli.stderr[-300:]))
        return strace_counts(so), stats_counts(cli.stderr)


def test_strace(build):
    if not os.path.exists("/usr/bin/strace"):
        check(False, "strace is installed (scripts/deps.sh)")
        return
    for path, env, size in (("rings", {}, 65536), ("udp", {"UROCE_SHM": "0"}, 65536), ("rings, 4 KiB", {}, 4096)):
        runs = [traced_run(build, env, size, n) for n in (LOW, HIGH)]
        if not all(st for st, _ in runs):
            continue
        for kind, calls in STRACE_KINDS.items():
            # one run: uroce counted every call of the names only it makes
            if kind not in ("eventfd", "other"):
                for (st, us), n in zip(runs, (LOW, HIGH)):
                    traced, counted = sum(st.get(c, 0) for c in calls), us.get("sys_" + kind, 0)
                    check(counted <= traced <= counted + SETUP_SLACK.get(kind, 0),
                          "%s, %d round trips: strace saw %d %s, uroce counted %d (sys_%s)"
                          % (path, n, traced, "/".join(calls), counted, kind))
            # the difference of two runs, set-up gone: what the messages cost
            d_traced = sum(runs[1][0].get(c, 0) - runs[0][0].get(c, 0) for c in calls)
            d_counted = runs[1][1].get("sys_" + kind, 0) - runs[0][1].get("sys_" + kind, 0)
            check(abs(d_traced - d_counted) <= 3, "%s: %d more round trips made %d more %s (strace), %d counted (sys_%s)"
                  % (path, HIGH - LOW, d_traced, "/".join(calls), d_counted, kind))
        # and no other call grows with the messages (but the one named)
        known = {c for cs in STRACE_KINDS.values() for c in cs} | UNCOUNTED | {"total"}
        grew = {c: runs[1][0].get(c, 0) - runs[0][0].get(c, 0) for c in set(runs[0][0]) | set(runs[1][0])
                if c not in known}
        check(all(abs(v) <= 3 for v in grew.values()),
              "%s: no other system call grows with the round trips (%s)" % (
                  path, {c: v for c, v in grew.items() if abs(v) > 3} or "none"))
        print("     %s: futex calls, not counted by uroce: %d more in %d more round trips"
              % (path, runs[1][0].get("futex", 0) - runs[0][0].get("futex", 0), HIGH - LOW))


def main():
    build, what = sys.argv[1], sys.argv[2]
    {"model": test_model, "paths": test_paths, "namespaces": test_namespaces, "strace": test_strace,
     "unprivileged": test_unprivileged}[what](build)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
