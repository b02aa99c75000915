/* A fake packet backend for the white-box tests: every packet the transport
 * sends is recorded, and receive calls return what the test queued.  It
 * depends on struct uroce_net_ops (net/net.h) alone, so a change of that
 * interface is mended here and nowhere else. */
#ifndef UROCE_TESTS_FAKE_NET_H
#define UROCE_TESTS_FAKE_NET_H

#include <stdint.h>
#include "net/net.h"

#define FAKE_PKT_BYTES 4400   /* PMTU 4096 + headers, pad and ICRC */
#define FAKE_SENT_MAX 512
#define FAKE_RX_MAX 64

/* One packet as it would leave: the UDP payload and its addresses. */
struct fake_pkt {
	uint8_t buf[FAKE_PKT_BYTES];  /* BTH .. ICRC */
	uint32_t len;
	uint8_t sgid[16], dgid[16];
	uint16_t sport;
	uint16_t ip_id;               /* the IPv4 ID its ICRC covers (GSO place) */
	uint8_t flags;                /* NET_PKT_* it was sent or is received with */
};

extern const struct uroce_net_ops fake_net_ops;

/* The environment a device on the fake is opened with: GID 0 198.18.0.1,
 * no rings, no ACK deferral, MTU 4096, no fault injection or capture. */
void fake_net_setenv(void);

/* Packets sent since the last fake_sent_clear, oldest first. */
unsigned fake_sent_count(void);
const struct fake_pkt *fake_sent(unsigned i);
void fake_sent_clear(void);
/* Past FAKE_SENT_MAX: lose the packets (the fuzzer) instead of aborting. */
void fake_sent_overflow_drops(bool on);

/* Flows carry references (NET_PKT_REF, transport/ref.h) naming this
 * process, as a same-host ring whose peer answered the probe; off at open. */
void fake_net_refs(bool on);

/* Queue a packet for the next receive call (copied). */
void fake_rx_queue(const uint8_t *buf, uint32_t len, const uint8_t sgid[16], const uint8_t dgid[16],
		   uint16_t sport);
/* A recorded packet, received as it was sent. */
void fake_rx_queue_sent(const struct fake_pkt *p);
unsigned fake_rx_pending(void);
/* The flags the packet queued last is received with (NET_PKT_*). */
void fake_rx_flags(uint8_t flags);

#endif
