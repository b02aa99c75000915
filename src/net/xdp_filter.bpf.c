/* The AF_XDP backend's filter (xdp.c), attached to the interface of the
 * device's address: RoCEv2 packets to that address (IPv4, UDP destination
 * port 4791, unfragmented, roce-wire.md §1) go to the AF_XDP socket of the
 * queue they came in on; everything else (ARP, TCP, other UDP, another
 * address's RoCEv2) goes on to the kernel's stack as if no program were
 * there.  A queue with no socket in the map passes its packets too
 * (bpf_redirect_map's XDP_PASS fallback).
 *
 * "xdp.frags": the filter reads only the first 42 bytes, so it may sit on
 * an interface whose MTU is larger than a page (veth refuses a program that
 * does not say so); xdp.c keeps its own packets within one frame. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ROCE_UDP_PORT 4791
#define XDP_MAX_QUEUES 64

/* the device's address (network order), set by xdp.c before the load:
 * another address's RoCEv2 traffic on this interface (rxe, a uroce on UDP
 * sockets) goes on to the stack */
const volatile __u32 uroce_daddr = 0;

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XDP_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} uroce_xsks SEC(".maps");

SEC("xdp.frags")
int uroce_xdp_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);

	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	/* options or fragments: not what a RoCEv2 sender makes (§1.2) */
	if (ip->ihl != 5 || ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x3fff)))
		return XDP_PASS;
	if (udp->dest != bpf_htons(ROCE_UDP_PORT) || ip->daddr != uroce_daddr)
		return XDP_PASS;
	return bpf_redirect_map(&uroce_xsks, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "GPL";
