/* UROCE_PCAP: every packet sent and received, written as Ethernet + IP + UDP
 * frames so that Wireshark/tshark decode them as RoCEv2 (UDP 4791).  The IP
 * and UDP headers are rebuilt from what the socket saw: IPv4 with DF and the
 * Identification the ICRC was checked with, so the ICRC in the file verifies. */
#include "net.h"
#include <pcap/pcap.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include "../wire/ip.h"
#include "../util/dl.h"

/* libpcap, opened at the first tap (util/dl.h): a process that does not
 * capture maps neither it nor what it needs (libdbus, libsystemd,
 * libgcrypt and more) */
#define PCAP_SYMS(X) X(pcap_open_dead) X(pcap_close) X(pcap_dump_open) X(pcap_dump) \
	X(pcap_dump_flush) X(pcap_dump_close)
static struct { PCAP_SYMS(DL_SLOT) } pc;
static const char *const pc_names[] = { PCAP_SYMS(DL_NAME) };
static struct dl_lib pc_lib = { UROCE_PCAP_SONAME, UROCE_PCAP_PATH, 0 };

struct pcap_tap {
	pcap_t *pd;
	pcap_dumper_t *dumper;
	pthread_mutex_t lock;
};

struct pcap_tap *pcap_tap_open(const char *path)
{
	if (!dl_load(&pc_lib, &pc, pc_names, DL_COUNT(pc_names), "UROCE_PCAP"))
		return NULL;
	struct pcap_tap *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->pd = pc.pcap_open_dead(DLT_EN10MB, 65535);
	if (!t->pd || !(t->dumper = pc.pcap_dump_open(t->pd, path))) {
		if (t->pd)
			pc.pcap_close(t->pd);
		free(t);
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	return t;
}

void pcap_tap_close(struct pcap_tap *t)
{
	pc.pcap_dump_close(t->dumper);
	pc.pcap_close(t->pd);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* UDP checksum over the pseudo header (addresses `alen` bytes each). */
static uint16_t udp_csum(const uint8_t *src, const uint8_t *dst, int alen, const uint8_t *udp, size_t n)
{
	uint32_t s = 0;
	for (int i = 0; i < alen; i += 2)
		s += (uint32_t)src[i] << 8 | src[i + 1], s += (uint32_t)dst[i] << 8 | dst[i + 1];
	s += (uint32_t)n + 17;
	for (size_t i = 0; i < n; i += 2)
		s += (uint32_t)udp[i] << 8 | (i + 1 < n ? udp[i + 1] : 0);
	while (s >> 16)
		s = (s & 0xFFFF) + (s >> 16);
	uint16_t r = (uint16_t)~s;
	return r ? r : 0xFFFF;
}

void pcap_tap_write(struct pcap_tap *t, const uint8_t sgid[16], const uint8_t dgid[16],
		    uint16_t sport, uint16_t dport, uint16_t ip_id, uint8_t tos, uint8_t ttl,
		    const struct iovec *iov, int iovcnt)
{
	static _Thread_local uint8_t frame[14 + 40 + 8 + 65536];
	size_t plen = 0;
	bool v4 = gid_is_ipv4(sgid);
	size_t iph = v4 ? 20 : 40;
	uint8_t *ip = frame + 14, *udp = ip + iph, *pl = udp + 8;

	for (int i = 0; i < iovcnt; i++) {
		if (plen + iov[i].iov_len > 65536 - 8)
			return;
		memcpy(pl + plen, iov[i].iov_base, iov[i].iov_len);
		plen += iov[i].iov_len;
	}
	/* locally administered MACs carrying the low address bytes */
	uint8_t dmac[6] = { 0x02, 0, dgid[12], dgid[13], dgid[14], dgid[15] };
	uint8_t smac[6] = { 0x02, 0, sgid[12], sgid[13], sgid[14], sgid[15] };
	memcpy(frame, dmac, 6);
	memcpy(frame + 6, smac, 6);
	frame[12] = v4 ? 0x08 : 0x86;
	frame[13] = v4 ? 0x00 : 0xDD;
	uint16_t ulen = (uint16_t)(8 + plen);
	udp[0] = (uint8_t)(sport >> 8); udp[1] = (uint8_t)sport;
	udp[2] = (uint8_t)(dport >> 8); udp[3] = (uint8_t)dport;
	udp[4] = (uint8_t)(ulen >> 8); udp[5] = (uint8_t)ulen;
	udp[6] = udp[7] = 0;
	ip_header_build(ip, sgid, dgid, ulen, ip_id, tos, ttl);
	/* uroce's sockets send real UDP checksums (udp.c) */
	uint16_t c = v4 ? udp_csum(sgid + 12, dgid + 12, 4, udp, ulen) : udp_csum(sgid, dgid, 16, udp, ulen);
	udp[6] = (uint8_t)(c >> 8);
	udp[7] = (uint8_t)c;
	struct pcap_pkthdr ph;
	gettimeofday(&ph.ts, NULL);
	ph.caplen = ph.len = (bpf_u_int32)(14 + iph + ulen);
	pthread_mutex_lock(&t->lock);
	pc.pcap_dump((u_char *)t->dumper, &ph, frame);
	pc.pcap_dump_flush(t->dumper);
	pthread_mutex_unlock(&t->lock);
}
