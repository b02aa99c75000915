/* Known-answer tests of the wire layer against shared/vectors (and the rxe
 * captures): every frame parses to the right fields, and the packet rebuilt
 * from those fields with uroce's header setters and ICRC code is
 * byte-identical, ICRC included (roce-wire.md §4.6). */
#include <dirent.h>
#include <stdbool.h>
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

static int failures, checks;

#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; printf("not ok: " __VA_ARGS__); printf("\n"); } } while (0)

struct frame_info {
	uint8_t sgid[16], dgid[16];
	uint16_t sport, dport, udp_len, ip_id, ip_frag;
	const uint8_t *udp_payload;
};

static int parse_frame(const uint8_t *f, size_t n, struct frame_info *fi)
{
	size_t off = 14;
	uint16_t et;

	if (n < 14)
		return -1;
	et = ld16(f + 12);
	if (et == 0x8100) {
		et = ld16(f + 16);
		off += 4;
	}
	memset(fi, 0, sizeof(*fi));
	if (et == 0x0800) {
		const uint8_t *ip = f + off;
		fi->sgid[10] = fi->sgid[11] = fi->dgid[10] = fi->dgid[11] = 0xff;
		memcpy(fi->sgid + 12, ip + 12, 4);
		memcpy(fi->dgid + 12, ip + 16, 4);
		fi->ip_id = ld16(ip + 4);
		fi->ip_frag = ld16(ip + 6);
		off += 20;
	} else if (et == 0x86DD) {
		const uint8_t *ip = f + off;
		memcpy(fi->sgid, ip + 8, 16);
		memcpy(fi->dgid, ip + 24, 16);
		off += 40;
	} else {
		return -1;
	}
	const uint8_t *udp = f + off;
	fi->sport = ld16(udp);
	fi->dport = ld16(udp + 2);
	fi->udp_len = ld16(udp + 4);
	fi->udp_payload = udp + 8;
	if (off + fi->udp_len > n || fi->udp_len < 8 + BTH_LEN + ICRC_LEN)
		return -1;
	return 0;
}

/* Rebuild the UDP payload from parsed fields; returns its length. */
static size_t rebuild(const struct frame_info *fi, uint8_t *out)
{
	const uint8_t *in = fi->udp_payload;
	uint8_t op = bth_opcode(in);
	const struct uroce_opinfo *oi = opinfo(op);
	size_t total = fi->udp_len - 8u;
	unsigned pad = bth_pad(in);
	size_t paylen = total - oi->hdr_len - pad - ICRC_LEN;

	memset(out, 0, total);
	bth_set(out, op, bth_se(in), pad, bth_qpn(in), bth_ackreq(in), bth_psn(in));
	if (bth_becn(in))
		bth_set_becn(out);
	if (oi->off_deth)
		deth_set(out + oi->off_deth, deth_qkey(in + oi->off_deth), deth_sqpn(in + oi->off_deth));
	if (oi->off_reth)
		reth_set(out + oi->off_reth, reth_va(in + oi->off_reth), reth_rkey(in + oi->off_reth), reth_len(in + oi->off_reth));
	if (oi->off_aeth)
		aeth_set(out + oi->off_aeth, aeth_syndrome(in + oi->off_aeth), aeth_msn(in + oi->off_aeth));
	if (oi->off_atmeth) {
		const uint8_t *a = in + oi->off_atmeth;
		atmeth_set(out + oi->off_atmeth, atmeth_va(a), atmeth_rkey(a), atmeth_swap_add(a), atmeth_compare(a));
	}
	if (oi->off_atmack)
		atmack_set(out + oi->off_atmack, atmack_orig(in + oi->off_atmack));
	if (oi->off_imm)
		immdt_set_raw(out + oi->off_imm, immdt_raw(in + oi->off_imm));
	if (oi->off_ieth)
		ieth_set(out + oi->off_ieth, ieth_rkey(in + oi->off_ieth));
	memcpy(out + oi->hdr_len, in + oi->hdr_len, paylen);
	struct icrc_iphdr ih = { fi->sgid, fi->dgid, fi->sport, fi->dport, fi->udp_len, fi->ip_id, fi->ip_frag };
	uint32_t crc = icrc_bth(icrc_begin(&ih), out, total - ICRC_LEN);
	icrc_store(out + total - ICRC_LEN, crc);
	return total;
}

