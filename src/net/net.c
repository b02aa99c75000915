/* The backend-independent part of packet I/O: counters, fault injection for
 * deterministic tests (UROCE_FAULT_DROP_TX/RX) and the pcap tap. */
#include "net.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "../wire/hdr.h"

struct uroce_net *net_create(struct uroce_config *cfg, struct uroce_stats_page *stats)
{
	return net_create_backend(cfg, stats, &uroce_udp_ops);
}

struct uroce_net *net_create_backend(struct uroce_config *cfg, struct uroce_stats_page *stats,
				     const struct uroce_net_ops *ops)
{
	struct uroce_net *net = calloc(1, sizeof(*net));
	int rc;

	if (!net)
		return NULL;
	net->cfg = cfg;
	net->stats = stats;
	net->ops = ops;
	atomic_init(&net->fault_rng, 0x9E3779B97F4A7C15ul ^ ((unsigned long)cfg->fault_seed * 0xBF58476D1CE4E5B9ul));
	rc = net->ops->open(net);
	if (rc < 0) {
		free(net);
		errno = -rc;
		return NULL;
	}
	if (cfg->pcap_path[0]) {
		net->pcap = pcap_tap_open(cfg->pcap_path);
		if (!net->pcap)
			LOG_ERR("uroce: cannot write pcap %s", cfg->pcap_path);
		else
			net_rx_ip_meta(net, true); /* the tap records them */
	}
	return net;
}

void net_destroy(struct uroce_net *net)
{
	if (!net)
		return;
	if (net->pcap)
		pcap_tap_close(net->pcap);
	net->ops->close(net);
	free(net);
}

struct uroce_flow *net_flow_open(struct uroce_net *net, const uint8_t sgid[16], uint16_t sport,
				 const uint8_t *peer)
{
	return net->ops->flow_open(net, sgid, sport, peer);
}

void net_flow_close(struct uroce_net *net, struct uroce_flow *flow)
{
	net->ops->flow_close(flow);
}

uint32_t net_flow_part_bytes(struct uroce_net *net, const struct uroce_flow *flow)
{
	return flow && net->ops->flow_part_bytes ? net->ops->flow_part_bytes(flow) : 0;
}

static bool fault_hit(struct uroce_net *net, atomic_uint *seq, unsigned every, double pct)
{
	if (every)
		return (atomic_fetch_add_explicit(seq, 1, memory_order_relaxed) + 1) % every == 0;
	if (pct <= 0)
		return false;
	/* a seeded xorshift: the same seed drops the same packet numbers */
	unsigned long x = atomic_load_explicit(&net->fault_rng, memory_order_relaxed), y;
	do {
		y = x ^ (x << 13);
		y ^= y >> 7;
		y ^= y << 17;
	} while (!atomic_compare_exchange_weak(&net->fault_rng, &x, y));
	return (double)(y % 1000000) < pct * 10000.0;
}

int net_send(struct uroce_net *net, struct uroce_flow *flow, const uint8_t sgid[16],
	     uint16_t sport, const uint8_t dgid[16], uint8_t tos, struct uroce_txmsg *msgs, int n)
{
	uint64_t bytes = 0;

	if (n == 0)
		return 0;
	if (net->pcap)
		for (int i = 0; i < n; i++)
			pcap_tap_write(net->pcap, sgid, dgid, sport, ROCE_UDP_PORT, msgs[i].gso_idx, tos, 64,
				       msgs[i].iov, msgs[i].iovcnt);
	int sent = net->ops->send(flow, dgid, tos, msgs, n);
	if (sent < 0) {
		UROCE_COUNT(net->stats, UC_tx_errors, 1);
		return sent;
	}
	for (int i = 0; i < sent; i++)
		bytes += msgs[i].len;
	UROCE_COUNT(net->stats, UC_tx_packets, (uint64_t)sent);
	UROCE_COUNT(net->stats, UC_tx_bytes, bytes);
	if (sent < n)
		UROCE_COUNT(net->stats, UC_tx_errors, (uint64_t)(n - sent));
	return sent;
}

bool net_fault_tx(struct uroce_net *net)
{
	struct uroce_config *cfg = net->cfg;

	if (!cfg->fault_drop_tx && cfg->fault_pct_tx <= 0)
		return false;
	if (!fault_hit(net, &net->fault_tx_seq, cfg->fault_drop_tx, cfg->fault_pct_tx))
		return false;
	UROCE_COUNT(net->stats, UC_drop_injected, 1);
	return true;
}

int net_recv(struct uroce_net *net, struct uroce_rxpkt *pkts, int max)
{
	struct uroce_config *cfg = net->cfg;
	int n = net->ops->recv(net, pkts, max);
	uint64_t bytes = 0;

	if (n <= 0)
		return n;
	for (int i = 0; i < n; i++)
		bytes += pkts[i].len;
	UROCE_COUNT(net->stats, UC_rx_packets, (uint64_t)n);
	UROCE_COUNT(net->stats, UC_rx_bytes, bytes);
	if (cfg->fault_drop_rx || cfg->fault_pct_rx > 0) {
		int k = 0;
		for (int i = 0; i < n; i++) {
			if (fault_hit(net, &net->fault_rx_seq, cfg->fault_drop_rx, cfg->fault_pct_rx)) {
				UROCE_COUNT(net->stats, UC_drop_injected, 1);
				continue;
			}
			if (k != i)
				pkts[k] = pkts[i];
			k++;
		}
		n = k;
	}
	return n;
}

void net_rx_ip_meta(struct uroce_net *net, bool on)
{
	net->ops->rx_ip_meta(net, on || net->pcap);
}

void net_rx_sleeping(struct uroce_net *net, bool sleeping)
{
	net->ops->rx_sleeping(net, sleeping);
}

void net_recv_done(struct uroce_net *net, struct uroce_rxpkt *pkts, int n)
{
	net->ops->recv_done(net, pkts, n);
}
