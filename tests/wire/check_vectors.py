#!/usr/bin/python3
"""Known-answer check of the independent ICRC (rocewire.py, roce-wire.md §4).

    check_vectors.py SHARED_DIR

1. §4.5 worked example: the byte string fed to the CRC and its value.
2. Every frame of SHARED_DIR/vectors/*.pcap: our ICRC equals the trailer, and
   the trailer equals the one MANIFEST.txt lists for that frame (§4.6).
3. Every RoCEv2 frame (UDP dst 4791) of SHARED_DIR/rxe-captures/*.pcap (frames
   sent by Linux rdma_rxe): our ICRC equals the trailer.  Those frames carry
   non-zero IPv4 IDs; for each one the ICRC recomputed with the ID forced to 0
   must *differ*, which proves the ID is covered (§4.2).  Where a .txt listing
   gives the ICRC for a frame number, it must agree with the pcap.
4. Masking controls (§4.2): rewriting any masked field of a vector frame leaves
   the ICRC unchanged; flipping any one bit of any covered byte changes it.

Exit 0 all good, 1 on any mismatch (file and frame number printed), 77 when
SHARED_DIR or its vectors are missing.
"""

import glob
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rocewire as rw  # noqa: E402

failures = []


def fail(msg):
    failures.append(msg)
    print('FAIL ' + msg, flush=True)


def worked_example():
    """§4.5, typed in from the document."""
    frame = bytes.fromhex(
        '02000000000b02000000000a0800'
        '4502003c000140004011b6aac0000201c0000202'
        'c13212b700280000'
        '0400ffff0000001280000100'
        '000102030405060708090a0b0c0d0e0f'
        'e9d3047e')
    covered = bytes.fromhex(
        'ffffffffffffffff'
        '45ff003c00014000ff11ffffc0000201c0000202'
        'c13212b70028ffff'
        '0400ffffff00001280000100'
        '000102030405060708090a0b0c0d0e0f')
    if zlib.crc32(covered) != 0x7E04D3E9:
        fail('§4.5: zlib.crc32 of the documented byte string is not 0x7E04D3E9')
    if zlib.crc32(b'\xff' * 8) != 0x2144DF1C:
        fail('§4.3: crc32(0, ff*8) is not 0x2144DF1C')
    rf = rw.parse_frame(frame)
    if rf is None or rw.icrc_trailer(rf.ip) != bytes.fromhex('e9d3047e'):
        fail('§4.5: worked example frame does not verify')
    else:
        print('ok   §4.5 worked example: CRC 0x7E04D3E9, trailer e9 d3 04 7e')


def load_manifest(vdir):
    m = {}
    path = os.path.join(vdir, 'MANIFEST.txt')
    if not os.path.exists(path):
        return m
    for line in open(path):
        if line.startswith('#') or '|' not in line:
            continue
        f = [x.strip() for x in line.split('|')]
        m[(f[0], int(f[1]))] = bytes.fromhex(f[3].replace(' ', ''))
    return m


def load_txt_icrc(txt):
    """rxe-captures/NAME.txt: 'frame time src dst ... icrc framelen', single
    spaces, empty fields allowed; the ICRC (wire byte order) is 2nd to last."""
    m = {}
    if not os.path.exists(txt):
        return m
    for line in open(txt):
        if not line[:1].isdigit():
            continue
        f = line.rstrip('\n').split(' ')
        try:
            m[int(f[0])] = bytes.fromhex(f[-2][2:])
        except (ValueError, IndexError):
            pass
    return m


def check_file(path, manifest=None, txt=None, require_nonzero_id=False):
    name = os.path.basename(path)[:-5]
    n_roce = n_other = n_id = 0
    for num, lt, frame in rw.read_pcap(path):
        where = f'{os.path.basename(path)} frame {num}'
        try:
            rf = rw.parse_frame(frame, lt)
        except rw.WireError as ex:
            fail(f'{where}: malformed RoCEv2 frame: {ex}')
            continue
        if rf is None:
            n_other += 1
            continue
        n_roce += 1
        ours = rw.icrc_trailer(rf.ip)
        if ours != rf.icrc_wire:
            fail(f'{where}: {rf.opname} PSN {rf.psn:#x}: trailer {rf.icrc_wire.hex(" ")}, '
                 f'computed {ours.hex(" ")}')
            continue
        if manifest is not None:
            want = manifest.get((name, num))
            if want is None:
                fail(f'{where}: not listed in MANIFEST.txt')
            elif want != rf.icrc_wire:
                fail(f'{where}: MANIFEST.txt says {want.hex(" ")}, frame has {rf.icrc_wire.hex(" ")}')
        if txt and num in txt and txt[num] != rf.icrc_wire:
            fail(f'{where}: listing says ICRC {txt[num].hex(" ")}, frame has {rf.icrc_wire.hex(" ")}')
        if rf.ipver == 4 and rf.ip_id:
            n_id += 1
            ip0 = bytearray(rf.ip)
            ip0[4] = ip0[5] = 0
            if rw.icrc_trailer(ip0) == rf.icrc_wire:
                fail(f'{where}: ICRC unchanged with IP ID {rf.ip_id:#06x} forced to 0 - ID not covered?')
    if n_roce == 0:
        fail(f'{os.path.basename(path)}: no RoCEv2 frame at all')
    if require_nonzero_id and n_id == 0 and n_roce:
        fail(f'{os.path.basename(path)}: no frame with a non-zero IPv4 ID')
    return n_roce, n_other, n_id


