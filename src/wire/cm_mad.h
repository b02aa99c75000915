/* IB CM MADs as the kernel's rdma_cm sends them over RoCEv2 on QP1
 * (shared/docs/cm-wire.md §3): the 24-byte MAD header, then the CM
 * message body.  Offsets named CM_* are from the body's start ("CM+n" in
 * cm-wire.md); every multi-byte field is big-endian (hdr.h's ld/st). */
#ifndef UROCE_WIRE_CM_MAD_H
#define UROCE_WIRE_CM_MAD_H

#include <stdbool.h>
#include <stdint.h>
#include "hdr.h"

/* §3.1: a UD SEND Only to QP1, Q_Key 0x80010000, a 256-byte MAD */
#define GSI_QPN 1u
#define GSI_QKEY 0x80010000u
#define MAD_LEN 256u
#define MAD_HDR_LEN 24u
#define CM_BODY_LEN (MAD_LEN - MAD_HDR_LEN) /* 232 */

/* §3.2 common header */
#define MAD_BASE_VERSION 1
#define MAD_CLASS_CM 0x07
#define MAD_CM_CLASS_VERSION 2
#define MAD_METHOD_SEND 0x03

enum cm_attr {
	CM_ATTR_REQ = 0x10,
	CM_ATTR_MRA = 0x11,
	CM_ATTR_REJ = 0x12,
	CM_ATTR_REP = 0x13,
	CM_ATTR_RTU = 0x14,
	CM_ATTR_DREQ = 0x15,
	CM_ATTR_DREP = 0x16,
	CM_ATTR_SIDR_REQ = 0x17,
	CM_ATTR_SIDR_REP = 0x18,
};

static inline uint8_t mad_base_version(const uint8_t *m) { return m[0]; }
static inline uint8_t mad_class(const uint8_t *m) { return m[1]; }
static inline uint8_t mad_class_version(const uint8_t *m) { return m[2]; }
static inline uint8_t mad_method(const uint8_t *m) { return m[3]; }
static inline uint64_t mad_tid(const uint8_t *m) { return ld64(m + 8); }
static inline uint16_t mad_attr(const uint8_t *m) { return ld16(m + 16); }
static inline void mad_hdr_set(uint8_t *m, uint16_t attr, uint64_t tid)
{
	memset(m, 0, MAD_HDR_LEN);
	m[0] = MAD_BASE_VERSION;
	m[1] = MAD_CLASS_CM;
	m[2] = MAD_CM_CLASS_VERSION;
	m[3] = MAD_METHOD_SEND;
	st64(m + 8, tid);
	st16(m + 16, attr);
}

/* §3.3: IP CM service IDs and the private-data header of REQ / SIDR_REQ */
#define CM_PS_TCP 0x0106
#define CM_PS_UDP 0x0111
#define CM_PS_IB 0x013F
#define CM_PS_IPOIB 0x0002
/* 0x0000000001 | port space | port: the rdma_cm port spaces carry the 0x01 */
static inline uint64_t cm_service_id(uint16_t ps, uint16_t port) { return (uint64_t)ps << 16 | port; }
#define CM_IP_HDR_LEN 36u

/* §3.4 REQ */
#define REQ_LOCAL_COMM_ID 0
#define REQ_SERVICE_ID 8
#define REQ_LOCAL_CA_GUID 16
#define REQ_LOCAL_QKEY 28
#define REQ_QPN_RESP_RES 32    /* QPN 24 | ResponderResources 8 */
#define REQ_EECN_INIT_DEPTH 36 /* EECN 24 | InitiatorDepth 8 */
#define REQ_TIMEOUT_TYPE 43    /* RemoteCMResponseTimeout 5 | ServiceType 2 | E2E 1 */
#define REQ_START_PSN 44       /* 24 bits, then LocalCMResponseTimeout 5 | RetryCount 3 */
#define REQ_PKEY 48
#define REQ_MTU_RNR 50         /* PathMTU 4 | RDCExists 1 | RNRRetryCount 3 */
#define REQ_MAXRETRY_SRQ 51    /* MaxCMRetries 4 | SRQ 1 | ExtType 3 */
#define REQ_LOCAL_LID 52
#define REQ_REMOTE_LID 54
#define REQ_LOCAL_GID 56
#define REQ_REMOTE_GID 72
#define REQ_FLOW_LABEL 88      /* FlowLabel 20 | rsvd 6 | PacketRate 6 */
#define REQ_TCLASS 92
#define REQ_HOP_LIMIT 93
#define REQ_SL 94
#define REQ_ACK_TIMEOUT 95     /* LocalACKTimeout 5 | rsvd 3 */
#define REQ_PRIVATE 140
#define REQ_PRIVATE_LEN 92u