/* icrc_packet, as the transmit path calls it (headers, payload pieces,
 * pad) and as the receive path does (one span), gives the known ICRC: on
 * both sides of its gather limit (the vectors hold packets of either). */
static void check_icrc_packet(const char *name, int idx, const struct icrc_iphdr *ih, const uint8_t *p,
			      size_t covered, uint32_t want)
{
	struct iovec one = { (void *)p, covered };
	CHECK(icrc_packet(ih, &one, 1) == want, "%s#%d icrc_packet over one span (%zu bytes)", name, idx, covered);
	/* BTH alone, then pieces of 1, 7 and 100 bytes, the rest, and an empty
	 * one (the pad of a packet that needs none) */
	struct iovec v[6];
	size_t at = 0, cut[4] = { 12, 1, 7, 100 };
	int n = 0;
	for (int i = 0; i < 4 && at + cut[i] < covered; i++) {
		v[n++] = (struct iovec){ (void *)(p + at), cut[i] };
		at += cut[i];
	}
	v[n++] = (struct iovec){ (void *)(p + at), covered - at };
	v[n++] = (struct iovec){ (void *)(p + covered), 0 };
	CHECK(icrc_packet(ih, v, n) == want, "%s#%d icrc_packet over %d pieces", name, idx, n);
}

static void check_frame(const char *name, int idx, const uint8_t *f, size_t n, bool rebuild_exact)
{
	struct frame_info fi;
	uint8_t out[9000];

	CHECK(parse_frame(f, n, &fi) == 0, "%s#%d parses", name, idx);
	if (failures && parse_frame(f, n, &fi))
		return;
	uint8_t op = bth_opcode(fi.udp_payload);
	const struct uroce_opinfo *oi = opinfo(op);
	CHECK(oi->name != NULL, "%s#%d opcode 0x%02x is in the opcode table", name, idx, op);
	if (!oi->name)
		return;
	CHECK(fi.dport == ROCE_UDP_PORT, "%s#%d dport 4791", name, idx);
	CHECK(bth_tver(fi.udp_payload) == 0 && bth_pkey(fi.udp_payload) == 0xFFFF, "%s#%d TVer/P_Key", name, idx);
	size_t total = fi.udp_len - 8u;
	CHECK(total >= (size_t)oi->hdr_len + bth_pad(fi.udp_payload) + ICRC_LEN, "%s#%d length covers headers", name, idx);
	size_t paylen = total - oi->hdr_len - bth_pad(fi.udp_payload) - ICRC_LEN;
	CHECK(bth_pad(fi.udp_payload) == pad_for((uint32_t)paylen), "%s#%d pad count", name, idx);
	if (!rebuild_exact) {
		/* foreign capture: the ICRC must verify with the frame's own IP ID,
		 * and the solver must find that ID from an ID-0 computation */
		struct icrc_iphdr ih = { fi.sgid, fi.dgid, fi.sport, fi.dport, fi.udp_len, fi.ip_id, fi.ip_frag };
		uint32_t rx = icrc_load(fi.udp_payload + total - ICRC_LEN);
		CHECK(icrc_bth(icrc_begin(&ih), fi.udp_payload, total - ICRC_LEN) == rx, "%s#%d ICRC verifies", name, idx);
		check_icrc_packet(name, idx, &ih, fi.udp_payload, total - ICRC_LEN, rx);
		if (gid_is_ipv4(fi.sgid)) {
			ih.ip_id = 0;
			uint32_t c0 = icrc_bth(icrc_begin(&ih), fi.udp_payload, total - ICRC_LEN);
			uint16_t id = 0xdead;
			int r = icrc_solve_ipv4_id(c0, rx, 8 + 20 + 8 + total - ICRC_LEN, &id);
			CHECK(r == 0 && id == fi.ip_id, "%s#%d IP ID 0x%04x recovered (got %d, 0x%04x)", name, idx, fi.ip_id, r, id);
		}
		return;
	}
	size_t m = rebuild(&fi, out);
	CHECK(m == total && memcmp(out, fi.udp_payload, total) == 0, "%s#%d rebuilt packet is byte-identical", name, idx);
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void vectors(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int files = 0;

	if (!d) {
		printf("skip: no vectors at %s\n", dir);
		exit(77);
	}
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 5 || strcmp(e->d_name + l - 4, ".hex"))
			continue;
		char path[2048], line[20000];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "r");
		int idx = 0;
		files++;
		while (f && fgets(line, sizeof(line), f)) {
			if (line[0] == '#' || line[0] == '\n')
				continue;
			uint8_t frame[9000];
			size_t n = 0;
			for (char *p = line; hexval(p[0]) >= 0 && hexval(p[1]) >= 0 && n < sizeof(frame); p += 2)
				frame[n++] = (uint8_t)(hexval(p[0]) << 4 | hexval(p[1]));
			check_frame(e->d_name, ++idx, frame, n, true);
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	CHECK(files >= 15, "found the 15 vector files (%d)", files);
}