def masking_controls(path):
    """§4.2 on the frames of one vector file."""
    n = 0
    for num, lt, frame in rw.read_pcap(path):
        rf = rw.parse_frame(frame, lt)
        if rf is None:
            continue
        ip = bytearray(rf.ip)
        ihl = rf.ihl
        if rf.ipver == 4:
            masked = [1, 8, 10, 11]
        else:
            masked = [1, 2, 3, 7]
        masked += [ihl + 6, ihl + 7, ihl + 8 + 4]
        for off in masked:
            x = bytearray(ip)
            x[off] ^= 0xA5
            if rw.icrc_trailer(x, rf.ipver) != rf.icrc_wire:
                fail(f'{os.path.basename(path)} frame {num}: masked byte {off} changed the ICRC')
        if rf.ipver == 6:
            x = bytearray(ip)
            x[0] ^= 0x0F        # low nibble of byte 0 = traffic class high bits
            if rw.icrc_trailer(x, rf.ipver) != rf.icrc_wire:
                fail(f'{os.path.basename(path)} frame {num}: IPv6 traffic class changed the ICRC')
        # every bit of every covered byte (the last 4 are the ICRC itself)
        for off in range(len(ip) - 4):
            if off in masked:
                continue
            for bit in range(8):
                if rf.ipver == 6 and off == 0 and bit < 4:
                    continue
                x = bytearray(ip)
                x[off] ^= 1 << bit
                if rw.icrc_trailer(x, rf.ipver) == rf.icrc_wire:
                    fail(f'{os.path.basename(path)} frame {num}: covered byte {off} bit {bit} '
                         'did not change the ICRC')
                n += 1
    return n


def main():
    if len(sys.argv) != 2:
        print(__doc__.split('\n\n')[1], file=sys.stderr)
        return 2
    shared = sys.argv[1]
    vdir = os.path.join(shared, 'vectors')
    rdir = os.path.join(shared, 'rxe-captures')
    vecs = sorted(glob.glob(os.path.join(vdir, '*.pcap')))
    rxes = sorted(glob.glob(os.path.join(rdir, '*.pcap')))
    if not vecs:
        print(f'SKIP: no vectors under {vdir}')
        return 77

    worked_example()

    manifest = load_manifest(vdir)
    if not manifest:
        fail(f'{vdir}/MANIFEST.txt missing or empty')
    tot = 0
    for p in vecs:
        r, o, _ = check_file(p, manifest=manifest)
        tot += r
        print(f'ok   {os.path.basename(p)}: {r} RoCEv2 frame(s) verified')
    if tot != len(manifest):
        fail(f'vectors: {tot} RoCEv2 frames in the pcaps, MANIFEST.txt lists {len(manifest)}')

    flips = 0
    for p in vecs:
        flips += masking_controls(p)
    print(f'ok   masking controls: every masked field ignored, {flips} single-bit flips of covered bytes detected')

    rtot = rid = 0
    if not rxes:
        print(f'note: no rxe captures under {rdir}')
    for p in rxes:
        txt = load_txt_icrc(p[:-5] + '.txt')
        r, o, i = check_file(p, txt=txt, require_nonzero_id=True)
        rtot += r
        rid += i
        print(f'ok   {os.path.basename(p)}: {r} RoCEv2 frames verified ({i} with non-zero IPv4 ID), '
              f'{o} other frames ignored' + (f', {len(txt)} listed ICRCs agree' if txt else ''))

    print(f'summary: {tot} vector frames, {rtot} rxe frames ({rid} with non-zero IP ID), '
          f'{len(failures)} failure(s)')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
