#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/{rx,shm}).

Run from anywhere: python3 tests/fuzz/make_seeds.py (it rewrites both
directories; the output is checked in).  The opcodes and their header
layout are read from src/wire/opcode.h, so a seed holds one valid packet
of every opcode the table knows, plus scenarios that make the roles talk.

fuzz_rx input: a sequence of operations (at most 64), each a byte `op % 8`:
  0, 1  BUNDLE   u8 n-1 (%16), then per packet: u8 flags, u8 sel (slot =
                 sel % 16, key = sel / 16), u16le len, len bytes from the BTH
                 on.  The harness then sets, unless flags say otherwise
                 (fuzz_rx.c F_*): the destination QP to the slot's, the PSN
                 (F_PSN_REL: the slot's expected one + (int8) PSN byte 11),
                 the RETH/AtomicETH key and address (F_KEY: key table entry,
                 address = its base + (int16) the address's low 16 bits), the
                 IETH key, the XRCETH SRQ (F_XRC_SRQ), the DETH Q_Key
                 (F_QKEY), and appends an ICRC for the IPv4 ID of the
                 packet's place in the bundle (as after GRO).  F_RAW: none.
  2     POST_SEND u8 slot, u8 opcode (%10: SEND, SEND_IMM, WRITE, WRITE_IMM, READ,
                 CMP_SWP, FETCH_ADD, SEND_INV, ATOMIC_WRITE, LOCAL_INV), u8 MR
                 (%7 for what is read; %5 of ALL, LOCAL, NONE, OTHER_PD, RREAD
                 for what is written: READ and atomic targets), u8 key, u8 flags
                 (1 signaled, 2 inline, 4 fence, 8 solicited, 16 UD to self,
                 128 XRC SRQ 1), u16 len, u16 offset, u16 remote offset
  3     POST_RECV u8 target (%4: 0 a QP's RQ (slot = t>>2), 1 the SRQ, 2-3
                 an XRC SRQ), u8 MR (%5, as for READ targets), u16 len, u16 offset
  4     REFLECT  u8 which packet, u8 xor, u8 flags (1: keep the ICRC), u16
                 position: what the QPs sent comes back as one bundle
  5     MODIFY   u8 slot, u8 state (%6: RESET INIT RTR RTS SQD ERR)
  6     TIMERS   every QP's timers fire (far in the future)
  7     POLL     every CQ drained
Slots (fuzz_rx.c `slots`): 0 RC to the peer, 1<->2 RC (2 on the SRQ), 3 UC,
4<->5 UC (MTU 256), 6 UD, 7 XRC TGT, 8->9 XRC INI->TGT, 10 RC in RTR, 11 RC
in SQD, 12 RC in ERR, 13 RC in INIT, 14 RC in RESET, 15 UD in RTR.
Key table: 0-6 the MRs' rkeys (0 all access, 1 remote read, 2 none, 3 local
write, 4/5 the windows' MRs, 6 another PD), 7-9 the windows (rw type 2,
read-only type 2, rw type 1), 10 an lkey, 11 a stale window key, 12 another
slot's key, 13 0, 14 ~0, 15 the no-access MR's lkey.

fuzz_shm input: u32 starting position, then operations (at most 256), a
byte each, `op % 8` and ring (op >> 3) & 1:
  0     RAW      u32 offset, u16 len (%512), bytes into the ring
  1, 2  RECORD   u8 flags (1 units given, 2 position delta, 4 seq given),
                 u16 len, [u16 units], u8 ip_id, u8 tos, [s8 delta],
                 [u32 seq], then the payload: a record at the next position
  3     OWNER    u8 (bit 0: give the ring back, else claim it)
  4     MASK     u32 claimed-rings mask (rings 0, 3, 5 and 31 only)
  5     TAIL     u32 written over the consumer's tail word
  6, 7  POLL     u8 max-1 (%64)
"""
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

BITS = dict(RETH=0, AETH=1, ATMETH=2, ATMACK=3, IMMDT=4, IETH=5, DETH=6, PAYLOAD=7, REQ=8, RESP=9,
            SEND=10, WRITE=11, READ=12, ATOMIC=13, ACK=14, FIRST=15, MIDDLE=16, LAST=17, RC=18, UC=19,
            UD=20, CNP=21, XRC=22, XRCETH=23, ATOMIC_WRITE=24)


def opcodes():
    src = open(os.path.join(ROOT, "src/wire/opcode.h")).read()
    ops = {}
    for name, val, mask in re.findall(r"X\((\w+), (0x[0-9A-Fa-f]+), ([^)]*)\)", src):
        m = 0
        for f in re.findall(r"OPF_(\w+)", mask):
            if f == "ONLY":
                m |= 1 << BITS["FIRST"] | 1 << BITS["LAST"]
            else:
                m |= 1 << BITS[f]
        ops[name] = (int(val, 16), m)
    return ops


def has(m, f):
    return bool(m & (1 << BITS[f]))


def layout(m):
    """Offsets as src/wire/opcode.c's LAYOUT."""
    base = 12 + (4 if has(m, "XRCETH") else 0)
    off = {"xrceth": 12 if has(m, "XRCETH") else 0}
    off["deth"] = base if has(m, "DETH") else 0
    off["reth"] = base + (8 if has(m, "DETH") else 0) if has(m, "RETH") else 0
    off["atmeth"] = base if has(m, "ATMETH") else 0
    off["aeth"] = base if has(m, "AETH") else 0
    off["ieth"] = base if has(m, "IETH") else 0
    hl = base + sum(n for f, n in (("DETH", 8), ("RETH", 16), ("AETH", 4), ("ATMETH", 28), ("ATMACK", 8),
                                   ("IMMDT", 4), ("IETH", 4), ("CNP", 16)) if has(m, f))
    off["hdr_len"] = hl
    return off


F_RAW, F_QPN_RAW, F_PSN_REL, F_KEY, F_XRC_SRQ, F_QKEY, F_WRONG_PEER, F_BAD_ICRC = (1 << i for i in range(8))


def packet(op, m, payload=b"", ackreq=True, dma_len=None, syndrome=0, msn=0):
    off = layout(m)
    n = len(payload)
    pad = (4 - n % 4) % 4
    b = bytearray(off["hdr_len"])
    b[0] = op
    b[1] = pad << 4
    b[2:4] = b"\xff\xff"  # the default P_Key
    b[8] = 0x80 if ackreq else 0
    if off["reth"]:
        struct.pack_into(">QII", b, off["reth"], 0x40, 0, n if dma_len is None else dma_len)
    if off["atmeth"]:
        struct.pack_into(">QIQQ", b, off["atmeth"], 0x80, 0, 5, 0)
    if off["aeth"]:
        struct.pack_into(">I", b, off["aeth"], syndrome << 24 | msn)
    return bytes(b) + payload + bytes(pad)


def pkt_entry(flags, slot, key, pkt):
    return struct.pack("<BBH", flags, slot | key << 4, len(pkt)) + pkt


def bundle(*entries):
    return bytes([0, len(entries) - 1]) + b"".join(entries)


def post_send(slot, opi, mr, key, fl=1, ln=64, off=0, roff=0x40):
    return struct.pack("<BBBBBBHHH", 2, slot, opi, mr, key, fl, ln, off, roff)


def post_recv(t, mr=0, ln=4096, off=0):
    return struct.pack("<BBBHH", 3, t, mr, ln, off)


REFLECT = struct.pack("<BBBBH", 4, 0, 0, 0, 0)
TIMERS = b"\x06"
POLL = b"\x07"


def modify(slot, st):
    return bytes([5, slot, st])


def rx_seeds():
    ops = opcodes()
    seeds = {}
    data = bytes(range(256)) * 4
    for name, (op, m) in sorted(ops.items(), key=lambda kv: kv[1][0]):
        if has(m, "CNP"):
            slots = [0, 3]
        elif has(m, "XRC"):
            slots = [7] if has(m, "REQ") else [8]
        elif has(m, "UD"):
            slots = [6, 15]
        elif has(m, "UC"):
            slots = [3, 5]
        else:
            slots = [0, 2, 10, 11, 12]
        payload = b""
        if has(m, "PAYLOAD"):
            payload = data[:8] if has(m, "ATOMIC_WRITE") else data[:256] if has(m, "RESP") else data[:300]
        dma = 8 if has(m, "ATOMIC_WRITE") else (len(payload) if not has(m, "READ") else 512)
        pkt = packet(op, m, payload, dma_len=dma)
        fl = F_PSN_REL | F_KEY | F_XRC_SRQ | F_QKEY
        key = 0 if has(m, "REQ") else 0
        pre = b""
        if has(m, "SEND") and has(m, "REQ"):
            pre = post_recv(1 if 2 in slots else (2 if has(m, "XRC") else 0 | (slots[0] << 2)), 0)
            if has(m, "UD"):
                pre = post_recv(0 | 6 << 2) + post_recv(1)
            elif has(m, "UC"):
                pre = post_recv(0 | 3 << 2) + post_recv(1)
            elif not has(m, "XRC"):
                pre = post_recv(0 | 0 << 2) + post_recv(1)
        if has(m, "RESP") and not has(m, "XRC"):
            # outstanding WQEs at the slot, so that the response means something
            opi = 4 if has(m, "READ") else 6 if has(m, "ATOMIC") else 2
            pre = post_send(0, opi, 0, 0, 1, 512 if opi == 4 else 64)
        if has(m, "RESP") and has(m, "XRC"):
            opi = 4 if has(m, "READ") else 6 if has(m, "ATOMIC") else 0
            pre = post_send(8, opi, 0, 0, 1, 512 if opi == 4 else 64)
        entries = [pkt_entry(fl, s, key, pkt) for s in slots]
        seeds["op_%02x_%s" % (op, name.lower())] = pre + bundle(*entries) + POLL
    # scenarios between the connected slots: request, reflect (the
    # responder answers), reflect (the completer completes)
    for slot in (1, 4, 8):
        for opi, nm in ((0, "send"), (2, "write"), (3, "write_imm"), (4, "read"), (5, "cmp_swp"),
                        (6, "fetch_add"), (7, "send_inv"), (8, "atomic_write")):
            if slot == 4 and opi in (4, 5, 6, 7, 8):
                continue  # UC: no READ, atomics
            rk = 0 if opi in (2, 3, 4, 5, 6, 8) else 7
            s = post_recv(1) + post_recv(0 | 5 << 2) + post_recv(2) + post_recv(3)
            s += post_send(slot, opi, 1 if opi in (4, 5, 6) else 0, rk, 1, 3000 if opi < 5 or opi == 7 else 8)
            s += REFLECT + REFLECT + REFLECT + POLL
            seeds["pair_%d_%s" % (slot, nm)] = s
    # a window's key from the loopback pair, the UD QP to itself
    seeds["pair_1_write_window"] = post_send(1, 2, 0, 9, 1, 900) + REFLECT + REFLECT + POLL
    seeds["ud_self"] = post_recv(0 | 6 << 2) + post_send(6, 0, 0, 0, 1 | 16, 200) + REFLECT + POLL
    # states: loss and timers, ERR flush, SQD, RESET and back
    seeds["pair_1_lost_then_timer"] = (post_send(1, 2, 0, 0, 1, 5000) + struct.pack("<BB", 7, 0) +
                                        b"\x04\x00\x00\x00\x00\x00" + TIMERS + REFLECT + REFLECT + POLL)
    seeds["flush_err"] = post_recv(0) + post_send(0, 0, 0, 0, 1, 100) + modify(0, 5) + POLL
    seeds["sqd_then_rts"] = post_send(0, 2, 0, 0, 1, 100) + modify(0, 4) + modify(0, 3) + POLL
    seeds["reset_and_up"] = modify(1, 0) + modify(1, 3) + post_send(1, 2, 0, 0, 1, 64) + REFLECT + REFLECT
    seeds["rnr_nak"] = post_send(0, 0, 0, 0, 1, 64) + bundle(pkt_entry(F_PSN_REL, 0, 0, packet(
        ops["RC_ACK"][0], ops["RC_ACK"][1], syndrome=0x20 | 12))) + TIMERS + POLL
    seeds["gro_bundle"] = post_recv(1) + post_recv(1) + bundle(*[
        pkt_entry(F_PSN_REL | F_KEY, 0, 0, packet(ops["RC_WRITE_ONLY"][0], ops["RC_WRITE_ONLY"][1], data[:100]))
        for _ in range(8)])
    def resp(name, psn_off, payload=b"", syndrome=0, msn=0, fl=F_PSN_REL):
        op, m = ops[name]
        p = bytearray(packet(op, m, payload, ackreq=False, syndrome=syndrome, msn=msn))
        p[11] = psn_off  # F_PSN_REL: una + this
        return pkt_entry(fl, 0, 0, bytes(p))

    seeds["read_resp_3"] = post_send(0, 4, 0, 0, 1, 2548) + bundle(
        resp("RC_READ_RESP_FIRST", 0, data[:1024], msn=1), resp("RC_READ_RESP_MIDDLE", 1, data[:1024]),
        resp("RC_READ_RESP_LAST", 2, data[:500], msn=1)) + POLL
    seeds["read_resp_gap"] = post_send(0, 4, 0, 0, 1, 2548) + bundle(
        resp("RC_READ_RESP_FIRST", 0, data[:1024], msn=1), resp("RC_READ_RESP_LAST", 2, data[:500], msn=1)) + \
        bundle(resp("RC_READ_RESP_MIDDLE", 1, data[:1024]), resp("RC_READ_RESP_LAST", 2, data[:500], msn=1)) + POLL
    seeds["read_resp_only"] = post_send(0, 4, 0, 0, 1, 256) + bundle(resp("RC_READ_RESP_ONLY", 0, data[:256], msn=1))
    seeds["atomic_ack"] = post_send(0, 6, 0, 0, 1, 8) + bundle(
        resp("RC_ATOMIC_ACK", 0, msn=1)) + POLL
    seeds["atomic_write_resp"] = post_send(0, 8, 0, 0, 1, 8) + bundle(
        resp("RC_READ_RESP_ONLY", 0, msn=1)) + POLL
    seeds["seq_nak"] = post_send(0, 2, 0, 0, 1, 3000) + bundle(resp("RC_ACK", 0, syndrome=0x60)) + POLL
    seeds["nak_access"] = post_send(0, 2, 0, 0, 1, 100) + post_send(0, 2, 0, 0, 1, 100) + bundle(
        resp("RC_ACK", 1, syndrome=0x62)) + POLL
    seeds["rnr_then_ack"] = post_send(0, 0, 0, 0, 1, 64) + bundle(resp("RC_ACK", 0, syndrome=0x20 | 1)) + \
        TIMERS + bundle(resp("RC_ACK", 0, msn=1)) + POLL
    seeds["ack_beyond"] = post_send(0, 2, 0, 0, 1, 64) + bundle(resp("RC_ACK", 50, msn=1)) + POLL
    seeds["timeout_retry"] = post_send(0, 2, 0, 0, 1, 64) + TIMERS + TIMERS + TIMERS + TIMERS + POLL
    seeds["corrupt_reflect"] = post_send(1, 2, 0, 0, 1, 3000) + struct.pack("<BBBBH", 4, 1, 0x40, 0, 9) + REFLECT
    return seeds


def shm_seeds():
    seeds = {}

    def record(payload, fl=0, extra=b""):
        return struct.pack("<BBH", 1, fl, len(payload)) + bytes([0, 0]) + extra + payload

    pkt = bytes(range(64))
    poll = b"\x06\x3f"
    seeds["one_record"] = struct.pack("<I", 0) + record(pkt) + poll
    seeds["records_both_rings"] = struct.pack("<I", 0) + record(pkt) + b"\x09" + struct.pack("<BH", 0, 100) + \
        bytes([0, 0]) + bytes(100) + record(bytes(4200)) + poll + poll
    seeds["wrap_32bit"] = struct.pack("<I", 0xFFFFFFF0) + b"".join(record(pkt) for _ in range(20)) + poll + poll
    seeds["ring_end_skip"] = struct.pack("<I", 32760) + record(bytes(600)) + poll
    seeds["units_too_many"] = struct.pack("<I", 0) + struct.pack("<BBH", 1, 1, 64) + struct.pack("<H", 40000) + \
        bytes([0, 0]) + pkt + poll
    seeds["give_back"] = struct.pack("<I", 0) + record(pkt) + b"\x03\x01" + poll + poll + b"\x03\x00" + poll
    seeds["mask_and_tail"] = struct.pack("<I", 7) + b"\x04" + struct.pack("<I", 0xFFFFFFFF) + b"\x05" + \
        struct.pack("<I", 123) + record(pkt) + poll
    seeds["raw"] = struct.pack("<I", 0) + b"\x00" + struct.pack("<IH", 0, 64) + struct.pack("<IIHHHBB", 1, 4000, 1, 0,
                                                                                            0, 0, 0) + bytes(48) + poll
    return seeds


def write(dirname, seeds):
    d = os.path.join(HERE, "corpus", dirname)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print("%s: %d seeds" % (d, len(seeds)))


if __name__ == "__main__":
    write("rx", rx_seeds())
    write("shm", shm_seeds())
    sys.exit(0)
