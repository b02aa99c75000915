/* uroce_config_load (util/config.c) against the rows of util/config_table.h:
 * defaults as shown to people, clamps, and each kind's parsing quirks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "util/config.h"
#include "util/config_table.h"

static int failures, checks;
#define CHECK(cond, name) do { checks++; if (!(cond)) { failures++; printf("not ok: %s\n", name); } } while (0)

static struct uroce_config cfg;

static void unset_all(void)
{
#define X(name, field, kind, a, b, def, shown, help) unsetenv(#name);
	UROCE_CONFIG_TABLE(X)
#undef X
}

/* Load with NAME=VALUE alone set (VALUE NULL: nothing set). */
static int load1(const char *name, const char *value)
{
	unset_all();
	if (name && value)
		setenv(name, value, 1);
	return uroce_config_load(&cfg);
}

/* A default shown as a number must be the loaded one (in any base, as
 * `uint` loads it: UROCE_STATS_MODE's "0600" is octal); "on..."/"off" and
 * the `word`s must be the loaded flag. */
static void shown_number(const char *name, const char *shown, long long v)
{
	char *end;
	long long n = strtoll(shown, &end, 0);
	if (end != shown)
		CHECK(n == v, name);
}

static void shown_flag(const char *name, const char *shown, bool v)
{
	bool on = !strncmp(shown, "on", 2) || !strcmp(shown, "1");
	bool off = !strcmp(shown, "off") || !strcmp(shown, "0");
	CHECK(on || off, name);
	CHECK(v == on, name);
}

static void shown_word(const char *name, const char *shown, bool v, const char *a, const char *b)
{
	char w[64];
	snprintf(w, sizeof(w), "`%s`", v ? a : b);
	CHECK(!strcmp(shown, w), name);
}

#define SHOWN_addr(n, fld, a, b, s)     CHECK(!cfg.ngids && !cfg.addr_from_env, n);
#define SHOWN_mtu(n, fld, a, b, s)      CHECK(cfg.mtu_from[0] && cfg.active_mtu >= IBV_MTU_256, n);
#define SHOWN_path(n, fld, a, b, s)     CHECK(!cfg.fld[0] && !strcmp(s, "off"), n);
#define SHOWN_uint(n, fld, a, b, s)     shown_number(n, s, cfg.fld);
#define SHOWN_level(n, fld, a, b, s)    shown_number(n, s, cfg.fld);
#define SHOWN_bool(n, fld, a, b, s)     shown_flag(n, s, cfg.fld);
#define SHOWN_set                       SHOWN_bool
#define SHOWN_word(n, fld, a, b, s)     shown_word(n, s, cfg.fld, a, b);
#define SHOWN_fault(n, fld, a, b, s)    CHECK(!cfg.fld && cfg.a == 0 && !strcmp(s, "off"), n);
#define SHOWN_launcher(n, fld, a, b, s)

