#!/usr/bin/python3
"""wire_capture_check: real verbs workloads through uroce, captured with
UROCE_PCAP on both sides, then every frame checked three ways.

    capture_check.py --launcher PATH/uroce [--keep] [--only NAME,...] [--bound S]
    capture_check.py --analyze FILE.pcap [--pmtu N] [--own IP]   (just the checks)
    capture_check.py --selftest                       (the checks must catch bad frames)

Workloads (WORKLOADS below): ibv_rc_pingpong -s 3000 -n 50, -m 256, -s 1001
(SEND_ONLY with PadCnt 3), ibv_uc_pingpong, ib_read_bw -s 9000, ib_read_lat
-s 61, ib_atomic_bw (FETCH_ADD and CMP_AND_SWAP), ib_write_bw -s 5000,
ib_write_lat -s 13, ib_send_bw -s 2000 (perftest pinned to -m 1024), ib_write_bw
-s 9000 at the port's own MTU (4096 on loopback), ibv_xsrq_pingpong (XRC:
tshark 4.0.17 names its opcodes but dissects nothing past their BTH, so the
XRCETH and the ICRC of XRC frames are checked by our parse alone; the
per-connection rules below cover RC and UC opcodes), and ibv_rc_pingpong over IPv6
GIDs in a private network namespace (skipped without root).  Free TCP ports.

Per frame (frame numbers are 1-based, as in tshark/Wireshark):
 (a) tshark decodes it as InfiniBand over RoCEv2 ("RRoCE", frame.protocols
     contains "infiniband") with no expert item and no [Malformed Packet];
     its decoded opcode, DestQP, PSN, PadCnt and Invariant CRC agree with our
     own parse.  Accepted tshark expert items: none (uroce's frames draw
     none).  tshark runs with the infiniband.payload heuristic sub-dissectors
     (rpcordma, iser, smc, ...) disabled: benchmark payload bytes are not
     upper-layer protocol data and those heuristics misfire on them (an
     all-zero SEND payload decodes as "Malformed RPCoRDMA"); this hides
     nothing about the RoCE headers.
 (b) our own ICRC (rocewire.py: roce-wire.md §4 with zlib.crc32, not uroce's
     code) equals the trailer.
 (c) wire rules: IPv4 IHL 5, DF, protocol 17, header checksum (§1.2); UDP dst
     4791, checksum 0 or (if non-zero) correct, length
     consistent with IP (§1.1, §1.4); TVer 0, P_Key 0xFFFF, BTH byte 4 zero,
     reserved bits zero, M=0 (§2.1); known opcode whose headers fit; payload
     only where the opcode allows one; PadCnt = (4 - len%4)%4 (§7);
     FIRST/MIDDLE payload exactly PMTU, LAST 1..PMTU, ONLY 0..PMTU (§7); AETH
     syndrome is ACK/RNR NAK/NAK 0x60-0x64 (§5); UDP source port constant
     per QP (§1.4).
Per connection, over what each process sent (its address comes from the
program's "local address" output): request PSNs consecutive, READ consuming
ceil(len/PMTU) PSNs, retransmissions only going back (§6.3, §6.6);
FIRST/MIDDLE/LAST order, WRITE bytes = RETH DMA length (§7); AckReq on every
RC SEND/WRITE LAST/ONLY, never on UC (§6.5, §6.7); SE only on the last packet
(§2.1); READ responses: right PSNs, opcodes and lengths, every requested
packet sent; atomic ACK PSN = request PSN; no ACK beyond the highest request
PSN; MSN never decreasing (§5.4).
Per run: every packet one side received from the other is byte-identical to
one the other side sent; each workload's expected opcodes appear; across all
workloads SEND, WRITE, READ request/response, ACK, both atomics and UC appear.

A workload whose programs exit non-zero is run once more (ibv_rc_pingpong's
fixed 67 ms ACK timeout x 7 retries cannot ride out long CPU starvation); a
second failure counts.

Exit 0 pass, 1 fail (file and frame number printed), 77 if a tool is missing.
"""

import argparse
import collections
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rocewire as rw  # noqa: E402

SKIP = 77
# Expert items we accept from tshark 4.0 on uroce traffic, with the reason.
# (message substring -> why).  Empty: uroce's frames draw none.
ACCEPTED_EXPERT = {}

# heuristic short names (tshark 4.0) of the infiniband.payload table; names
# this tshark does not know are dropped at the first run
PAYLOAD_HEURISTICS = ['eth_over_ib', 'fc_infiniband', 'sdp_infiniband', 'iser_infiniband', 'lnet_ib',
                      'rpcrdma_infiniband', 'smb_direct_infiniband', 'smcr_infiniband', 'nvme_rdma',
                      'drbd_rdma']

PP = ['-d', 'uroce0', '-g', '0']
# -u 18: 1.07 s local ACK timeout instead of perftest's 67 ms, so that a few
# hundred ms of CPU starvation on a loaded 2-core box (busy-polling benchmarks)
# does not exhaust retry_cnt; retransmissions still happen and are checked
PT = ['-d', 'uroce0', '-x', '0', '-F', '-u', '18']
# perftest takes the port's active MTU unless -m says otherwise: the port's
# MTU follows the interface (lo: 65536 -> 4096, roce-wire.md §7), so the
# workloads below pin 1024 where their packet shapes were chosen for it
PT1K = PT + ['-m', '1024']


