#!/usr/bin/python3
"""cm_hostile_mads: hostile and malformed CM MADs on QP1 against a live
uroce process running an unmodified rping server (issue #15 item 4).

    hostile_mads.py --launcher PATH/uroce

The target is `rping -s` on 127.94.K.1 through uroce.  This script is a
peer at 127.94.K.2:4791 that speaks correct RoCEv2 (right ICRC, computed by
tests/wire/rocewire.py, not by uroce) around CM MADs that are wrong in one
way each, and checks, from `uroce stat -a PID`, that each was dropped and
counted (cm_mads_bad: no well-formed MAD; cm_mads_unmatched: it names no
connection; drop_qkey: a wrong Q_Key), that what deserves an answer got
the kernel's (REJ 8 for a REQ to a port nobody listens on, promptly; REJ 28
for a REQ with a bad IP CM header or transport; a DREP for a DREQ of
unknown IDs), that 300 seeded random MADs change nothing, and that after
all of it the process is alive and a real rping client connects to it and
checks its data.

Exit 0 pass, 1 fail, 77 if something needed is missing.
"""

import argparse
import os
import random
import re
import select
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'wire'))
import rocewire as rw  # noqa: E402

GSI_QKEY = 0x80010000
PORT = 7100
FAILS = []


def fail(msg):
    FAILS.append(msg)
    print('FAIL ' + msg)


def ok(msg):
    print('ok   ' + msg)


