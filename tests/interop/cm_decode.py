#!/usr/bin/env python3
"""cm_decode.py PCAP: one line per IB CM MAD (RoCEv2, UDP 4791, QP1) of a
capture, from the raw bytes (shared/docs/cm-wire.md §3; tshark 4.0.17
misreads the REQ's flow-label word, §3.4).  Offsets are CM+n as there.
Also prints the RC data packets' first/last frame per (src, dst QPN) so a
connection's traffic can be placed between its MADs."""
import struct
import sys

NAMES = {0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU", 0x15: "DREQ",
         0x16: "DREP", 0x17: "SIDR_REQ", 0x18: "SIDR_REP", 0x19: "LAP", 0x1A: "APR"}
MTU = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


def packets(path):
    d = open(path, "rb").read()
    magic = struct.unpack("<I", d[:4])[0]
    end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    nano = magic in (0xA1B23C4D, 0x4D3CB2A1)
    off, n, t0 = 24, 0, None
    while off + 16 <= len(d):
        sec, frac, incl = struct.unpack(end + "III", d[off:off + 12])
        t = sec + frac / (1e9 if nano else 1e6)
        t0 = t if t0 is None else t0
        n += 1
        yield n, t - t0, d[off + 16:off + 16 + incl]
        off += 16 + incl


def ip4(b):
    return ".".join(str(x) for x in b)


def gid(b):
    if b[:12] == b"\0" * 10 + b"\xff\xff":
        return "::ffff:" + ip4(b[12:])
    return ":".join("%02x%02x" % (b[i], b[i + 1]) for i in range(0, 16, 2))


def be(b, o, n):
    return int.from_bytes(b[o:o + n], "big")


def decode(c, attr):
    """c = the 232-byte CM body"""
    ids = "lid=%08x rid=%08x" % (be(c, 0, 4), be(c, 4, 4))
    if attr == 0x10:
        ih = c[140:176]
        hdr = "iphdr(v%d ipv%d sport %d %s -> %s)" % (ih[0], ih[1] >> 4, be(ih, 2, 2), ip4(ih[16:20]), ip4(ih[32:36]))
        fl = be(c, 88, 4)
        return ("lid=%08x sid=%016x guid=%016x qkey=%x qpn=%06x rr=%d eecn=%x id=%d tmo_type_e2e=%02x(rcmto %d type %d e2e %d) "
                "psn=%06x lcmto=%d retry=%d pkey=%04x mtu=%s rdc=%d rnr=%d maxcm=%d srq=%d ext=%d llid=%04x rlid=%04x "
                "lgid=%s rgid=%s fl=%05x rate=%d tc=%d hl=%d sl=%d subnetlocal=%d ackto=%d alt_nonzero=%d %s pd_nonzero=%d" % (
                    be(c, 0, 4), be(c, 8, 8), be(c, 16, 8), be(c, 28, 4), be(c, 32, 3), c[35], be(c, 36, 3), c[39], c[43],
                    c[43] >> 3, (c[43] >> 1) & 3, c[43] & 1, be(c, 44, 3), c[47] >> 3, c[47] & 7, be(c, 48, 2),
                    MTU.get(c[50] >> 4, c[50] >> 4), (c[50] >> 3) & 1, c[50] & 7, c[51] >> 4, (c[51] >> 3) & 1, c[51] & 7,
                    be(c, 52, 2), be(c, 54, 2), gid(c[56:72]), gid(c[72:88]), fl >> 12, fl & 0x3f, c[92], c[93],
                    c[94] >> 4, (c[94] >> 3) & 1, c[95] >> 3, any(c[96:140]), hdr, any(c[176:232])))
    if attr == 0x13:
        return ("%s qkey=%x qpn=%06x eecn=%x psn=%06x rr=%d id=%d ackdelay=%d failover=%d e2e=%d rnr=%d srq=%d "
                "guid=%016x pd_nonzero=%d" % (ids, be(c, 8, 4), be(c, 12, 3), be(c, 16, 3), be(c, 20, 3), c[24], c[25],
                                              c[26] >> 3, (c[26] >> 1) & 3, c[26] & 1, c[27] >> 5, (c[27] >> 4) & 1,
                                              be(c, 28, 8), any(c[36:232])))
    if attr == 0x12:
        return "%s msg=%d info_len=%d reason=%d ari=%s pd_nonzero=%d" % (
            ids, c[8] >> 6, c[9] >> 1, be(c, 10, 2), c[12:12 + (c[9] >> 1)].hex(), any(c[84:232]))
    if attr == 0x11:
        return "%s msg=%d service_timeout=%d" % (ids, c[8] >> 6, c[9] >> 3)
    if attr == 0x15:
        return "%s remote_qpn=%06x pd_nonzero=%d" % (ids, be(c, 8, 3), any(c[12:232]))
    if attr in (0x14, 0x16):
        return "%s pd_nonzero=%d" % (ids, any(c[8:232]))
    if attr == 0x17:
        ih = c[16:52]
        return "reqid=%08x pkey=%04x sid=%016x iphdr(v%d ipv%d sport %d %s -> %s) pd_nonzero=%d" % (
            be(c, 0, 4), be(c, 4, 2), be(c, 8, 8), ih[0], ih[1] >> 4, be(ih, 2, 2), ip4(ih[16:20]), ip4(ih[32:36]),
            any(c[52:232]))
    if attr == 0x18:
        return "reqid=%08x status=%d addinfo_len=%d qpn=%06x sid=%016x qkey=%08x pd_nonzero=%d" % (
            be(c, 0, 4), c[4], c[5], be(c, 8, 3), be(c, 12, 8), be(c, 20, 4), any(c[96:232]))
    return ids


def main():
    data = {}
    for n, t, p in packets(sys.argv[1]):
        if len(p) < 62 or p[12:14] != b"\x08\x00" or p[23] != 17 or be(p, 36, 2) != 4791:
            continue
        src, dst = ip4(p[26:30]), ip4(p[30:34])
        bth = p[42:54]
        dqp = be(bth, 5, 3)
        if dqp != 1:
            k = (src, dst, dqp)
            first = data.setdefault(k, [n, n, 0])
            first[1] = n
            first[2] += 1
            continue
        mad = p[62:62 + 256]
        if len(mad) < 256 or mad[1] != 7:
            print("%5d %9.6f %s -> %s QP1 non-CM mad class %02x" % (n, t, src, dst, mad[1] if len(mad) > 1 else -1))
            continue
        attr = be(mad, 16, 2)
        hdr = "base=%d class=%d cver=%d method=%d status=%x tid=%016x attrmod=%x udp_sport=%d bth_psn=%d qkey=%08x srcqp=%x" % (
            mad[0], mad[1], mad[2], mad[3], be(mad, 4, 2), be(mad, 8, 8), be(mad, 20, 4), be(p, 34, 2),
            be(bth, 9, 3), be(p, 54, 4), be(p, 59, 3))
        print("%5d %9.6f %s -> %s %-8s %s | %s" % (n, t, src, dst, NAMES.get(attr, hex(attr)),
                                                  decode(mad[24:], attr), hdr))
    for (src, dst, dqp), (a, b, cnt) in sorted(data.items(), key=lambda kv: kv[1][0]):
        print("data %s -> %s QPN %06x: %d packets, frames %d..%d" % (src, dst, dqp, cnt, a, b))


if __name__ == "__main__":
    main()