/* §3.5 REP */
#define REP_LOCAL_COMM_ID 0
#define REP_REMOTE_COMM_ID 4
#define REP_LOCAL_QKEY 8
#define REP_LOCAL_QPN 12
#define REP_START_PSN 20
#define REP_RESP_RES 24
#define REP_INIT_DEPTH 25
#define REP_ACK_DELAY 26       /* TargetACKDelay 5 | Failover 2 | E2E 1 */
#define REP_RNR_SRQ 27         /* RNRRetryCount 3 | SRQ 1 */
#define REP_LOCAL_CA_GUID 28
#define REP_PRIVATE 36
#define REP_PRIVATE_LEN 196u

/* RTU, DREP: two comm IDs, then private data */
#define RTU_PRIVATE 8
#define RTU_PRIVATE_LEN 224u
/* DREQ: two comm IDs, the receiver's QPN (§3.5), private data */
#define DREQ_REMOTE_QPN 8
#define DREQ_PRIVATE 12
#define DREQ_PRIVATE_LEN 220u

/* §3.6 REJ and MRA */
#define REJ_MSG 8              /* MessageRejected 2 (MSB) */
#define REJ_INFO_LEN 9         /* RejectedInfoLength 7 (MSB) */
#define REJ_REASON 10
#define REJ_ARI 12
#define REJ_PRIVATE 84
#define REJ_PRIVATE_LEN 148u
#define MRA_MSG 8
#define MRA_TIMEOUT 9          /* ServiceTimeout 5 (MSB) */
#define MRA_PRIVATE 10
#define MRA_PRIVATE_LEN 222u
enum { CM_MSG_REQ = 0, CM_MSG_REP = 1, CM_MSG_OTHER = 2 };

/* §4.3 REJ reasons rdma_cm sends */
enum cm_rej_reason {
	CM_REJ_TIMEOUT = 4,
	CM_REJ_INVALID_SERVICE_ID = 8,
	CM_REJ_STALE_CONN = 10,
	CM_REJ_INVALID_GID = 12,
	CM_REJ_CONSUMER_DEFINED = 28,
};

/* §3.7 SIDR */
#define SIDR_REQ_ID 0
#define SIDR_REQ_PKEY 4
#define SIDR_REQ_SERVICE_ID 8
#define SIDR_REQ_PRIVATE 16
#define SIDR_REQ_PRIVATE_LEN 216u
#define SIDR_REP_ID 0
#define SIDR_REP_STATUS 4
#define SIDR_REP_QPN 8
#define SIDR_REP_SERVICE_ID 12
#define SIDR_REP_QKEY 20
#define SIDR_REP_PRIVATE 96
#define SIDR_REP_PRIVATE_LEN 136u
enum { SIDR_OK = 0, SIDR_UNSUPPORTED = 1, SIDR_REJECT = 2 };

/* The comm ID (or SIDR request ID) a message names as the receiver's own:
 * what the receiver matches on (§3.8), and on a shared address the field
 * that names the process (cm_owner_slot).  REQ and SIDR_REQ name none: the
 * service ID finds their listener.  false for those and unknown kinds. */
static inline bool cm_receiver_id(const uint8_t *mad, uint32_t *id)
{
	const uint8_t *b = mad + MAD_HDR_LEN;
	switch (mad_attr(mad)) {
	case CM_ATTR_MRA: case CM_ATTR_REJ: case CM_ATTR_REP: case CM_ATTR_RTU:
	case CM_ATTR_DREQ: case CM_ATTR_DREP:
		*id = ld32(b + 4);
		return true;
	case CM_ATTR_SIDR_REP:
		*id = ld32(b + SIDR_REP_ID);
		return true;
	default:
		return false;
	}
}

#endif