def port_mtu_lo():
    """The active MTU uroce reports on loopback: the largest IB MTU that fits
    lo's MTU less 80 bytes (rxe's rule, roce-wire.md §7)."""
    with open('/sys/class/net/lo/mtu') as f:
        mtu = int(f.read())
    m = 256
    while m < 4096 and 2 * m + 80 <= mtu:
        m *= 2
    return m


# name, argv (both sides; the client adds 127.0.0.1), PMTU, opcodes that must appear
WORKLOADS = [
    ('rc_pingpong_3000', ['ibv_rc_pingpong'] + PP + ['-s', '3000', '-n', '50', '-c'], 1024,
     {0x00, 0x01, 0x02, 0x11}),
    ('rc_pingpong_mtu256', ['ibv_rc_pingpong'] + PP + ['-m', '256', '-n', '50', '-c'], 256,
     {0x00, 0x01, 0x02, 0x11}),
    ('rc_pingpong_pad', ['ibv_rc_pingpong'] + PP + ['-s', '1001', '-n', '20', '-c'], 1024,
     {0x04, 0x11}),
    ('uc_pingpong', ['ibv_uc_pingpong'] + PP + ['-s', '3000', '-n', '20'], 1024,
     {0x20, 0x21, 0x22}),
    ('read_bw', ['ib_read_bw'] + PT1K + ['-n', '50', '-s', '9000'], 1024,
     {0x0C, 0x0D, 0x0E, 0x0F}),
    ('read_lat_small', ['ib_read_lat'] + PT1K + ['-n', '50', '-s', '61'], 1024,
     {0x0C, 0x10}),
    ('atomic_fetch_add', ['ib_atomic_bw'] + PT1K + ['-n', '50'], 1024,
     {0x14, 0x12}),
    ('atomic_cmp_swap', ['ib_atomic_bw'] + PT1K + ['-n', '50', '-A', 'CMP_AND_SWAP'], 1024,
     {0x13, 0x12}),
    ('write_bw', ['ib_write_bw'] + PT1K + ['-n', '50', '-s', '5000'], 1024,
     {0x06, 0x07, 0x08, 0x11}),
    ('write_lat_small', ['ib_write_lat'] + PT1K + ['-n', '50', '-s', '13'], 1024,
     {0x0A, 0x11}),
    ('send_bw', ['ib_send_bw'] + PT1K + ['-n', '50', '-s', '2000'], 1024,
     {0x00, 0x02, 0x11}),
    # the port's own MTU: 4096-byte packets on loopback
    ('write_bw_port_mtu', ['ib_write_bw'] + PT + ['-n', '50', '-s', '9000'], port_mtu_lo(),
     {0x06, 0x07, 0x08, 0x11}),
    # XRC (ibv_xsrq_pingpong, its default MTU 1024): SENDs with the XRCETH
    # naming the peer's XRC SRQ, XRC ACKs
    ('xsrq_pingpong', ['ibv_xsrq_pingpong'] + PP + ['-s', '3000', '-n', '20'], 1024,
     {0xA0, 0xA1, 0xA2, 0xB1}),
    # IPv6 GIDs (§1.3): run in a private namespace, UROCE_ADDR=fd00:4791::1 / ::2
    ('rc_pingpong_ipv6', ['ibv_rc_pingpong'] + PP + ['-s', '3000', '-n', '20', '-c'], 1024,
     {0x00, 0x01, 0x02, 0x11}),
]
IPV6_WORKLOADS = {'rc_pingpong_ipv6'}
MUST_SEE = {
    'SEND': {0x00, 0x01, 0x02, 0x04}, 'WRITE': {0x06, 0x07, 0x08, 0x0A},
    'READ request': {0x0C}, 'READ response': {0x0D, 0x0E, 0x0F, 0x10},
    'ACK': {0x11}, 'atomic ACK': {0x12}, 'COMPARE_SWAP': {0x13}, 'FETCH_ADD': {0x14},
    'UC SEND': {0x20, 0x21, 0x22},
}


class Problems:
    def __init__(self, quiet=False):
        self.items = []
        self.quiet = quiet

    def add(self, where, msg):
        self.items.append(f'{where}: {msg}')
        if not self.quiet and len(self.items) <= 200:
            print(f'FAIL {where}: {msg}', flush=True)


# --------------------------------------------------------------------------
# per-frame checks

