#!/usr/bin/python3
"""Basic pyverbs walk-through against the uroce0 device.

Run with Debian's /usr/bin/python3 (python3-pyverbs lives there), under the
library: `uroce run -- /usr/bin/python3 test_pyverbs.py`.

Every step prints "ok NAME" or "not ok NAME: expected X got Y"; the last
line is "N passed, M failed" and the exit status is 1 if anything failed.
Only public pyverbs API is used; pyverbs' Context.query_gid_type wraps the
private libibverbs symbol ibv_query_gid_type@IBVERBS_PRIVATE_34, so that one
runs in a child process and only a wrong answer counts as a failure.
"""

import errno
import ipaddress
import os
import subprocess
import sys
import traceback

DEV_NAME = 'uroce0'
PORT = 1
GID_INDEX = 0

passed = 0
failed = 0
skipped = 0



def expected_active_mtu():
    """UROCE_MTU, else rxe's rule on the interface MTU (the largest IB MTU
    <= MTU - 80, roce-wire.md section 7); the automatic address is on lo.
    None when it depends on a UROCE_ADDR interface."""
    if os.environ.get('UROCE_MTU'):
        return {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}.get(int(os.environ['UROCE_MTU']))
    if os.environ.get('UROCE_ADDR'):
        return None
    with open('/sys/class/net/lo/mtu') as f:
        mtu = int(f.read())
    m = 1
    while m < 5 and (128 << (m + 1)) + 80 <= mtu:
        m += 1
    return m

def ok(name):
    global passed
    passed += 1
    print(f'ok {name}', flush=True)


def not_ok(name, msg):
    global failed
    failed += 1
    print(f'not ok {name}: {msg}', flush=True)


def skip(name, why):
    global skipped
    skipped += 1
    print(f'ok {name} # SKIP {why}', flush=True)


def check(name, cond, msg):
    if cond:
        ok(name)
    else:
        not_ok(name, msg)
    return cond


def step(name, fn, *args, **kwargs):
    """Run fn; an exception is a failure of step `name`."""
    try:
        res = fn(*args, **kwargs)
    except Exception as ex:  # pyverbs raises PyverbsRDMAError & friends
        not_ok(name, f'expected success got {type(ex).__name__}: {ex}')
        return None
    ok(name)
    return res


def gid_bytes(gid):
    return bytes.fromhex(str(gid.gid).replace(':', ''))


def gid_type_child():
    """Child mode: print and return the sysfs GID type of port 1 index 0."""
    import pyverbs.device as d
    import pyverbs.enums as e
    with d.Context(name=DEV_NAME) as ctx:
        t = ctx.query_gid_type(PORT, GID_INDEX)
    print(f'gid_type {t}', flush=True)
    return 0 if t == e.IBV_GID_TYPE_SYSFS_ROCE_V2 else 3


def main():
    try:
        import pyverbs.device as d
        import pyverbs.enums as e
        from pyverbs.addr import AHAttr, GlobalRoute
        from pyverbs.cq import CQ, CompChannel
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.pyverbs_error import PyverbsRDMAError
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    except Exception as ex:
        not_ok('import_pyverbs', f'expected pyverbs importable got {ex!r}')
        return

    ok('import_pyverbs')

    # Device list
    devs = step('get_device_list', d.get_device_list)
    if devs is None:
        return
    names = [dev.name.decode() for dev in devs]
    print(f'# devices: {names}')
    if not check('device_list_has_' + DEV_NAME, DEV_NAME in names,
                 f'expected {DEV_NAME} in the list got {names}'):
        return
    dev = devs[names.index(DEV_NAME)]
    check('device_node_type_ca', dev.node_type == e.IBV_NODE_CA,
          f'expected {e.IBV_NODE_CA} got {dev.node_type}')

    ctx = step('open_device', lambda: d.Context(name=DEV_NAME))
    if ctx is None:
        return
    try:
        run_with_context(ctx, d, e, AHAttr, GlobalRoute, CQ, CompChannel, MR,
                         PD, PyverbsRDMAError, QP, QPAttr, QPCap, QPInitAttr)
    finally:
        step('close_device', ctx.close)