def stat(launcher, pid):
    r = subprocess.run([launcher, 'stat', '-a', str(pid)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=10)
    c = {}
    for line in r.stdout.splitlines():
        m = re.match(r'\s+([a-z_0-9]+)\s+(\d+)\s', line)
        if m:
            c[m.group(1)] = int(m.group(2))
    return c


def mad(attr, body, base=1, cls=7, clsver=2, method=3, tid=0x1234):
    hdr = struct.pack('!BBBBHHQHHI', base, cls, clsver, method, 0, 0, tid, attr, 0, 0)
    return hdr + body.ljust(232, b'\0')[:232]


def ip_hdr(src, dst, sport):
    return bytes([0, 0x40]) + struct.pack('!H', sport) + b'\0' * 12 + src + b'\0' * 12 + dst


def req_body(comm_id, port, src, dst, sid_hi=0x01060000, hdr=None, ttype=0, mtu=3):
    b = bytearray(232)
    struct.pack_into('!I', b, 0, comm_id)
    struct.pack_into('!Q', b, 8, (sid_hi << 0) | port)
    b[16:24] = bytes.fromhex('5054009999990001')
    struct.pack_into('!I', b, 32, 0x001101 << 8 | 1)
    struct.pack_into('!I', b, 36, 1)
    b[43] = 20 << 3 | ttype << 1
    struct.pack_into('!I', b, 44, 0x123456 << 8 | 20 << 3 | 7)
    struct.pack_into('!H', b, 48, 0xFFFF)
    b[50] = mtu << 4 | 7
    b[51] = 15 << 4
    struct.pack_into('!HH', b, 52, 0xFFFF, 0xFFFF)
    b[56:72] = b'\0' * 10 + b'\xff\xff' + src
    b[72:88] = b'\0' * 10 + b'\xff\xff' + dst
    b[93] = 64
    b[95] = 19 << 3
    b[140:176] = hdr if hdr is not None else ip_hdr(src, dst, 40000)
    return bytes(b)


class Peer:
    def __init__(self, me, target):
        self.me, self.target = me, target
        self.s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.s.bind((socket.inet_ntoa(me), 4791))
        self.s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO: DF, ID 0 (rocewire)
        self.psn = 0

    def send(self, m, qkey=GSI_QKEY, dqpn=1):
        body = rw.bth(0x64, dqpn, self.psn) + rw.deth(qkey, 1) + m
        self.psn = (self.psn + 1) & 0xFFFFFF
        self.s.sendto(rw.roce_udp_payload(self.me, self.target, 4791, body), (socket.inet_ntoa(self.target), 4791))

    def replies(self, wait=0.5):
        """(attribute, CM body) of the MADs that came back within `wait` s"""
        got, end = [], time.time() + wait
        while True:
            left = end - time.time()
            if left <= 0 or not select.select([self.s], [], [], left)[0]:
                return got
            d, _ = self.s.recvfrom(4096)
            if len(d) >= 12 + 8 + 256 + 4 and d[0] == 0x64:
                m = d[20:276]
                got.append((struct.unpack('!H', m[16:18])[0], m[24:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--launcher', required=True)
    ap.add_argument('--seed', type=int, default=int(os.environ.get('CM_SEED', '1')))
    a = ap.parse_args()
    if not os.path.exists('/usr/bin/rping'):
        print('no rping (rdmacm-utils)')
        return 77
    k = os.getpid() % 200 + 20
    tip, pip, cip = f'127.94.{k}.1', f'127.94.{k}.2', f'127.94.{k}.3'
    target, me = socket.inet_aton(tip), socket.inet_aton(pip)
    env = dict(os.environ, UROCE_ADDR=tip)
    srv = subprocess.Popen([a.launcher, 'run', '--', 'rping', '-s', '-a', tip, '-p', str(PORT), '-v', '-C', '5'],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        return run(a, srv, tip, cip, target, me)
    finally:
        if srv.poll() is None:
            srv.kill()
        srv.wait()


def run(a, srv, tip, cip, target, me):
    peer = Peer(me, target)
    # the server's CM is up once a DREQ for unknown IDs gets its DREP
    up = False
    for _ in range(100):
        peer.send(mad(0x15, struct.pack('!III', 0x11111111, 0x22222222, 0x1101 << 8)))
        if any(r[0] == 0x16 for r in peer.replies(0.1)):
            up = True
            break
    if not up:
        fail('the rping server never answered a DREQ (no CM on QP1?)')
        return 1
    pid = srv.pid
    base = stat(a.launcher, pid)
    ok(f'target rping pid {pid} on {tip}: its CM answers (DREP for a DREQ of unknown IDs)')

    def expect(name, sends, counters, replies=None):
        before = stat(a.launcher, pid)
        for m, kw in sends:
            peer.send(m, **kw)
        got = peer.replies(0.5)
        after = stat(a.launcher, pid)
        good = True
        for c, n in counters.items():
            d = after.get(c, 0) - before.get(c, 0)
            if d != n:
                fail(f'{name}: {c} moved by {d}, expected {n}')
                good = False
        want = replies or []
        if sorted(r[0] for r in got) != sorted(w[0] for w in want):
            fail(f'{name}: replies {[hex(r[0]) for r in got]}, expected {[hex(w[0]) for w in want]}')
            good = False
        for (attr, check), (gattr, gbody) in zip(sorted(want), sorted(got)):
            if check and not check(gbody):
                fail(f'{name}: reply {hex(gattr)} has the wrong contents')
                good = False
        if srv.poll() is not None:
            fail(f'{name}: the target exited ({srv.returncode})')
            return False
        if good:
            ok(name)
        return good

    n0 = 0
    good_dreq = mad(0x15, struct.pack('!III', 1, 2, 3 << 8))
    # 1. no well-formed CM MAD: each dropped, counted once
    expect('malformed MADs dropped and counted',
           [(good_dreq[:200], {}), (mad(0x15, b'', base=2), {}), (mad(0x15, b'', cls=4), {}),
            (mad(0x15, b'', clsver=1), {}), (mad(0x15, b'', method=1), {}), (mad(0x09, b''), {}),
            (mad(0x19, b''), {}), (mad(0x1A, b''), {}), (mad(0x0000, b''), {}), (good_dreq + b'\0' * 8, {})],
           {'cm_mads_bad': 10, 'cm_mads_rx': n0})
    # 2. well formed, naming no connection of ours
    expect('replies naming no connection dropped and counted',
           [(mad(0x13, struct.pack('!II', 0xabcdef01, 0x0badf00d)), {}), (mad(0x14, struct.pack('!II', 5, 6)), {}),
            (mad(0x12, struct.pack('!II', 7, 8)), {}), (mad(0x11, struct.pack('!II', 9, 10)), {}),
            (mad(0x16, struct.pack('!II', 11, 12)), {}), (mad(0x18, struct.pack('!I', 13)), {})],
           {'cm_mads_unmatched': 6, 'cm_mads_rx': 6, 'cm_mads_bad': 0})
    # 3. wrong Q_Key: the UD check drops it before the CM sees it (§1.5 item 6)
    expect('a wrong Q_Key dropped and counted', [(good_dreq, {'qkey': 0x12345678})],
           {'drop_qkey': 1, 'cm_mads_rx': 0})
    # 4. what the kernel answers
    def rej(reason):
        return lambda b: struct.unpack('!H', b[10:12])[0] == reason and struct.unpack('!I', b[4:8])[0] == 0x7777
    t = time.time()
    expect('a REQ to a port nobody listens on: REJ 8',
           [(mad(0x10, req_body(0x7777, PORT + 99, me, target)), {})], {'cm_rejects_tx': 1},
           [(0x12, rej(8))])
    if time.time() - t > 1.0:
        fail('REJ 8 took more than 1 s')
    expect('a REQ with a foreign service ID: REJ 8',
           [(mad(0x10, req_body(0x7777, PORT, me, target, sid_hi=0x77010000)), {})], {'cm_rejects_tx': 1},
           [(0x12, rej(8))])
    expect('a REQ with a bad IP CM header: REJ 28',
           [(mad(0x10, req_body(0x7777, PORT, me, target, hdr=b'\x05\x40' + b'\0' * 34)), {})],
           {'cm_rejects_tx': 1}, [(0x12, rej(28))])
    expect('a REQ for an address not the target\'s: REJ 28',
           [(mad(0x10, req_body(0x7777, PORT, me, target, hdr=ip_hdr(me, socket.inet_aton('127.1.2.3'), 1))), {})],
           {'cm_rejects_tx': 1}, [(0x12, rej(28))])
    expect('a REQ for an XRC transport: REJ 28',
           [(mad(0x10, req_body(0x7777, PORT, me, target, ttype=3)), {})], {'cm_rejects_tx': 1}, [(0x12, rej(28))])
    # a listener answers only requests of its own QP type (§4.3, the
    # kernel's cma_check_req_qp_type): rping's listener is RC
    expect('a UC REQ to an RC listener: REJ 28',
           [(mad(0x10, req_body(0x7777, PORT, me, target, ttype=1)), {})], {'cm_rejects_tx': 1}, [(0x12, rej(28))])
    sidr = struct.pack('!IHHQ', 0x7777, 0xFFFF, 0, 0x01060000 | PORT) + ip_hdr(me, target, 40000)
    expect('a SIDR_REQ to an RC listener: SIDR_REP status 2 (reject)',
           [(mad(0x17, sidr), {})], {'cm_mads_rx': 1},
           [(0x18, lambda b: struct.unpack('!I', b[0:4])[0] == 0x7777 and b[4] == 2)])
    expect('a DREQ of unknown IDs: DREP',
           [(mad(0x15, struct.pack('!III', 0x3333, 0x4444, 0x1101 << 8)), {})], {'cm_mads_rx': 1},
           [(0x16, lambda b: struct.unpack('!II', b[0:8]) == (0x4444, 0x3333))])
    # 5. seeded random MADs: never a REQ / SIDR_REQ for the listening port
    rnd = random.Random(a.seed)
    before = stat(a.launcher, pid)
    for i in range(300):
        attr = rnd.choice([0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x18, 0x19, 0x10, 0x17, rnd.randrange(0x10000)])
        body = bytearray(rnd.randbytes(232))
        if attr in (0x10, 0x17):
            struct.pack_into('!H', body, 14, PORT + 1 + rnd.randrange(100))  # the service ID's port
        m = bytearray(mad(attr, bytes(body), tid=rnd.getrandbits(64)))
        if rnd.random() < 0.2:
            m[rnd.randrange(4)] = rnd.randrange(256)
        peer.send(bytes(m[:rnd.choice([256, 256, 256, rnd.randrange(1, 300)])]))
    peer.replies(1.0)
    after = stat(a.launcher, pid)
    seen = sum(after.get(c, 0) - before.get(c, 0) for c in ('cm_mads_rx', 'cm_mads_bad')) + \
        after.get('drop_truncated', 0) - before.get('drop_truncated', 0) + \
        after.get('drop_bad_header', 0) - before.get('drop_bad_header', 0)
    if srv.poll() is not None:
        fail(f'the target exited after random MADs ({srv.returncode})')
        return 1
    if after.get('rx_packets', 0) - before.get('rx_packets', 0) < 300:
        fail('the 300 random MADs did not all arrive')
    else:
        ok(f'300 seeded random MADs (seed {a.seed}): target alive, {seen} accounted by the CM and receive checks')
    # 6. the real thing still works
    r = subprocess.run([a.launcher, 'run', '--', 'rping', '-c', '-a', tip, '-p', str(PORT), '-v', '-C', '5'],
                       env=dict(os.environ, UROCE_ADDR=cip), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    pings = len(re.findall(r'^ping data', r.stdout, re.M))
    if r.returncode or pings != 5:
        fail(f'rping client after the hostile MADs: exit {r.returncode}, {pings} pings\n{r.stdout[-800:]}')
    else:
        ok('rping client afterwards: 5 pings, data checked, exit 0')
    try:
        srv.wait(timeout=20)
    except subprocess.TimeoutExpired:
        fail('the rping server did not finish')
    if srv.returncode not in (0, None):
        fail(f'rping server exit {srv.returncode}')
    print(f'{len(FAILS)} failed' if FAILS else 'PASS')
    return 1 if FAILS else 0


if __name__ == '__main__':
    sys.exit(main())
