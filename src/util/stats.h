/* The stats page: the counters (counters.h) and what `uroce stat` shows of
 * a process, published at /dev/shm/uroce.<pid> for the owner's (and root's)
 * `uroce stat` to read (UROCE_STATS_MODE widens that). */
#ifndef UROCE_UTIL_STATS_H
#define UROCE_UTIL_STATS_H

#include <stdint.h>
#include "config.h"
#include "counters.h"

#define UROCE_STATS_MAGIC 0x65636f7275ULL /* "uroce" */
#define UROCE_STATS_VERSION 1

struct uroce_stats_page {
	uint64_t magic;               /* written last (stats_page_finish): the page is complete */
	uint32_t version;
	uint32_t pid;
	uint32_t ngids;
	uint32_t active_mtu;
	uint8_t gids[UROCE_MAX_GIDS][16];
	char cmdline[128];
	uint64_t counters[UC__COUNT];
};

/* A zeroed page for this process with permissions mode & 0644, published
 * at path: /dev/shm/uroce.<pid>, or uroce.<pid>.<hex> when that name is
 * taken by something not ours (stats.c, page_publish); path[0] = 0 when
 * /dev/shm cannot hold it.  NULL when out of memory.  Removes this user's
 * pages of processes that died without closing theirs. */
struct uroce_stats_page *stats_page_open(char path[64], unsigned mode);
/* The addresses are known: the page is complete and `uroce stat` shows it. */
void stats_page_finish(struct uroce_stats_page *page, const struct uroce_config *cfg);
void stats_page_close(struct uroce_stats_page *page, const char *path);
/* UROCE_STATS: the counters that moved, to stderr. */
void stats_page_print(const struct uroce_stats_page *page, const struct uroce_config *cfg);

#endif