def run_with_context(ctx, d, e, AHAttr, GlobalRoute, CQ, CompChannel, MR, PD,
                     PyverbsRDMAError, QP, QPAttr, QPCap, QPInitAttr):
    # query_device
    attr = step('query_device', ctx.query_device)
    if attr is not None:
        check('query_device_limits',
              attr.max_qp > 0 and attr.max_qp_wr > 0 and attr.max_sge > 0 and
              attr.max_cqe > 0 and attr.max_mr_size > 0,
              f'expected positive limits got max_qp {attr.max_qp} max_qp_wr '
              f'{attr.max_qp_wr} max_sge {attr.max_sge} max_cqe {attr.max_cqe} '
              f'max_mr_size {attr.max_mr_size}')
        check('query_device_vendor_id', attr.vendor_id != 0,
              f'expected nonzero got {attr.vendor_id}')
        check('query_device_phys_port_cnt', attr.phys_port_cnt == 1,
              f'expected 1 got {attr.phys_port_cnt}')
    attr_ex = step('query_device_ex', ctx.query_device_ex)
    if attr is not None and attr_ex is not None:
        check('query_device_ex_orig_attr',
              attr_ex.orig_attr.max_qp == attr.max_qp,
              f'expected max_qp {attr.max_qp} got {attr_ex.orig_attr.max_qp}')

    # query_port(1)
    pa = step('query_port_1', ctx.query_port, PORT)
    if pa is not None:
        check('query_port_state_active', pa.state == e.IBV_PORT_ACTIVE,
              f'expected {e.IBV_PORT_ACTIVE} got {pa.state}')
        check('query_port_link_layer_ethernet',
              pa.link_layer == e.IBV_LINK_LAYER_ETHERNET,
              f'expected {e.IBV_LINK_LAYER_ETHERNET} got {pa.link_layer}')
        want = expected_active_mtu()
        if want is not None:
            check('query_port_active_mtu_from_interface', pa.active_mtu == want,
                  f'expected {want} got {pa.active_mtu}')
        check('query_port_gid_tbl_len', pa.gid_tbl_len >= 1,
              f'expected >= 1 got {pa.gid_tbl_len}')
    try:
        ctx.query_port(2)
        not_ok('query_port_2_fails', 'expected PyverbsRDMAError EINVAL got success')
    except PyverbsRDMAError as ex:
        check('query_port_2_fails', ex.error_code == errno.EINVAL,
              f'expected error_code {errno.EINVAL} got {ex.error_code}')
    except Exception as ex:
        not_ok('query_port_2_fails', f'expected PyverbsRDMAError got {ex!r}')

    # GID 0: IPv4-mapped, RoCE v2
    gid = step('query_gid', ctx.query_gid, PORT, GID_INDEX)
    if gid is not None:
        raw = gid_bytes(gid)
        print(f'# gid[0] = {gid.gid}')
        mapped = raw[:12] == bytes(10) + b'\xff\xff' and raw[12:] != bytes(4)
        check('query_gid_ipv4_mapped', mapped,
              f'expected ::ffff:a.b.c.d got {ipaddress.IPv6Address(raw)}')
    ge = step('query_gid_ex', ctx.query_gid_ex, PORT, GID_INDEX)
    if ge is not None:
        check('query_gid_ex_type_roce_v2', ge.gid_type == e.IBV_GID_TYPE_ROCE_V2,
              f'expected {e.IBV_GID_TYPE_ROCE_V2} got {ge.gid_type}')
        check('query_gid_ex_index', ge.gid_index == GID_INDEX and ge.port_num == PORT,
              f'expected index {GID_INDEX} port {PORT} got {ge.gid_index} {ge.port_num}')
    if pa is not None:
        tbl = step('query_gid_table', ctx.query_gid_table, pa.gid_tbl_len)
        if tbl is not None:
            ent = [t for t in tbl if t.gid_index == GID_INDEX and t.port_num == PORT]
            check('query_gid_table_entry0',
                  len(ent) == 1 and ent[0].gid_type == e.IBV_GID_TYPE_ROCE_V2,
                  f'expected one RoCE v2 entry for index 0 got '
                  f'{[(t.gid_index, t.port_num, t.gid_type) for t in tbl]}')
    # query_gid_type: private libibverbs symbol; in a child process.
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), '--gid-type'],
                           capture_output=True, text=True, timeout=60)
        out = (r.stdout + r.stderr).strip().replace('\n', ' | ')
        if r.returncode == 0:
            ok('query_gid_type_roce_v2')
        elif r.returncode == 3:
            not_ok('query_gid_type_roce_v2',
                   f'expected {e.IBV_GID_TYPE_SYSFS_ROCE_V2} (IBV_GID_TYPE_SYSFS_ROCE_V2) got: {out}')
        else:
            print(f'# query_gid_type (private ibv_query_gid_type) unavailable: '
                  f'exit {r.returncode}: {out[-300:]}')
            skip('query_gid_type_roce_v2', 'private symbol not provided')
    except subprocess.TimeoutExpired:
        print('# query_gid_type child timed out')
        skip('query_gid_type_roce_v2', 'child timed out')

    pkey = step('query_pkey', ctx.query_pkey, PORT, 0)
    if pkey is not None:
        check('query_pkey_default', pkey == 0xffff, f'expected 0xffff got {pkey:#x}')

    # PD, MR (pyverbs registers through ibv_reg_mr_iova2)
    pd = step('alloc_pd', PD, ctx)
    if pd is None:
        return
    access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
              e.IBV_ACCESS_REMOTE_READ)
    mr = step('reg_mr', MR, pd, 4096, access)
    if mr is not None:
        print(f'# mr lkey {mr.lkey:#x} rkey {mr.rkey:#x}')
        mr.write(b'uroce', 5)
        check('mr_buffer_roundtrip', mr.read(5, 0) == b'uroce',
              f"expected b'uroce' got {mr.read(5, 0)!r}")
    try:
        bad = MR(pd, 4096, e.IBV_ACCESS_REMOTE_WRITE)
        bad.close()
        not_ok('reg_mr_remote_write_without_local_write',
               'expected PyverbsRDMAError EINVAL got an MR')
    except PyverbsRDMAError as ex:
        check('reg_mr_remote_write_without_local_write',
              ex.error_code == errno.EINVAL,
              f'expected error_code {errno.EINVAL} got {ex.error_code}')

    # Completion channel and CQ
    ch = step('create_comp_channel', CompChannel, ctx)
    cq = step('create_cq', CQ, ctx, 64, None, ch, 0)
    if cq is None:
        return
    check('cq_cqe', cq.cqe >= 64, f'expected >= 64 got {cq.cqe}')
    step('req_notify_cq', cq.req_notify)
    npolled, _ = cq.poll(1)
    check('poll_cq_empty', npolled == 0, f'expected 0 got {npolled}')

    # RC QP: RESET -> INIT -> RTR -> RTS, connected to itself.
    cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
    init_attr = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap,
                           sq_sig_all=1)
    qp = step('create_qp_rc', QP, pd, init_attr)
    if qp is None:
        return
    print(f'# qp_num {qp.qp_num}')
    check('qp_state_reset', qp.qp_state == e.IBV_QPS_RESET,
          f'expected {e.IBV_QPS_RESET} got {qp.qp_state}')

    # An illegal transition fails with EINVAL (positive errno, as rdma-core).
    try:
        qp.modify(QPAttr(qp_state=e.IBV_QPS_RTS), e.IBV_QP_STATE)
        not_ok('modify_reset_to_rts_fails', 'expected PyverbsRDMAError EINVAL got success')
    except PyverbsRDMAError as ex:
        check('modify_reset_to_rts_fails', ex.error_code == errno.EINVAL,
              f'expected error_code {errno.EINVAL} got {ex.error_code}')

    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index = 0
    a.port_num = PORT
    a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
    step('modify_reset_to_init', qp.modify, a,
         e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)

    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.path_mtu = e.IBV_MTU_1024
    a.dest_qp_num = qp.qp_num
    a.rq_psn = 0x123456
    a.max_dest_rd_atomic = 1
    a.min_rnr_timer = 12
    if gid is not None:
        gr = GlobalRoute(dgid=gid, sgid_index=GID_INDEX)
        a.ah_attr = AHAttr(port_num=PORT, is_global=1, gr=gr)
    step('modify_init_to_rtr', qp.modify, a,
         e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
         e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)

    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.timeout = 14
    a.retry_cnt = 7
    a.rnr_retry = 7
    a.sq_psn = 0x654321
    a.max_rd_atomic = 1
    step('modify_rtr_to_rts', qp.modify, a,
         e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
         e.IBV_QP_RNR_RETRY | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)

    res = step('query_qp', qp.query,
               e.IBV_QP_STATE | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
               e.IBV_QP_RQ_PSN | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT |
               e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY | e.IBV_QP_ACCESS_FLAGS |
               e.IBV_QP_MAX_QP_RD_ATOMIC | e.IBV_QP_MAX_DEST_RD_ATOMIC |
               e.IBV_QP_CAP | e.IBV_QP_AV)
    if res is not None:
        qa, qia = res
        want = {
            'qp_state': e.IBV_QPS_RTS, 'path_mtu': e.IBV_MTU_1024,
            'dest_qp_num': qp.qp_num, 'rq_psn': 0x123456, 'sq_psn': 0x654321,
            'timeout': 14, 'retry_cnt': 7, 'rnr_retry': 7,
            'max_rd_atomic': 1, 'max_dest_rd_atomic': 1,
            'qp_access_flags': e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ,
        }
        for k, v in want.items():
            got = getattr(qa, k)
            check(f'query_qp_{k}', got == v, f'expected {v} got {got}')
        check('query_qp_cap', qa.cap.max_send_wr >= 16 and qa.cap.max_recv_wr >= 16,
              f'expected wr >= 16 got {qa.cap.max_send_wr}/{qa.cap.max_recv_wr}')
        check('query_qp_init_attr_type', qia.qp_type == e.IBV_QPT_RC,
              f'expected {e.IBV_QPT_RC} got {qia.qp_type}')
        if gid is not None:
            dg = qa.ah_attr.dgid
            dg = str(dg.gid) if hasattr(dg, 'gid') else str(dg)
            check('query_qp_ah_dgid', qa.ah_attr.is_global == 1 and
                  dg.replace(':', '').lower() == str(gid.gid).replace(':', '').lower(),
                  f'expected global dgid {gid.gid} got is_global '
                  f'{qa.ah_attr.is_global} dgid {dg}')

    step('modify_rts_to_err', qp.modify, QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    step('modify_err_to_reset', qp.modify, QPAttr(qp_state=e.IBV_QPS_RESET),
         e.IBV_QP_STATE)
    step('destroy_qp', qp.close)
    step('destroy_cq', cq.close)
    if ch is not None:
        step('destroy_comp_channel', ch.close)
    if mr is not None:
        step('dereg_mr', mr.close)
    step('dealloc_pd', pd.close)


if __name__ == '__main__':
    if len(sys.argv) == 2 and sys.argv[1] == '--gid-type':
        try:
            sys.exit(gid_type_child())
        except Exception as ex:
            print(f'{type(ex).__name__}: {ex}')
            sys.exit(4)
    try:
        main()
    except Exception:
        not_ok('unexpected_exception', traceback.format_exc().replace('\n', ' | '))
    tail = f', {skipped} skipped' if skipped else ''
    print(f'{passed} passed, {failed} failed{tail}', flush=True)
    sys.exit(1 if failed else 0)
