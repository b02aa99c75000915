/* File descriptors: uroce's own are few (a receive socket per address, a
 * pool of UDP_TX_POOL transmit sockets per address, a region per same-host
 * peer, an eventfd per completion channel, the engine's epoll and kick),
 * however many QPs there are (issue #13). */
#ifndef UROCE_UTIL_FDS_H
#define UROCE_UTIL_FDS_H

#include <errno.h>
#include <stdbool.h>

/* The soft RLIMIT_NOFILE up to the hard one, when an fd uroce needs was
 * refused with EMFILE: the application has used up its table, and raising
 * the limit, as Go's runtime and others do at start, lets it go on.  Not at
 * start: a raised soft limit is inherited by every program the application
 * then runs (system(), popen, posix_spawn: no hook of ours runs in them),
 * where a select() past FD_SETSIZE or a loop closing every fd up to the
 * limit breaks or crawls; a process that never ran out keeps its limit.
 * Returns whether the limit is higher now, so that the caller tries once
 * more. */
bool fds_raise_nofile(void);

/* The usual call: `fd = socket(...); if (fds_retry(fd)) fd = socket(...);` */
static inline bool fds_retry(int fd)
{
	return fd < 0 && errno == EMFILE && fds_raise_nofile();
}

#endif
