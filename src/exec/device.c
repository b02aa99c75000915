/* The per-process device's life: opened by the first ibv_open_device
 * (configuration, stats page, packet I/O, engine), closed with the last. */
#include "exec.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../net/net.h"
#include "../net/shm.h"
#include "../transport/transport.h"

static pthread_mutex_t dev_global_lock = PTHREAD_MUTEX_INITIALIZER;

/* A program that exits without closing its device (perftest's atomic_lat
 * server does) still prints its UROCE_STATS counters. */
static struct uroce_dev *the_dev;
/* the device open now, the_dev's or a white-box test's (dev_global_lock) */
static struct uroce_dev *open_dev;
/* counts opens and closes: what uroce_dev_config answers changes with it */
static atomic_uint dev_generation;

__attribute__((destructor)) static void stats_at_process_exit(void)
{
	if (the_dev)
		stats_page_print(the_dev->stats, &the_dev->cfg);
}

static void dev_free(struct uroce_dev *dev)
{
	/* ACKs still deferred go out: the peers' sends were placed here */
	pthread_mutex_lock(&dev->rx_lock);
	ack_flush_deferred(dev, UINT64_MAX);
	pthread_mutex_unlock(&dev->rx_lock);
	engine_stop(dev);
	stats_page_print(dev->stats, &dev->cfg);
	net_destroy(dev->net);
	free(dev->rx_pkts);
	free(dev->acks_owed);
	shm_unguard_mapping(dev->stats_guard);
	stats_page_close(dev->stats, dev->stats_path);
	pthread_mutex_destroy(&dev->lock);
	pthread_mutex_destroy(&dev->rx_lock);
	pthread_mutex_destroy(&dev->cork_lock);
	free(dev);
}

static struct uroce_dev *dev_open_locked(const struct uroce_net_ops *backend, bool engine)
{
	struct uroce_dev *dev;
	int rc;

	if (open_dev) {
		errno = EBUSY;
		return NULL;
	}
	/* aligned as its type asks (the pollers' stamps have a cache line of
	 * their own: struct uroce_engine); calloc gives 16 bytes */
	size_t bytes = (sizeof(*dev) + _Alignof(struct uroce_dev) - 1) & ~(_Alignof(struct uroce_dev) - 1);
	dev = aligned_alloc(_Alignof(struct uroce_dev), bytes);
	if (dev)
		memset(dev, 0, bytes);
	if (!dev) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&dev->lock, NULL);
	pthread_mutex_init(&dev->cork_lock, NULL);
	/* priority inheritance: a real-time engine that waits for rx_lock lends
	 * its priority to the application thread holding it (no inversion) */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setprotocol(&ma, PTHREAD_PRIO_INHERIT);
	pthread_mutex_init(&dev->rx_lock, &ma);
	pthread_mutexattr_destroy(&ma);
	dev->refcnt = 1;
	dev->qpn_next = (uint32_t)getpid() * 2654435761u;
	dev->eng.epfd = dev->eng.epfd_timers = dev->eng.kick_fd = dev->eng.loadavg_fd = -1;
	atomic_store(&dev->timer_next, UINT64_MAX);
	atomic_store(&dev->ack_flush_next, UINT64_MAX);
	atomic_store(&dev->eng.wake_ns, UINT64_MAX);
	dev->rx_pkts = calloc(UROCE_RX_BATCH, sizeof(*dev->rx_pkts));
	dev->acks_owed = calloc(UROCE_RX_BATCH, sizeof(*dev->acks_owed));
	rc = dev->rx_pkts && dev->acks_owed ? uroce_config_load(&dev->cfg) : -ENOMEM;
	if (rc == 0 && !(dev->stats = stats_page_open(dev->stats_path, dev->cfg.stats_mode)))
		rc = -ENOMEM;
	/* the page is a file our user's processes may truncate: guarded as
	 * the ring regions are, so counting goes on into zero pages */
	dev->stats_guard = rc == 0 ? shm_guard_mapping(dev->stats, sizeof(*dev->stats)) : -1;
	if (rc == 0) {
		dev->net = backend ? net_create_backend(&dev->cfg, dev->stats, backend)
				   : net_create(&dev->cfg, dev->stats);
		if (!dev->net)
			rc = -errno;
	}
	if (rc == 0 && engine)
		rc = engine_start(dev);
	if (rc < 0) {
		dev_free(dev);
		errno = -rc;
		return NULL;
	}
	stats_page_finish(dev->stats, &dev->cfg);
	open_dev = dev;
	atomic_fetch_add(&dev_generation, 1);
	return dev;
}

struct uroce_dev *uroce_dev_open(const struct uroce_net_ops *backend, bool engine)
{
	pthread_mutex_lock(&dev_global_lock);
	struct uroce_dev *dev = dev_open_locked(backend, engine);
	pthread_mutex_unlock(&dev_global_lock);
	return dev;
}

void uroce_dev_close(struct uroce_dev *dev)
{
	pthread_mutex_lock(&dev_global_lock);
	open_dev = NULL;
	atomic_fetch_add(&dev_generation, 1);
	dev_free(dev);
	pthread_mutex_unlock(&dev_global_lock);
}

struct uroce_dev *uroce_dev_get(void)
{
	struct uroce_dev *dev;

	pthread_mutex_lock(&dev_global_lock);
	if (the_dev) {
		the_dev->refcnt++;
		dev = the_dev;
	} else {
		dev = the_dev = dev_open_locked(NULL, true);
	}
	pthread_mutex_unlock(&dev_global_lock);
	return dev;
}

void uroce_dev_put(struct uroce_dev *dev)
{
	pthread_mutex_lock(&dev_global_lock);
	if (--dev->refcnt == 0) {
		the_dev = open_dev = NULL;
		atomic_fetch_add(&dev_generation, 1);
		dev_free(dev);
	}
	pthread_mutex_unlock(&dev_global_lock);
}

bool uroce_dev_config(struct uroce_config *out)
{
	pthread_mutex_lock(&dev_global_lock);
	struct uroce_dev *dev = open_dev ? open_dev : the_dev;
	if (dev)
		*out = dev->cfg;
	pthread_mutex_unlock(&dev_global_lock);
	return dev != NULL;
}

unsigned uroce_dev_generation(void)
{
	return atomic_load(&dev_generation);
}