def check_frame_rules(rf, pmtu, where, P):
    b = rf.bth
    if rf.ipver == 4:
        ip = rf.ip
        if ip[0] != 0x45:
            P.add(where, f'IPv4 version/IHL byte {ip[0]:#04x}, want 0x45 (§1.2)')
        frag = struct.unpack('!H', ip[6:8])[0]
        if frag != 0x4000:
            P.add(where, f'IPv4 flags/fragment {frag:#06x}, want 0x4000 DF (§1.2)')
        s = sum(struct.unpack('!10H', ip[:20]))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        if s != 0xFFFF:
            P.add(where, 'IPv4 header checksum wrong')
    else:
        ip = rf.ip
        if ip[0] >> 4 != 6 or ip[6] != 17:
            P.add(where, 'IPv6 version/next header wrong (§1.3)')
    if rf.udp_csum:     # 0 (what rxe sends) or, if non-zero, correct (§1.4)
        ip, ihl = rf.ip, rf.ihl
        if rf.ipver == 4:
            s = sum(struct.unpack('!4H', ip[12:20])) + 17 + rf.udp_len
        else:
            s = sum(struct.unpack('!16H', ip[8:40])) + 17 + rf.udp_len
        udp = ip[ihl:] + (b'\0' if len(ip[ihl:]) % 2 else b'')
        s += sum(struct.unpack('!%dH' % (len(udp) // 2), udp))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        if s != 0xFFFF:
            P.add(where, f'UDP checksum {rf.udp_csum:#06x} is non-zero but wrong (§1.4)')
    if rf.eth_pad:
        P.add(where, f'{rf.eth_pad} bytes after the IP packet')
    if not rf.known:
        P.add(where, f'opcode {rf.opcode:#04x} is not in the §3 table')
        return
    name, hlen, payload_ok = rw.OPCODES[rf.opcode]
    if rf.tver != 0:
        P.add(where, f'TVer {rf.tver} (§2.1)')
    if rf.pkey != 0xFFFF:
        P.add(where, f'P_Key {rf.pkey:#06x}, want 0xFFFF (§2.1)')
    if rf.mig:
        P.add(where, 'MigReq set (rxe sends 0, §2.1)')
    if b[4] != 0 and rf.opcode != 0x81:
        P.add(where, f'BTH byte 4 (FECN/BECN/reserved) {b[4]:#04x}, want 0 (§2.1)')
    if b[8] & 0x7F:
        P.add(where, f'BTH reserved 7 bits {b[8] & 0x7F:#x} (§2.1)')
    body = len(rf.udp_payload) - 12 - hlen - 4          # payload + pad
    if body < 0:
        P.add(where, f'{name}: {len(rf.udp_payload)}-byte UDP payload cannot hold its headers')
        return
    if body < rf.pad:
        P.add(where, f'{name}: PadCnt {rf.pad} exceeds the {body} bytes after the headers')
        return
    plen = body - rf.pad
    if plen and not payload_ok:
        P.add(where, f'{name} carries {plen} payload bytes (§3: none)')
    if rf.pad != (4 - plen % 4) % 4:
        P.add(where, f'{name}: PadCnt {rf.pad} for a {plen}-byte payload (§7)')
    if payload_ok and rf.opcode not in (0x80,):
        pos = name.rsplit('_', 1)[-1] if not name.endswith('IMM') and not name.endswith('INV') \
            else name.split('_')[-2]
        if pos in ('FIRST', 'MIDDLE') and plen != pmtu:
            P.add(where, f'{name} with {plen} payload bytes, PMTU {pmtu} (§7)')
        elif pos == 'LAST' and not 1 <= plen <= pmtu:
            P.add(where, f'{name} with {plen} payload bytes, want 1..{pmtu} (§7)')
        elif pos == 'ONLY' and plen > pmtu:
            P.add(where, f'{name} with {plen} payload bytes, PMTU {pmtu} (§7)')
    if rf.opcode in (0x0D, 0x0F, 0x10, 0x11, 0x12, 0xAD, 0xAF, 0xB0, 0xB1, 0xB2):
        syn = rf.ext[0]
        if syn & 0x80 or (syn & 0x60) == 0x40 or ((syn & 0x60) == 0x60 and syn > 0x64):
            P.add(where, f'{name}: AETH syndrome {syn:#04x} is reserved (§5)')
    if rf.opcode in (0x0C,) and struct.unpack('!I', rf.ext[12:16])[0] > 1 << 31:
        P.add(where, 'READ request DMA length above 2^31 (§2.2)')
    if 0xA0 <= rf.opcode <= 0xB7 and rw.OPCODES[rf.opcode & 0x1F][1] != hlen:
        # an XRC request: XRCETH = 8 reserved bits, the 24-bit XRC SRQ number (§2.2)
        srqn = struct.unpack('!I', rf.ext[0:4])[0]
        if srqn >> 24 or not srqn:
            P.add(where, f'{name}: XRCETH {srqn:#010x}, want 0x00 + a non-zero SRQ number (§2.2)')
    if rf.opcode in (0x13, 0x14) and struct.unpack('!Q', rf.ext[0:8])[0] & 7:
        P.add(where, 'atomic VA not 8-byte aligned (§2.2)')


def run_tshark(path):
    while True:
        rc, err, rows = _run_tshark(path)
        unknown = [h for h in PAYLOAD_HEURISTICS if f'No such protocol {h},' in err]
        if not unknown:
            return rc, err, rows
        for h in unknown:
            PAYLOAD_HEURISTICS.remove(h)


def _run_tshark(path):
    cmd = ['tshark', '-n', '-r', path]
    for h in PAYLOAD_HEURISTICS:
        cmd += ['--disable-heuristic', h]
    fields = ['frame.number', 'frame.protocols', '_ws.col.Protocol', '_ws.expert.message',
              '_ws.expert.severity', '_ws.malformed', 'infiniband.bth.opcode',
              'infiniband.bth.destqp', 'infiniband.bth.psn', 'infiniband.bth.padcnt',
              'infiniband.invariant.crc', '_ws.col.Info']
    cmd += ['-T', 'fields', '-E', 'separator=\t', '-E', 'occurrence=a', '-E', 'aggregator=;']
    for f in fields:
        cmd += ['-e', f]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    err = '\n'.join(x for x in r.stderr.splitlines() if 'Running as user' not in x and x.strip())
    rows = {}
    for line in r.stdout.splitlines():
        c = line.split('\t')
        c += [''] * (len(fields) - len(c))
        rows[int(c[0])] = dict(zip(fields, c))
    return r.returncode, err, rows


def analyze(path, pmtu, P, label=None, own=None):
    """All per-frame checks on one pcap; with `own` (the capturing process's
    address, bytes) also the per-connection checks.  Returns (frames, Counter
    of opcodes, list of (frame number, RoceFrame))."""
    label = label or os.path.basename(path)
    frames = list(rw.read_pcap(path))
    rc, err, rows = run_tshark(path)
    if rc != 0 or err:
        P.add(label, f'tshark exit {rc}: {err}')
    if len(rows) != len(frames):
        P.add(label, f'tshark decoded {len(rows)} frames, the file holds {len(frames)}')
    ops = collections.Counter()
    parsed = []
    sport_of_qp = {}
    seen = collections.Counter()
    for num, lt, data in frames:
        where = f'{label} frame {num}'
        try:
            rf = rw.parse_frame(data, lt)
        except rw.WireError as ex:
            P.add(where, f'malformed: {ex}')
            continue
        if rf is None:
            P.add(where, 'not a RoCEv2 frame')
            continue
        parsed.append((num, rf))
        ops[rf.opcode] += 1
        seen[(rf.src, rf.dst, rf.dqpn, rf.psn, rf.opcode)] += 1
        # (b) ICRC
        ours = rw.icrc_trailer(rf.ip)
        if ours != rf.icrc_wire:
            P.add(where, f'{rf.opname} PSN {rf.psn:#x}: ICRC trailer {rf.icrc_wire.hex(" ")}, '
                  f'independent computation {ours.hex(" ")} (§4)')
        # (c) rules
        check_frame_rules(rf, pmtu, where, P)
        key = (rf.src, rf.dst, rf.dqpn)
        if sport_of_qp.setdefault(key, rf.sport) != rf.sport:
            P.add(where, f'UDP source port {rf.sport} changed for the flow to QP {rf.dqpn:#x} '
                  f'(was {sport_of_qp[key]}, §1.4)')
        # (a) tshark
        t = rows.get(num)
        if t is None:
            P.add(where, 'missing from tshark output')
            continue
        if 'infiniband' not in t['frame.protocols'].split(':'):
            P.add(where, f'tshark protocols {t["frame.protocols"]!r}, no infiniband')
        if t['_ws.col.Protocol'] != 'RRoCE':
            P.add(where, f'tshark protocol column {t["_ws.col.Protocol"]!r}, want RRoCE')
        if t['_ws.malformed'] or '[Malformed' in t['_ws.col.Info']:
            P.add(where, f'tshark: malformed packet ({t["_ws.col.Info"].strip()})')
        if t['_ws.expert.message']:
            for m in t['_ws.expert.message'].split(';'):
                if not any(k in m for k in ACCEPTED_EXPERT):
                    P.add(where, f'tshark expert item: {m}')
        if 0xA0 <= rf.opcode <= 0xB7 and not t['infiniband.invariant.crc']:
            # tshark 4.0.17 names the XRC opcodes but dissects nothing after
            # their BTH ("Unknown OpCode", the rest a "Vendor Specific or
            # Unknown Header Sequence"): no XRCETH, no ICRC field to compare
            t = dict(t, **{'infiniband.invariant.crc': str(struct.unpack('!I', rf.icrc_wire)[0])})
        try:
            top = int(t['infiniband.bth.opcode'], 0)
            tqp = int(t['infiniband.bth.destqp'], 0)
            tpsn = int(t['infiniband.bth.psn'], 0)
            tpad = int(t['infiniband.bth.padcnt'], 0)
            tcrc = int(t['infiniband.invariant.crc'], 0)
        except ValueError:
            P.add(where, f'tshark fields missing: {t}')
            continue
        want = (rf.opcode, rf.dqpn, rf.psn, rf.pad, struct.unpack('!I', rf.icrc_wire)[0])
        if (top, tqp, tpsn, tpad, tcrc) != want:
            P.add(where, f'tshark decode (opcode,qp,psn,pad,icrc)={(top, tqp, tpsn, tpad, hex(tcrc))} '
                  f'disagrees with ours {want[:4] + (hex(want[4]),)}')
    # informational: the same request PSN twice = a retransmission (go-back-N)
    again = sum(n - 1 for (_, _, _, _, op), n in seen.items() if op in REQUESTS and n > 1)
    if again:
        ops['retransmitted'] = again
    if own:
        flow_checks(parsed, pmtu, label, P, own)
    return frames, ops, parsed


REQUESTS = set(range(0x00, 0x0D)) | {0x13, 0x14, 0x16, 0x17, 0x1D} | set(range(0x20, 0x2C))
RESPONSES = set(range(0x0D, 0x13))


def psn_cmp(a, b):
    d = (a - b) & 0xFFFFFF
    return d - 0x1000000 if d & 0x800000 else d


def flow_checks(parsed, pmtu, label, P, own):
    """Per-connection rules over what the capturing process (address `own`)
    sent - what it received may have lost packets - in one pcap:
    request PSNs consecutive, a READ consuming ceil(len/PMTU) PSNs (§6.3),
    retransmissions only going back (§6.6), new packets after them only at
    the highest PSN not yet sent; FIRST/MIDDLE/LAST order and WRITE
    bytes = RETH DMA length (§7); AckReq on every RC SEND/WRITE LAST/ONLY,
    not on UC (§6.5, §6.7); SE only on LAST/ONLY (§2.1); READ response PSNs
    and lengths, atomic ACK PSNs (§6.3); ACK PSNs never beyond what was sent,
    MSN never going backwards (§5.4)."""
    req = {}                    # (src, dst, dqpn) -> state
    reads = collections.defaultdict(dict)      # (src, dst) -> {first psn: (n, len)}
    atomics = collections.defaultdict(set)     # (src, dst) -> {psn}
    last_req = {}                              # (src, dst) -> last request PSN sent
    msn = {}
    answered = collections.defaultdict(set)    # (src, dst) -> READ response PSNs we sent
    for num, rf in parsed:
        where = f'{label} frame {num}'
        op = rf.opcode
        if op not in rw.OPCODES or rf.paylen < 0:
            continue                    # already reported by the per-frame checks
        name = rw.OPCODES[op][0]
        pos = [p for p in ('FIRST', 'MIDDLE', 'LAST', 'ONLY') if p in name.split('_')]
        pos = pos[0] if pos else 'ONLY'
        if op in REQUESTS:
            key = (rf.src, rf.dst, rf.dqpn)
            if rf.src != own:
                # received: only remember what responses may refer to
                last = rf.psn
                if op == 0x0C:
                    length = struct.unpack('!I', rf.ext[12:16])[0]
                    reads[(rf.src, rf.dst)][rf.psn] = (max(1, -(-length // pmtu)), length)
                    last = psn_add(rf.psn, max(1, -(-length // pmtu)) - 1)
                k2 = (rf.src, rf.dst)           # the highest request PSN seen (duplicates go back)
                if k2 not in last_req or psn_cmp(last, last_req[k2]) > 0:
                    last_req[k2] = last
                if op in (0x13, 0x14):
                    atomics[(rf.src, rf.dst)].add(rf.psn)
                continue
            st = req.setdefault(key, {'next': rf.psn, 'high': rf.psn, 'kind': None, 'left': None,
                                      'restarted': False})
            d = psn_cmp(rf.psn, st['next'])
            if d > 0 and rf.psn != st['high']:
                # after a retransmission the sender may go on with new
                # packets at the highest PSN not yet sent (a probe resends
                # one packet, then new work continues; docs/architecture.md)
                P.add(where, f'{name} PSN {rf.psn:#x} skips ahead of the next PSN {st["next"]:#x} (§6.3)')
            elif d > 0:
                st['restarted'] = True          # resumes where it was before the probe
            elif d < 0:
                st['restarted'] = True          # go-back-N retransmission (§6.6)
            kind = 'SEND' if 'SEND' in name else 'WRITE' if 'WRITE' in name else None
            if kind:
                if pos in ('FIRST', 'ONLY'):
                    if st['kind'] and not st['restarted']:
                        P.add(where, f'{name} starts a message while a {st["kind"]} is in progress (§7)')
                    st['restarted'] = False
                    st['kind'] = kind if pos == 'FIRST' else None
                    if kind == 'WRITE':
                        dmalen = struct.unpack('!I', rf.ext[12:16])[0]
                        st['left'] = dmalen - rf.paylen
                        if pos == 'ONLY' and st['left'] != 0:
                            P.add(where, f'{name} carries {rf.paylen} bytes, RETH DMA length {dmalen} (§7)')
                else:
                    if not st['restarted']:
                        if st['kind'] != kind:
                            P.add(where, f'{name} without a {kind} FIRST before it (§7)')
                        elif kind == 'WRITE' and st['left'] is not None:
                            st['left'] -= rf.paylen
                            if pos == 'LAST' and st['left'] != 0:
                                P.add(where, f'WRITE message bytes differ from the RETH DMA length by '
                                      f'{-st["left"]} (§7)')
                    if pos == 'LAST':
                        st['kind'] = None
                        st['restarted'] = False
                if pos in ('LAST', 'ONLY'):
                    if op < 0x20 and not rf.ackreq:
                        P.add(where, f'RC {name} without AckReq: rxe would never ACK it (§6.5)')
                    if op >= 0x20 and rf.ackreq:
                        P.add(where, f'UC {name} with AckReq set (§6.7: send 0)')
                elif rf.se:
                    P.add(where, f'{name} with SE set on a non-final packet (§2.1)')
            n = 1
            if op == 0x0C:
                length = struct.unpack('!I', rf.ext[12:16])[0]
                n = max(1, -(-length // pmtu))
                reads[(rf.src, rf.dst)][rf.psn] = (n, length)
            if op in (0x13, 0x14):
                atomics[(rf.src, rf.dst)].add(rf.psn)
            st['next'] = psn_add(rf.psn, n)
            if psn_cmp(st['next'], st['high']) > 0:
                st['high'] = st['next']
        elif op in RESPONSES and rf.src == own:
            back = (rf.dst, rf.src)
            if op in (0x0D, 0x0E, 0x0F, 0x10):
                hit = None
                for p0, (n, length) in reads[back].items():
                    i = psn_cmp(rf.psn, p0)
                    if 0 <= i < n:
                        hit = (p0, n, length, i)
                if not hit:
                    P.add(where, f'{name} PSN {rf.psn:#x} matches no READ request (§6.3)')
                else:
                    p0, n, length, i = hit
                    answered[back].add(rf.psn)
                    want = pmtu if i < n - 1 else length - (n - 1) * pmtu
                    ok_ops = {0x10} if n == 1 else ({0x0D} if i == 0 else {0x0E, 0x0F} if i < n - 1 else {0x0F})
                    if op not in ok_ops:
                        P.add(where, f'{name} as packet {i + 1} of a {n}-packet READ response (§7)')
                    if rf.paylen != want:
                        P.add(where, f'{name} packet {i + 1}/{n} carries {rf.paylen} bytes, want {want} (§7)')
            elif op == 0x12 and rf.psn not in atomics[back]:
                P.add(where, f'ATOMIC_ACKNOWLEDGE PSN {rf.psn:#x} matches no atomic request (§6.3)')
            if back in last_req and psn_cmp(rf.psn, last_req[back]) > 0:
                P.add(where, f'{name} PSN {rf.psn:#x} beyond the highest request PSN received, '
                      f'{last_req[back]:#x}')
            if op != 0x0E:
                m = struct.unpack('!I', rf.ext[:4])[0] & 0xFFFFFF
                key = (rf.src, rf.dst, rf.dqpn)
                if key in msn and psn_cmp(m, msn[key]) < 0:
                    P.add(where, f'{name} MSN {m} went backwards from {msn[key]} (§5.4)')
                msn[key] = m
    # every READ request we received was answered with all its packets (§6.3)
    for back, rq in reads.items():
        if back[1] != own:
            continue
        for p0, (n, length) in rq.items():
            miss = [psn_add(p0, i) for i in range(n) if psn_add(p0, i) not in answered[back]]
            if miss:
                P.add(label, f'READ request PSN {p0:#x} ({length} bytes): response PSNs '
                      f'{", ".join(hex(x) for x in miss[:4])} never sent')


def psn_add(a, n):
    return (a + n) & 0xFFFFFF


def cross_check(name, a_path, a_parsed, a_own, b_path, b_parsed, b_own, P):
    """Everything one side received from the other is byte-identical to a
    packet the other side sent (UDP payload, BTH to ICRC); nothing is
    invented, and on loopback nothing should be lost."""
    for (spath, sparsed, sown, rpath, rparsed) in ((a_path, a_parsed, a_own, b_path, b_parsed),
                                                  (b_path, b_parsed, b_own, a_path, a_parsed)):
        sent = collections.Counter(rf.udp_payload for _, rf in sparsed if rf.src == sown)
        nsent = sum(sent.values())
        got = 0
        for num, rf in rparsed:
            if rf.src != sown:
                continue
            got += 1
            if sent[rf.udp_payload] <= 0:
                P.add(f'{os.path.basename(rpath)} frame {num}',
                      f'received {rf.opname} PSN {rf.psn:#x} that {os.path.basename(spath)} never sent '
                      '(corrupted in transit or in the pcap tap)')
            else:
                sent[rf.udp_payload] -= 1
        if nsent == 0:
            P.add(name, f'{os.path.basename(spath)} shows nothing sent by its own address')
        elif got < nsent:
            print(f'note {name}: {nsent - got} of {nsent} packets sent by {os.path.basename(spath)} '
                  'never reached the other side (loss; retransmission covers it)')


def own_address(log):
    """The capturing process's own address from the program's output:
    ibv_*_pingpong 'local address: ... GID ::ffff:a.b.c.d' or perftest
    'local address: ...' followed by 'GID: 00:...:255:255:a:b:c:d'."""
    try:
        text = open(log).read()
    except OSError:
        return None
    m = re.search(r'local address:.*?GID:? *(\S+)', text, re.S)
    # ibv_xsrq_pingpong: '   local: LID 0000, QPN RECV ..., GID ::ffff:a.b.c.d'
    m = m or re.search(r'^ *local: LID .*?GID (\S+)', text, re.M)
    if not m:
        return None
    g = m.group(1).rstrip(',')
    if g.count(':') == 15 and '.' not in g:                     # perftest: 16 decimal bytes
        raw = bytes(int(x) for x in g.split(':'))
    else:
        raw = socket.inet_pton(socket.AF_INET6, g)
    return raw[12:] if raw[:12] == b'\0' * 10 + b'\xff\xff' else raw


# --------------------------------------------------------------------------
# running workloads

def clean_env():
    """The caller's environment minus UROCE_* settings that would move
    addresses, change the MTU or window, or drop packets."""
    return {k: v for k, v in os.environ.items()
            if not (k.startswith('UROCE_') and k not in ('UROCE_LIB', 'UROCE_LOG', 'UROCE_SPIN_US'))}


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    p = s.getsockname()[1]
    s.close()
    return p


def listening(port, pid):
    # /proc/PID/net: the network namespace of that process
    for f in (f'/proc/{pid}/net/tcp', f'/proc/{pid}/net/tcp6'):
        try:
            for line in open(f).readlines()[1:]:
                c = line.split()
                if int(c[1].rsplit(':', 1)[1], 16) == port and c[3] == '0A':
                    return True
        except OSError:
            pass
    return False


def stop(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        pass


def run_workload(launcher, name, argv, wd, bound, netns=None):
    """Server and client under the launcher, each with its own pcap.  With
    netns, both run in that namespace with UROCE_ADDR = IPV6_ADDRS."""
    port = free_port()
    argv = argv + ['-p', str(port)]
    spcap, cpcap = os.path.join(wd, name + '.server.pcap'), os.path.join(wd, name + '.client.pcap')
    slog, clog = open(os.path.join(wd, name + '.server.log'), 'w'), open(os.path.join(wd, name + '.client.log'), 'w')
    env = clean_env()
    senv, cenv = dict(env, UROCE_PCAP=spcap), dict(env, UROCE_PCAP=cpcap)
    pre = []
    if netns:
        pre = ['ip', 'netns', 'exec', netns]
        senv['UROCE_ADDR'], cenv['UROCE_ADDR'] = IPV6_ADDRS
    t0 = time.time()
    srv = subprocess.Popen(pre + [launcher, 'run', '--'] + argv, stdout=slog, stderr=subprocess.STDOUT,
                           env=senv, start_new_session=True)
    cli = None
    try:
        while not listening(port, srv.pid):
            if srv.poll() is not None:
                return f'server exited {srv.returncode} before listening'
            if time.time() - t0 > 20:
                return 'server not listening after 20 s'
            time.sleep(0.05)
        cli = subprocess.Popen(pre + [launcher, 'run', '--'] + argv + ['127.0.0.1'], stdout=clog,
                               stderr=subprocess.STDOUT, env=cenv, start_new_session=True)
        deadline = t0 + bound
        while (cli.poll() is None or srv.poll() is None) and time.time() < deadline:
            time.sleep(0.05)
        if cli.poll() is None or srv.poll() is None:
            return f'not finished after {bound} s'
        if cli.returncode or srv.returncode:
            return f'exit status server {srv.returncode}, client {cli.returncode}'
        return None
    finally:
        stop(srv)
        if cli:
            stop(cli)
        slog.close()
        clog.close()


IPV6_ADDRS = ('fd00:4791::1', 'fd00:4791::2')   # ULA, only inside our own namespace


def make_netns():
    """A private network namespace with IPV6_ADDRS on its loopback, or None
    (not root, no iproute2) - then the IPv6 workload is skipped."""
    if os.geteuid() != 0 or not shutil.which('ip'):
        return None
    ns = f'uroce-wire6-{os.getpid()}'
    cmds = [['ip', 'netns', 'add', ns], ['ip', '-n', ns, 'link', 'set', 'lo', 'up']]
    cmds += [['ip', '-n', ns, 'addr', 'add', a + '/128', 'dev', 'lo', 'nodad'] for a in IPV6_ADDRS]
    for c in cmds:
        if subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
            subprocess.run(['ip', 'netns', 'del', ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return None
    return ns


def tail(path, n=6):
    try:
        return ''.join(open(path).readlines()[-n:])
    except OSError:
        return ''


# --------------------------------------------------------------------------

def opsummary(ops):
    """Opcode counts summed over both pcaps (every packet appears twice:
    sent in one, received in the other)."""
    out = [f'{rw.OPCODES.get(o, ("0x%02x" % o,))[0]}={ops[o]}'
           for o in sorted(o for o in ops if isinstance(o, int))]
    if ops.get('retransmitted'):
        out.append(f'(retransmitted requests seen: {ops["retransmitted"]})')
    return ', '.join(out)


def selftest():
    """The checker must flag a bad ICRC, a truncated frame, a wrong PadCnt, a
    wrong P_Key and request PSNs out of order; it must pass a clean frame and
    the retransmission patterns uroce uses."""
    src, dst = bytes([127, 64, 9, 1]), bytes([127, 64, 9, 2])

    def eth(ip):
        return b'\x02\x00' + dst + b'\x02\x00' + src + b'\x08\x00' + ip

    good = rw.bth(0x04, 0x1234, 7, ackreq=1) + b'abcdefgh'

    def send_only(psn):
        return rw.roce_udp_payload(src, dst, 0xC001, rw.bth(0x04, 0x1234, psn, ackreq=1) + b'abcd')
    cases = [
        ('clean', rw.roce_udp_payload(src, dst, 0xC001, good), 0),
        ('bad ICRC', rw.roce_udp_payload(src, dst, 0xC001, good, bad_icrc=True), 1),
        ('truncated WRITE_ONLY', rw.bth(0x0A, 0x1234, 7) + b'\0' * 8, 1),
        ('wrong PadCnt', rw.roce_udp_payload(src, dst, 0xC001, rw.bth(0x04, 0x1234, 7, pad=2) + b'abcdefg'), 1),
        ('P_Key 0x8001', rw.roce_udp_payload(src, dst, 0xC001, rw.bth(0x04, 0x1234, 7, pkey=0x8001) + b'abcd'), 1),
        # PSN order of what the capturing side sent (§6.3, §6.6): a probe
        # resends one packet, new work then goes on at the highest PSN
        ('probe, then new work at the highest PSN', [send_only(p) for p in (10, 11, 12, 11, 13)], 0),
        ('go-back-N from a NAKed PSN', [send_only(p) for p in (10, 11, 12, 11, 12, 13)], 0),
        ('a PSN skipped', [send_only(p) for p in (10, 11, 13)], 1),
        ('past the highest PSN after a probe', [send_only(p) for p in (10, 11, 12, 11, 14)], 1),
    ]
    bad = 0
    with tempfile.TemporaryDirectory(prefix='wire_selftest.') as d:
        for name, udp, expect in cases:
            path = os.path.join(d, 'x.pcap')
            with open(path, 'wb') as f:
                f.write(struct.pack('<IHHiIII', 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
                for i, u in enumerate(udp if isinstance(udp, list) else [udp]):
                    fr = eth(rw.ipv4_packet(src, dst, 0xC001, u))
                    f.write(struct.pack('<IIII', 0, i, len(fr), len(fr)) + fr)
            P = Problems(quiet=True)
            analyze(path, 1024, P, label=f'selftest[{name}]', own=src)
            if bool(P.items) != bool(expect):
                print(f'SELFTEST BROKEN: case {name!r} gave {len(P.items)} problem(s): {P.items}')
                bad += 1
            else:
                print(f'ok   selftest {name!r}: ' + ('clean' if not P.items else P.items[0]))
    print('selftest: the checks ' + ('work' if not bad else 'are broken'))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--launcher')
    ap.add_argument('--keep', action='store_true', help='keep the pcaps and logs')
    ap.add_argument('--only', help='comma-separated workload names')
    ap.add_argument('--bound', type=int, default=60, help='seconds per workload')
    ap.add_argument('--analyze', help='only check this pcap')
    ap.add_argument('--pmtu', type=int, default=1024)
    ap.add_argument('--own', help='with --analyze: the capturing process\'s IP address')
    ap.add_argument('--selftest', action='store_true')
    a = ap.parse_args()
    # a ctest timeout sends SIGTERM: unwind so that children (and the netns) are cleaned up
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    if not shutil.which('tshark'):
        print('SKIP: tshark not installed')
        return SKIP
    if a.selftest:
        return selftest()
    if a.analyze:
        P = Problems()
        own = socket.inet_pton(socket.AF_INET6 if ':' in a.own else socket.AF_INET, a.own) if a.own else None
        _, ops, parsed = analyze(a.analyze, a.pmtu, P, own=own)
        print(f'{len(parsed)} frames: ' + opsummary(ops))
        return 1 if P.items else 0
    if not a.launcher or not os.access(a.launcher, os.X_OK):
        print(f'SKIP: launcher {a.launcher} missing')
        return SKIP
    workloads = [w for w in WORKLOADS if not a.only or w[0] in a.only.split(',')]
    for w in workloads:
        if not shutil.which(w[1][0]):
            print(f'SKIP: {w[1][0]} not installed (ibverbs-utils / perftest)')
            return SKIP

    if selftest():
        return 1
    netns = make_netns() if any(w[0] in IPV6_WORKLOADS for w in workloads) else None
    try:
        return run_all(a, workloads, netns)
    finally:
        if netns:
            subprocess.run(['ip', 'netns', 'del', netns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_all(a, workloads, netns):
    wd = tempfile.mkdtemp(prefix='wire_capture.')
    P = Problems()
    all_ops = collections.Counter()
    total = 0
    for name, argv, pmtu, must in workloads:
        t = time.time()
        nprob = len(P.items)
        if name in IPV6_WORKLOADS and not netns:
            print(f'note {name}: skipped (needs root and iproute2 for a private network namespace)')
            continue
        ns = netns if name in IPV6_WORKLOADS else None
        err = run_workload(a.launcher, name, argv, wd, a.bound, ns)
        if err and 'exit status' in err:
            # one retry: ibv_rc_pingpong's fixed 67 ms ACK timeout x retry_cnt 7
            # cannot ride out long CPU starvation; a second failure counts
            print(f'note {name}: {err}, once; running it again\n'
                  f'--- server log:\n{tail(os.path.join(wd, name + ".server.log"), 3)}'
                  f'--- client log:\n{tail(os.path.join(wd, name + ".client.log"), 3)}', flush=True)
            err = run_workload(a.launcher, name, argv, wd, a.bound, ns)
        if err:
            P.add(name, f'workload failed: {err}\n--- server log:\n{tail(os.path.join(wd, name + ".server.log"))}'
                  f'--- client log:\n{tail(os.path.join(wd, name + ".client.log"))}')
            continue
        res = {}
        for side in ('server', 'client'):
            path = os.path.join(wd, f'{name}.{side}.pcap')
            own = own_address(os.path.join(wd, f'{name}.{side}.log'))
            if own is None:
                P.add(name, f'{side}: cannot find the local GID in the program output')
            if not os.path.exists(path):
                P.add(name, f'{side} wrote no pcap')
                continue
            frames, ops, parsed = analyze(path, pmtu, P, own=own)
            res[side] = (path, parsed, ops, own)
            all_ops.update(ops)
            total += len(frames)
        if len(res) == 2:
            cross_check(name, res['server'][0], res['server'][1], res['server'][3],
                        res['client'][0], res['client'][1], res['client'][3], P)
            ops = res['server'][2] + res['client'][2]
            missing = must - set(k for k in ops if isinstance(k, int))
            if missing:
                P.add(name, 'expected opcodes not seen: ' + ', '.join(rw.OPCODES[o][0] for o in sorted(missing)))
            print(f'{"ok  " if len(P.items) == nprob else "FAIL"} {name}: '
                  f'{len(res["server"][1])} + {len(res["client"][1])} frames in '
                  f'{time.time() - t:.1f} s; ' + opsummary(ops), flush=True)
    if not a.only:
        for what, codes in MUST_SEE.items():
            if not codes <= set(all_ops):
                P.add('sanity', f'{what}: opcodes ' + ', '.join(rw.OPCODES[o][0] for o in sorted(codes - set(all_ops)))
                      + ' never seen')
    print(f'summary: {len(workloads)} workloads, {total} frames, '
          f'{len([o for o in all_ops if isinstance(o, int)])} distinct opcodes, '
          f'{len(P.items)} problem(s)')
    if P.items or a.keep:
        print(f'pcaps and logs kept in {wd}')
    else:
        shutil.rmtree(wd, ignore_errors=True)
    return 1 if P.items else 0


if __name__ == '__main__':
    sys.exit(main())
