"""Independent RoCEv2 wire helpers for the tests in tests/wire.

Written from shared/docs/roce-wire.md alone (no uroce code): a pcap reader,
an Ethernet/VLAN/IPv4/IPv6/UDP/BTH frame parser and the ICRC of §4, computed
the long way with zlib.crc32 over the 8-byte 0xFF prefix and the masked
headers (§4.1, §4.2), with the trailer stored least-significant byte first
(§4.4).  Also a few builders the hostile-packet test uses.

Standard library only.
"""

import struct
import zlib

ROCE_PORT = 4791                      # §1.4
PKEY_DEFAULT = 0xFFFF                 # §2.1, §10
ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
VLAN_TPIDS = (0x8100, 0x88A8, 0x9100)

# §3: opcode -> (name, extension header bytes after the BTH, payload allowed)
_RETH, _AETH, _ATMETH, _ATMACK, _IMM, _IETH, _DETH = 16, 4, 28, 8, 4, 4, 8
OPCODES = {}


def _op(code, name, hdr, payload):
    OPCODES[code] = (name, hdr, payload)


for _base, _tp in ((0x00, 'RC'), (0x20, 'UC')):
    _op(_base + 0x00, _tp + '_SEND_FIRST', 0, True)
    _op(_base + 0x01, _tp + '_SEND_MIDDLE', 0, True)
    _op(_base + 0x02, _tp + '_SEND_LAST', 0, True)
    _op(_base + 0x03, _tp + '_SEND_LAST_IMM', _IMM, True)
    _op(_base + 0x04, _tp + '_SEND_ONLY', 0, True)
    _op(_base + 0x05, _tp + '_SEND_ONLY_IMM', _IMM, True)
    _op(_base + 0x06, _tp + '_WRITE_FIRST', _RETH, True)
    _op(_base + 0x07, _tp + '_WRITE_MIDDLE', 0, True)
    _op(_base + 0x08, _tp + '_WRITE_LAST', 0, True)
    _op(_base + 0x09, _tp + '_WRITE_LAST_IMM', _IMM, True)
    _op(_base + 0x0A, _tp + '_WRITE_ONLY', _RETH, True)
    _op(_base + 0x0B, _tp + '_WRITE_ONLY_IMM', _RETH + _IMM, True)
_op(0x0C, 'RC_READ_REQUEST', _RETH, False)
_op(0x0D, 'RC_READ_RESPONSE_FIRST', _AETH, True)
_op(0x0E, 'RC_READ_RESPONSE_MIDDLE', 0, True)
_op(0x0F, 'RC_READ_RESPONSE_LAST', _AETH, True)
_op(0x10, 'RC_READ_RESPONSE_ONLY', _AETH, True)
_op(0x11, 'RC_ACKNOWLEDGE', _AETH, False)
_op(0x12, 'RC_ATOMIC_ACKNOWLEDGE', _AETH + _ATMACK, False)
_op(0x13, 'RC_COMPARE_SWAP', _ATMETH, False)
_op(0x14, 'RC_FETCH_ADD', _ATMETH, False)
_op(0x16, 'RC_SEND_LAST_INV', _IETH, True)
_op(0x17, 'RC_SEND_ONLY_INV', _IETH, True)
_op(0x1D, 'RC_ATOMIC_WRITE', _RETH, True)   # 8 bytes of payload
# XRC (0xA0..): RC's operations; requests carry a 4-byte XRCETH (the XRC
# SRQ number) right after the BTH, responses none (§2.2, §3)
_XRCETH = 4
for _code, (_name, _hdr, _pay) in list(OPCODES.items()):
    if _code <= 0x17:
        _req = _code <= 0x0C or _code in (0x13, 0x14, 0x16, 0x17)
        _op(0xA0 | _code, 'XRC' + _name[2:], _hdr + (_XRCETH if _req else 0), _pay)
_op(0x64, 'UD_SEND_ONLY', _DETH, True)
_op(0x65, 'UD_SEND_ONLY_IMM', _DETH + _IMM, True)
_op(0x80, 'IB_CNP', 0, True)            # native IB CNP (§3) - not RoCEv2
_op(0x81, 'CNP', 16, False)             # RoCEv2 CNP, 16 reserved bytes (§8)


class WireError(Exception):
    pass


# --------------------------------------------------------------------------
# pcap (classic libpcap format; pcapng is refused with a clear message)

def read_pcap(path):
    """Yield (frame_number starting at 1, linktype, bytes)."""
    with open(path, 'rb') as f:
        data = f.read()
    if len(data) < 24:
        raise WireError(f'{path}: too short for a pcap header')
    magic = data[:4]
    if magic in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1'):
        e = '<'
    elif magic in (b'\xa1\xb2\xc3\xd4', b'\xa1\xb2\x3c\x4d'):
        e = '>'
    elif magic == b'\x0a\x0d\x0d\x0a':
        raise WireError(f'{path}: pcapng is not supported, convert with editcap -F pcap')
    else:
        raise WireError(f'{path}: not a pcap file (magic {magic.hex()})')
    linktype = struct.unpack(e + 'I', data[20:24])[0]
    off, n = 24, 0
    while off < len(data):
        if off + 16 > len(data):
            raise WireError(f'{path}: truncated record header after frame {n}')
        _ts, _us, incl, orig = struct.unpack(e + 'IIII', data[off:off + 16])
        off += 16
        if off + incl > len(data):
            raise WireError(f'{path}: truncated frame {n + 1}')
        n += 1
        if incl != orig:
            raise WireError(f'{path}: frame {n} was cut by the snap length ({incl} of {orig} bytes)')
        yield n, linktype, data[off:off + incl]
        off += incl