static void captures(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int frames = 0;

	if (!d)
		return;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l < 6 || strcmp(e->d_name + l - 5, ".pcap"))
			continue;
		char path[2048], err[PCAP_ERRBUF_SIZE];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		pcap_t *p = pcap_open_offline(path, err);
		if (!p)
			continue;
		struct pcap_pkthdr *h;
		const u_char *data;
		int idx = 0;
		while (pcap_next_ex(p, &h, &data) == 1) {
			struct frame_info fi;
			idx++;
			if (parse_frame(data, h->caplen, &fi) || fi.dport != ROCE_UDP_PORT)
				continue; /* TCP exchange, ARP ... */
			if (!opinfo(bth_opcode(fi.udp_payload))->name)
				continue;
			check_frame(e->d_name, idx, data, h->caplen, false);
			frames++;
		}
		pcap_close(p);
	}
	closedir(d);
	CHECK(frames > 100, "checked rxe capture frames (%d)", frames);
}

static void psn_and_tables(void)
{
	CHECK(psn_cmp(1, 0) > 0 && psn_cmp(0, 1) < 0 && psn_cmp(5, 5) == 0, "psn_cmp basics");
	CHECK(psn_cmp(0, 0xFFFFFF) > 0 && psn_cmp(0xFFFFFF, 0) < 0, "psn_cmp wraps");
	CHECK(psn_cmp(0x7FFFFF, 0) > 0 && psn_cmp(0x800001, 0) < 0, "psn_cmp half space");
	CHECK(psn_add(0xFFFFFF, 1) == 0 && psn_add(0xFFFFFE, 3) == 1, "psn_add wraps");
	CHECK(pad_for(0) == 0 && pad_for(1) == 3 && pad_for(13) == 3 && pad_for(454) == 2, "pad_for");
	/* opcode table layout, §2.3 */
	CHECK(opinfo(OP_RC_WRITE_ONLY_IMM)->hdr_len == 12 + 16 + 4, "WRITE_ONLY_IMM = BTH+RETH+ImmDt");
	CHECK(opinfo(OP_RC_ATOMIC_ACK)->hdr_len == 12 + 4 + 8, "ATOMIC_ACK = BTH+AETH+AtomicAckETH");
	CHECK(opinfo(OP_UD_SEND_ONLY_IMM)->off_imm == 12 + 8, "UD SEND_ONLY_IMM ImmDt after DETH");
	CHECK(opinfo(OP_CNP)->hdr_len == 12 + 16, "CNP = BTH + 16 reserved");
	CHECK(opinfo(0x15)->name == NULL && opinfo(0x80)->name == NULL, "reserved opcodes absent");
}

int main(int argc, char **argv)
{
	const char *shared = argc > 1 ? argv[1] : "../shared";
	char p[1024];

	psn_and_tables();
	snprintf(p, sizeof(p), "%s/vectors", shared);
	vectors(p);
	snprintf(p, sizeof(p), "%s/rxe-captures", shared);
	captures(p);
	printf("%d passed, %d failed\n", checks - failures, failures);
	return failures ? 1 : 0;
}