int main(void)
{
	char want[64];

	CHECK(load1(NULL, NULL) == 0, "load with nothing set");
#define X(name, field, kind, a, b, def, shown, help) SHOWN_##kind(#name " default", field, a, b, shown)
	UROCE_CONFIG_TABLE(X)
#undef X
	CHECK(cfg.window == 0 && cfg.spin_us == 50 && cfg.rto_min_us == 10000 && cfg.ack_defer_us == 20 &&
	      cfg.poll_grace_us == 3000 && cfg.poll_spin_us == 200 && cfg.fault_seed == 1 && cfg.log_level == 0, "numeric defaults");
	CHECK(cfg.shm && cfg.engine_rt && cfg.engine_place && cfg.poll_progress && !cfg.no_gso && !cfg.stats_at_exit &&
	      !cfg.handoff_defer, "flag defaults");

	load1("UROCE_WINDOW", "0");       CHECK(cfg.window == 0, "window 0: by bytes");
	load1("UROCE_WINDOW", "99999");   CHECK(cfg.window == 4096, "window clamped to 4096");
	load1("UROCE_WINDOW", "0x10");    CHECK(cfg.window == 16, "window in hex");
	load1("UROCE_WINDOW", "");        CHECK(cfg.window == 0, "empty window is the default");

	load1("UROCE_SPIN_US", "0");      CHECK(cfg.spin_us == 0, "spin 0");
	load1("UROCE_RTO_MIN_US", "0");   CHECK(cfg.rto_min_us == 0, "rto floor off");

	load1("UROCE_HANDOFF", "defer");  CHECK(cfg.handoff_defer && cfg.poll_grace_us == 5, "defer, grace 5 us");
	load1("UROCE_HANDOFF", "grace");  CHECK(!cfg.handoff_defer && cfg.poll_grace_us == 3000, "grace, 3000 us");
	load1("UROCE_HANDOFF", "Defer");  CHECK(!cfg.handoff_defer, "only \"defer\" defers");
	setenv("UROCE_HANDOFF", "defer", 1);
	setenv("UROCE_POLL_GRACE_US", "7", 1);
	uroce_config_load(&cfg);          CHECK(cfg.handoff_defer && cfg.poll_grace_us == 7, "grace given with defer");

	load1("UROCE_SHM", "0");          CHECK(!cfg.shm, "SHM=0 off");
	load1("UROCE_SHM", "0ff");        CHECK(!cfg.shm, "SHM starting with 0 off");
	load1("UROCE_SHM", "off");        CHECK(cfg.shm, "SHM=off is not 0: on");
	load1("UROCE_SHM", "");           CHECK(cfg.shm, "SHM empty on");
	load1("UROCE_ENGINE_RT", "0");    CHECK(!cfg.engine_rt, "ENGINE_RT=0 off");
	load1("UROCE_ENGINE_PLACE", "0"); CHECK(!cfg.engine_place, "ENGINE_PLACE=0 off");
	load1("UROCE_POLL_PROGRESS", "0"); CHECK(!cfg.poll_progress, "POLL_PROGRESS=0 off");
	load1("UROCE_NO_GSO", "");        CHECK(cfg.no_gso, "NO_GSO set empty");
	load1("UROCE_NO_GSO", "0");       CHECK(cfg.no_gso, "NO_GSO=0 is set all the same");
	load1("UROCE_STATS_MODE", "0644"); CHECK(cfg.stats_mode == 0644, "STATS_MODE=0644 (octal)");
	load1("UROCE_STATS_MODE", "0666"); CHECK(cfg.stats_mode == 0644, "STATS_MODE clamped: no write bits for others");
	load1("UROCE_STATS", "1");        CHECK(cfg.stats_at_exit, "STATS=1");
	load1("UROCE_STATS", "0");        CHECK(!cfg.stats_at_exit, "STATS=0");
	load1("UROCE_STATS", "");         CHECK(!cfg.stats_at_exit, "STATS empty");

	CHECK(load1("UROCE_MTU", "2048") == 0 && cfg.active_mtu == IBV_MTU_2048 &&
	      !strcmp(cfg.mtu_from, "UROCE_MTU"), "MTU 2048");
	CHECK(load1("UROCE_MTU", "256") == 0 && cfg.active_mtu == IBV_MTU_256, "MTU 256");
	CHECK(load1("UROCE_MTU", "1000") == -EINVAL, "MTU 1000 is EINVAL");
	CHECK(load1("UROCE_MTU", "") == 0 && strcmp(cfg.mtu_from, "UROCE_MTU"), "empty MTU: the interface's");

	CHECK(load1("UROCE_ADDR", "10.1.2.3, ::1") == 0 && cfg.ngids == 2 && cfg.addr_from_env &&
	      cfg.gids[0][10] == 0xff && cfg.gids[0][15] == 3 && cfg.gids[1][15] == 1, "two addresses");
	CHECK(load1("UROCE_ADDR", "10.1.2.3,nonsense") == -EINVAL, "bad address is EINVAL");
	CHECK(load1("UROCE_ADDR", "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5") == -EINVAL, "five addresses");
	CHECK(load1("UROCE_ADDR", "127.0.0.1") == 0 && !strncmp(cfg.mtu_from, "interface lo", 12), "loopback MTU");

	load1("UROCE_PCAP", "/tmp/x.%p.pcap");
	snprintf(want, sizeof(want), "/tmp/x.%d.pcap", (int)getpid());
	CHECK(!strcmp(cfg.pcap_path, want), "PCAP %p is the PID");
	load1("UROCE_PCAP", "/tmp/y.pcap"); CHECK(!strcmp(cfg.pcap_path, "/tmp/y.pcap"), "PCAP path");

	load1("UROCE_FAULT_DROP_TX", "7");  CHECK(cfg.fault_drop_tx == 7 && cfg.fault_pct_tx == 0, "drop every 7th");
	load1("UROCE_FAULT_DROP_RX", "2.5%"); CHECK(cfg.fault_pct_rx == 2.5 && !cfg.fault_drop_rx, "drop 2.5%");
	load1("UROCE_FAULT_DROP_RX", "150%"); CHECK(cfg.fault_pct_rx == 100, "drop clamped to 100%");
	load1("UROCE_FAULT_SEED", "9");     CHECK(cfg.fault_seed == 9, "seed");
	load1("UROCE_LOG", "2");            CHECK(cfg.log_level == 2, "log 2");

	/* the printer names every row the library reads */
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	load1(NULL, NULL);
	uroce_config_print(&cfg, f);
	fclose(f);
#define X(name, field, kind, a, b, def, shown, help) \
	CHECK(!strcmp(#kind, "launcher") == !strstr(text, "  " #name " "), #name " printed");
	UROCE_CONFIG_TABLE(X)
#undef X
	free(text);

	printf("%d passed, %d failed\n", checks - failures, failures);
	return failures != 0;
}