# --------------------------------------------------------------------------
# frame parsing

class RoceFrame:
    """A RoCEv2 packet inside a frame.  `ip` is the IP packet exactly as its
    length fields delimit it (Ethernet padding removed, §1.1)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    @property
    def opname(self):
        return OPCODES.get(self.opcode, ('UNKNOWN_0x%02x' % self.opcode,))[0]


def parse_frame(frame, linktype=1):
    """Return a RoceFrame for a RoCEv2 frame, None for any other traffic,
    raise WireError for a frame that claims to be RoCEv2 but is malformed."""
    if linktype != 1:
        raise WireError(f'link type {linktype} is not Ethernet')
    if len(frame) < 14:
        return None
    off = 12
    etype = struct.unpack('!H', frame[off:off + 2])[0]
    vlans = 0
    while etype in VLAN_TPIDS:                       # §1.1: 802.1Q tags
        off += 4
        vlans += 1
        if off + 2 > len(frame):
            return None
        etype = struct.unpack('!H', frame[off:off + 2])[0]
    off += 2
    if etype == ETH_IPV4:
        if len(frame) < off + 20:
            return None
        ip0 = frame[off:]
        if ip0[0] >> 4 != 4:
            return None
        ihl = (ip0[0] & 0xF) * 4
        if ip0[9] != 17:
            return None
        iplen = struct.unpack('!H', ip0[2:4])[0]
        ip_id = struct.unpack('!H', ip0[4:6])[0]
        frag = struct.unpack('!H', ip0[6:8])[0]
        src, dst = bytes(ip0[12:16]), bytes(ip0[16:20])
        v = 4
    elif etype == ETH_IPV6:
        if len(frame) < off + 40:
            return None
        ip0 = frame[off:]
        if ip0[0] >> 4 != 6 or ip0[6] != 17:
            return None
        ihl = 40
        iplen = 40 + struct.unpack('!H', ip0[4:6])[0]
        ip_id, frag = None, None
        src, dst = bytes(ip0[8:24]), bytes(ip0[24:40])
        v = 6
    else:
        return None
    if len(ip0) < ihl + 8:
        return None
    dport = struct.unpack('!H', ip0[ihl + 2:ihl + 4])[0]
    if dport != ROCE_PORT:
        return None
    # from here on it is meant to be RoCEv2: be strict
    if v == 4 and ihl != 20:
        raise WireError(f'IPv4 header with options (IHL {ihl}), §1.1 forbids them')
    if v == 4 and frag & 0x3FFF:
        raise WireError(f'fragmented IPv4 packet (flags/offset 0x{frag:04x})')
    if iplen > len(ip0):
        raise WireError(f'IP length {iplen} exceeds the {len(ip0)} bytes captured')
    ip = bytes(ip0[:iplen])
    sport, dport, ulen, ucsum = struct.unpack('!HHHH', ip[ihl:ihl + 8])
    if ihl + ulen != iplen:
        raise WireError(f'UDP length {ulen} disagrees with IP length {iplen}')
    udp_payload = ip[ihl + 8:]
    if len(udp_payload) < 12 + 4:
        raise WireError(f'UDP payload of {len(udp_payload)} bytes cannot hold BTH+ICRC')
    bth = udp_payload[:12]
    opcode = bth[0]
    info = OPCODES.get(opcode)
    hdr = 12 + (info[1] if info else 0)
    pad = (bth[1] >> 4) & 3
    paylen = len(udp_payload) - hdr - pad - 4
    return RoceFrame(
        ipver=v, ihl=ihl, ip=ip, ip_id=ip_id, src=src, dst=dst, sport=sport, dport=dport,
        udp_len=ulen, udp_csum=ucsum, vlans=vlans, eth_pad=len(ip0) - iplen,
        udp_payload=udp_payload, bth=bth, opcode=opcode, known=info is not None,
        se=bth[1] >> 7, mig=(bth[1] >> 6) & 1, pad=pad, tver=bth[1] & 0xF,
        pkey=struct.unpack('!H', bth[2:4])[0], becn=(bth[4] >> 6) & 1, fecn=bth[4] >> 7,
        dqpn=struct.unpack('!I', bth[4:8])[0] & 0xFFFFFF,
        ackreq=bth[8] >> 7, psn=struct.unpack('!I', bth[8:12])[0] & 0xFFFFFF,
        ext=udp_payload[12:hdr], payload=udp_payload[hdr:hdr + max(paylen, 0)],
        paylen=paylen, icrc_wire=udp_payload[-4:])


# --------------------------------------------------------------------------
# ICRC, §4

def icrc_value(ip, ipver=None):
    """ICRC of an IP packet whose last 4 bytes are the ICRC slot (ignored).
    Returns the CRC-32 value (an int).  Masks per §4.2, prefix per §4.1.
    `ipver` forces the header layout (for bit-flip experiments on byte 0)."""
    ip = bytearray(ip)
    v = ipver or ip[0] >> 4
    if v == 4:
        ihl = 20 if ipver else (ip[0] & 0xF) * 4
        if ihl != 20:
            raise WireError('ICRC undefined for IPv4 with options (§1.1)')
        ip[1] = 0xFF                  # TOS: DSCP + ECN
        ip[8] = 0xFF                  # TTL
        ip[10] = ip[11] = 0xFF        # header checksum
    elif v == 6:
        ihl = 40
        ip[0] |= 0x0F                 # traffic class (low nibble of byte 0) ...
        ip[1] = ip[2] = ip[3] = 0xFF  # ... and flow label
        ip[7] = 0xFF                  # hop limit
    else:
        raise WireError(f'IP version {v}')
    ip[ihl + 6] = ip[ihl + 7] = 0xFF  # UDP checksum
    ip[ihl + 8 + 4] = 0xFF            # BTH byte 4: FECN, BECN, reserved
    covered = b'\xff' * 8 + bytes(ip[:-4])
    return zlib.crc32(covered) & 0xFFFFFFFF


def icrc_trailer(ip, ipver=None):
    """The 4 trailer bytes for `ip` (least-significant byte first, §4.4)."""
    return struct.pack('<I', icrc_value(ip, ipver))


def icrc_ok(rf):
    return icrc_trailer(rf.ip) == rf.icrc_wire


# --------------------------------------------------------------------------
# builders (hostile-packet test)

def bth(opcode, dqpn, psn, pkey=PKEY_DEFAULT, se=0, mig=0, pad=0, tver=0, ackreq=0, byte4=0):
    return struct.pack('!BBHBBHI', opcode, (se << 7) | (mig << 6) | ((pad & 3) << 4) | (tver & 0xF),
                       pkey, byte4, (dqpn >> 16) & 0xFF, dqpn & 0xFFFF,
                       (ackreq << 31) | (psn & 0xFFFFFF))


def reth(va, rkey, length):
    return struct.pack('!QII', va, rkey, length)


def atmeth(va, rkey, swap_add, compare=0):
    return struct.pack('!QIQQ', va, rkey, swap_add, compare)


def aeth(syndrome, msn):
    return struct.pack('!I', (syndrome << 24) | (msn & 0xFFFFFF))


def deth(qkey, sqpn):
    return struct.pack('!II', qkey, sqpn & 0xFFFFFF)


def ipv4_packet(src, dst, sport, udp_payload, ip_id=0, tos=0, ttl=64):
    """A full IPv4/UDP packet (DF set, UDP checksum 0) around udp_payload."""
    ulen = 8 + len(udp_payload)
    hdr = bytearray(struct.pack('!BBHHHBBH4s4s', 0x45, tos, 20 + ulen, ip_id, 0x4000, ttl, 17, 0,
                                bytes(src), bytes(dst)))
    s = sum(struct.unpack('!10H', hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    struct.pack_into('!H', hdr, 10, ~s & 0xFFFF)
    return bytes(hdr) + struct.pack('!HHHH', sport, ROCE_PORT, ulen, 0) + udp_payload


def roce_udp_payload(src, dst, sport, body, ip_id=0, bad_icrc=False):
    """body = BTH + headers + payload + pad.  Returns body + ICRC, computed as
    if the packet travels as IPv4 src->dst with the given ID and DF set
    (what a Linux UDP socket with IP_PMTUDISC_DO and no connect() sends)."""
    pkt = ipv4_packet(src, dst, sport, body + b'\0\0\0\0', ip_id=ip_id)
    t = icrc_trailer(pkt)
    if bad_icrc:
        t = bytes([t[0] ^ 0x01]) + t[1:]
    return body + t


def parse_response(data):
    """Parse a UDP payload received from the device under test (BTH first)."""
    if len(data) < 16:
        raise WireError(f'{len(data)}-byte datagram')
    b = data[:12]
    op = b[0]
    info = OPCODES.get(op)
    if not info:
        raise WireError(f'unknown opcode 0x{op:02x}')
    hdr = 12 + info[1]
    pad = (b[1] >> 4) & 3
    r = {'opcode': op, 'name': info[0], 'dqpn': struct.unpack('!I', b[4:8])[0] & 0xFFFFFF,
         'psn': struct.unpack('!I', b[8:12])[0] & 0xFFFFFF, 'pad': pad,
         'payload': data[hdr:len(data) - 4 - pad]}
    if op in (0x0D, 0x0F, 0x10, 0x11, 0x12):
        a = struct.unpack('!I', data[12:16])[0]
        r['syndrome'], r['msn'] = a >> 24, a & 0xFFFFFF
    if op == 0x12:
        r['orig'] = struct.unpack('!Q', data[16:24])[0]
    return r
