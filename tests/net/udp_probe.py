#!/usr/bin/python3
"""udp_probe.py - numbered UDP datagram sender/receiver for the impairment
self-test (tests/net/test_impair_selftest.sh).

  udp_probe.py recv --bind ADDR --port P --out FILE.json [--ready-file F]
               [--idle-ms 400] [--timeout 10] [--run-id ID] [--shell]
  udp_probe.py send --dst ADDR --port P --count N [--interval-us 50]
               [--size 64] [--run-id ID]

Every datagram carries magic, run id, sequence number and the sender's
CLOCK_MONOTONIC send time (both ends run on the same host, in different
network namespaces, so the clock is shared).  The receiver stops after
--idle-ms without traffic (once something arrived) or after --timeout, and
reports: received (unique), duplicates, missing, max copies of one datagram,
reordered (first arrivals whose seq is lower than one already seen), max
reorder displacement, one-way latency min/p50/p99/max in us, and the UDP
RcvbufErrors delta of the receiving namespace (socket-buffer drops, which
would otherwise be mistaken for impairment loss).
"""

import argparse
import json
import os
import socket
import struct
import sys
import time

MAGIC = 0x55525042  # "URPB"
HDR = struct.Struct("!IIIQ")  # magic, run_id, seq, send_ns
BIG_BUF = 8 << 20


def family_of(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def udp_rcvbuf_errors():
    """UDP+UDP6 RcvbufErrors of the current network namespace."""
    total = 0
    try:
        with open("/proc/net/snmp") as f:
            lines = [l.split() for l in f if l.startswith("Udp:")]
        if len(lines) >= 2:
            total += int(lines[1][lines[0].index("RcvbufErrors")])
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/net/snmp6") as f:
            for l in f:
                k, _, v = l.partition(" ")
                if k == "Udp6RcvbufErrors":
                    total += int(v)
    except (OSError, ValueError):
        pass
    return total


def set_buf(sock, opt_force, opt, size):
    try:
        sock.setsockopt(socket.SOL_SOCKET, opt_force, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, opt, size)


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, int(round(p / 100.0 * (len(sorted_vals) - 1))))
    return sorted_vals[i]


def do_recv(a):
    s = socket.socket(family_of(a.bind), socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    set_buf(s, getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF, BIG_BUF)
    s.bind((a.bind, a.port))
    rb0 = udp_rcvbuf_errors()
    if a.ready_file:
        with open(a.ready_file + ".tmp", "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(a.ready_file + ".tmp", a.ready_file)

    copies = {}          # seq -> count
    lat_ns = []          # first arrivals only
    reordered = 0
    max_disp = 0
    max_seq = -1
    foreign = 0
    start = time.monotonic()
    deadline = start + a.timeout
    last_rx = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        if last_rx is not None:
            wait = last_rx + a.idle_ms / 1000.0 - now
            if wait <= 0:
                break
        else:
            wait = deadline - now
        s.settimeout(min(wait, deadline - now))
        try:
            data = s.recv(65536)
        except socket.timeout:
            continue
        rx_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        last_rx = time.monotonic()
        if len(data) < HDR.size:
            foreign += 1
            continue
        magic, run_id, seq, tx_ns = HDR.unpack_from(data)
        if magic != MAGIC or (a.run_id is not None and run_id != a.run_id):
            foreign += 1
            continue
        n = copies.get(seq, 0)
        copies[seq] = n + 1
        if n:
            continue
        lat_ns.append(rx_ns - tx_ns)
        if seq < max_seq:
            reordered += 1
            max_disp = max(max_disp, max_seq - seq)
        else:
            max_seq = seq

    rb1 = udp_rcvbuf_errors()
    lat_us = sorted(x / 1000.0 for x in lat_ns)
    expected = a.count if a.count is not None else (max_seq + 1 if max_seq >= 0 else 0)
    uniq = len(copies)
    total = sum(copies.values())
    res = {
        "expected": expected,
        "received": uniq,
        "total_datagrams": total,
        "missing": max(0, expected - len([q for q in copies if q < expected])),
        "duplicates": total - uniq,
        "max_copies": max(copies.values()) if copies else 0,
        "reordered": reordered,
        "max_reorder_distance": max_disp,
        "lat_min_us": round(lat_us[0], 1) if lat_us else -1,
        "lat_p50_us": round(pct(lat_us, 50), 1) if lat_us else -1,
        "lat_p99_us": round(pct(lat_us, 99), 1) if lat_us else -1,
        "lat_max_us": round(lat_us[-1], 1) if lat_us else -1,
        "rcvbuf_errors": rb1 - rb0,
        "foreign": foreign,
        "elapsed_s": round(time.monotonic() - start, 3),
    }
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            json.dump(res, f, indent=1)
        os.rename(a.out + ".tmp", a.out)
    if a.shell:
        for k, v in res.items():
            print("%s%s=%s" % (a.prefix, k.upper(), int(v) if isinstance(v, bool) else v))
    else:
        json.dump(res, sys.stdout)
        print()
    return 0


def do_send(a):
    s = socket.socket(family_of(a.dst), socket.SOCK_DGRAM)
    set_buf(s, getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF, BIG_BUF)
    size = max(a.size, HDR.size)
    pad = b"\0" * (size - HDR.size)
    dst = (a.dst, a.port)
    run_id = a.run_id if a.run_id is not None else 0
    interval = a.interval_us * 1000
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    for seq in range(a.count):
        if interval:
            # busy-wait pacing: sleep() granularity is far too coarse
            target = t0 + seq * interval
            while time.clock_gettime_ns(time.CLOCK_MONOTONIC) < target:
                pass
        tx = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        pkt = HDR.pack(MAGIC, run_id, seq, tx) + pad
        while True:
            try:
                s.sendto(pkt, dst)
                break
            except (BlockingIOError, InterruptedError):
                time.sleep(0.0001)
            except OSError as e:
                # ENOBUFS can happen while many packets sit in NFQUEUE
                if e.errno == 105:
                    time.sleep(0.0005)
                    continue
                raise
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, default=4791)
    r.add_argument("--count", type=int, default=None,
                   help="datagrams the sender sends (for 'missing')")
    r.add_argument("--out")
    r.add_argument("--ready-file")
    r.add_argument("--idle-ms", type=int, default=400)
    r.add_argument("--timeout", type=float, default=10.0)
    r.add_argument("--run-id", type=int, default=None)
    r.add_argument("--shell", action="store_true",
                   help="print KEY=VALUE lines instead of JSON")
    r.add_argument("--prefix", default="R_")
    w = sub.add_parser("send")
    w.add_argument("--dst", required=True)
    w.add_argument("--port", type=int, default=4791)
    w.add_argument("--count", type=int, default=2000)
    w.add_argument("--interval-us", type=int, default=50)
    w.add_argument("--size", type=int, default=64)
    w.add_argument("--run-id", type=int, default=None)
    a = ap.parse_args()
    return do_recv(a) if a.mode == "recv" else do_send(a)


if __name__ == "__main__":
    sys.exit(main())
