/* The engine thread: receives the packets no polling application takes,
 * runs the transport for them, fires QP timers and sends deferred ACKs
 * (docs/architecture.md, "Execution model").  It sleeps in epoll (an idle
 * process uses no CPU; after traffic it first spins for UROCE_SPIN_US while
 * a CPU is to spare); other threads kick it only when they need it earlier
 * than it will wake. */
#include "device.h"
#include "../verbs/ops.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "../net/net.h"
#include "../transport/transport.h"


static void run_timers(struct uroce_dev *dev, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	atomic_store(&dev->timer_next, UINT64_MAX);
	dev_count(dev, UC_timer_scans, 1);
	pthread_mutex_lock(&dev->lock);
	for (struct uroce_qp *qp = dev->qp_list; qp; qp = qp->next_in_dev) {
		pthread_mutex_lock(&qp->lock);
		if (qp->timer_deadline && qp->timer_deadline <= now)
			completer_timer(qp, now);
		if (qp->timer_deadline && qp->timer_deadline < next)
			next = qp->timer_deadline;
		pthread_mutex_unlock(&qp->lock);
	}
	pthread_mutex_unlock(&dev->lock);
	/* lower the shared deadline (a poster may have lowered it meanwhile) */
	uint64_t cur = atomic_load(&dev->timer_next);
	while (next < cur && !atomic_compare_exchange_weak(&dev->timer_next, &cur, next))
		;
}

/* Run up to `budget` received packets.  Caller holds rx_lock. */
static int receive_locked(struct uroce_dev *dev, int budget)
{
	struct uroce_rxpkt *pkts = dev->rx_pkts; /* owned under rx_lock */
	int done = 0, empty = 0;

	while (done < budget) {
		int n = net_recv(dev->net, pkts, UROCE_RX_BATCH);
		if (n > 0) {
			transport_rx_batch(dev, pkts, n);
			net_recv_done(dev->net, pkts, n);
			done += n;
		}
		/* a batch that fault injection or doorbells emptied may leave
		 * more -- but a stream of them must not hold the loop */
		if (n < 0 || !dev->net->rx_more || (n == 0 && ++empty > 4))
			break;
	}
	return done;
}

/* Process up to `budget` received packets and due timers.  Returns the number
 * of packets handled.  Caller holds rx_lock. */
static int progress_locked(struct uroce_dev *dev, int budget)
{
	int done = receive_locked(dev, budget);
	uint64_t now = now_ns();

	if (atomic_load(&dev->ack_flush_next) <= now)
		transport_flush_deferred_acks(dev, now);
	if (atomic_load(&dev->timer_next) <= now) {
		/* A timer says nothing came for a while: read what has come
		 * first.  The engine in its poll grace receives nothing else
		 * (budget 0), and an ACK that waited in a socket or ring while
		 * the application computed -- or that the deferred-ACK flush
		 * just above sent to a QP of this very device -- is no
		 * timeout.  (One receive call; timers are rare.) */
		done += receive_locked(dev, UROCE_RX_BATCH);
		run_timers(dev, now_ns());
	}
	return done;
}

int dev_progress(struct uroce_dev *dev, int budget)
{
	pthread_mutex_lock(&dev->rx_lock);
	int done = progress_locked(dev, budget);
	pthread_mutex_unlock(&dev->rx_lock);
	return done;
}

/* Hand-off (docs/architecture.md): an application spinning on ibv_poll_cq
 * runs the receive path itself, and the engine stays off the sockets while
 * it does, so the two never fight over the cores. */
void dev_poll_progress(struct uroce_dev *dev)
{
	if (!dev->cfg.poll_progress)
		return;
	atomic_store_explicit(&dev->app_poll_ns, now_ns(), memory_order_relaxed);
	if (pthread_mutex_trylock(&dev->rx_lock))
		return;
	progress_locked(dev, UROCE_RX_BATCH);
	pthread_mutex_unlock(&dev->rx_lock);
}

/* The application got its completion and may now spin on memory, while an
 * RDMA WRITE it waits for is only partly here (its first window rode in
 * with the ACK; the rest follows as the ACKs reach the requester).  With
 * the engine off the sockets for the poll grace, the rest would wait that
 * long: hand the sockets back to the engine now.  At most once per 100 us,
 * so that applications that keep polling during bidirectional WRITE
 * streams do not kick it per completion. */
void dev_poll_found(struct uroce_dev *dev)
{
	if (atomic_load_explicit(&dev->rx_writes_open, memory_order_relaxed) <= 0 || dev->cfg.handoff_defer)
		return;
	uint64_t now = now_ns(), last = atomic_load_explicit(&dev->handback_ns, memory_order_relaxed);
	if (now - last < 100000 || !atomic_compare_exchange_strong(&dev->handback_ns, &last, now))
		return;
	atomic_store_explicit(&dev->app_poll_ns, 0, memory_order_relaxed);
	dev_engine_wake_by(dev, now);
}

void engine_kick(struct uroce_dev *dev)
{
	uint64_t one = 1;
	if (write(dev->kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		LOG_ERR("uroce: engine kick: %s", strerror(errno));
}

static __thread bool on_engine_thread;

bool dev_on_engine_thread(void)
{
	return on_engine_thread;
}

void dev_engine_wake_by(struct uroce_dev *dev, uint64_t deadline)
{
	/* engine_sleep() announces sleeping, then reads the deadlines, then
	 * publishes when it will wake */
	if (!on_engine_thread && atomic_load(&dev->sleeping) && atomic_load(&dev->engine_wake_ns) > deadline) {
		dev_count(dev, UC_engine_kicks, 1);
		engine_kick(dev);
	}
}

void dev_lower_deadline(struct uroce_dev *dev, _Atomic uint64_t *next, uint64_t deadline, bool kick)
{
	uint64_t cur = atomic_load(next);

	while (deadline < cur) {
		if (atomic_compare_exchange_weak(next, &cur, deadline)) {
			if (kick)
				dev_engine_wake_by(dev, deadline);
			break;
		}
	}
}

void qp_arm_timer(struct uroce_qp *qp, uint64_t deadline)
{
	qp->timer_deadline = deadline;
	if (deadline)
		dev_lower_deadline(qp->dev, &qp->dev->timer_next, deadline, true);
}

/* May the engine spin without taking a CPU from anyone?  Only while no more
 * threads are runnable than there are CPUs (the "running" field of
 * /proc/loadavg counts this one too).  Spinning when they are oversubscribed
 * stalls someone: a real-time spinner pushes a polling application off its
 * CPU, and an idle-class one starves (seen: ib_write_lat 1 MiB, both
 * applications spinning, ACK timeouts until RETRY_EXC).  0.4 us a look. */
static bool cpu_to_spare(struct uroce_dev *dev)
{
	char buf[128];

	if (dev->loadavg_fd < 0)
		return false;
	ssize_t n = pread(dev->loadavg_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = 0;
	double l1, l5, l15;
	int running;
	if (sscanf(buf, "%lf %lf %lf %d/", &l1, &l5, &l15, &running) != 4)
		return false;
	return running <= dev->ncpus;
}

/* A real-time engine spins as an ordinary thread.  Spinning as SCHED_FIFO,
 * it keeps any ordinary thread the scheduler puts on its CPU from running
 * until the spin ends: ib_read_lat's client thread, moved there, found its
 * READ response 50-140 us late in ~1% of iterations (rdtsc on both ends).
 * It sleeps real-time again, to wake within microseconds.  A switch is a
 * system call, made when a spin begins and before a sleep only. */
static void engine_spin_fair(struct uroce_dev *dev, bool fair)
{
	if (!dev->engine_rt || dev->engine_fair == fair)
		return;
	struct sched_param sp = { .sched_priority = fair ? 0 : 1 };
	if (pthread_setschedparam(pthread_self(), fair ? SCHED_OTHER : SCHED_FIFO, &sp) == 0)
		dev->engine_fair = fair;
}

/* Sleep in epoll on `epfd` until an event, the earliest deadline (unless
 * a poller has taken them over), or `cap` ns from now (0: no cap).  Returns
 * epoll's count; drains the kick. */
static int engine_sleep(struct uroce_dev *dev, int epfd, uint64_t cap, bool deadlines)
{
	struct epoll_event evs[8];
	struct timespec ts, *tsp = NULL;

	engine_spin_fair(dev, false);
	atomic_store(&dev->sleeping, true);
	uint64_t now = now_ns();
	uint64_t wake = UINT64_MAX;
	if (deadlines) {
		uint64_t t = atomic_load(&dev->timer_next), a = atomic_load(&dev->ack_flush_next);
		wake = t < a ? t : a;
	}
	if (cap && now + cap < wake)
		wake = now + cap;
	atomic_store(&dev->engine_wake_ns, wake);
	if (wake != UINT64_MAX) {
		uint64_t d = wake > now ? wake - now : 0;
		ts.tv_sec = (time_t)(d / 1000000000ull);
		ts.tv_nsec = (long)(d % 1000000000ull);
		tsp = &ts;
	}
	int n = epoll_pwait2(epfd, evs, 8, tsp, NULL);
	atomic_store(&dev->sleeping, false);
	atomic_store(&dev->engine_wake_ns, UINT64_MAX);
	for (int i = 0; i < n; i++)
		if (evs[i].data.u32 == 0) {
			uint64_t v;
			if (read(dev->kick_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				LOG_DBG("uroce: kick read failed");
		}
	return n;
}

/* Sleep in epoll on the sockets (and the kick) until a packet, a kick or the
 * earliest deadline.  Sleeping is announced first -- to kickers
 * (dev->sleeping) and to same-host senders, who then ring a doorbell on the
 * socket -- and what came meanwhile is run instead: returns -1 then, else
 * epoll's count. */
static int sleep_on_sockets(struct uroce_dev *dev, bool count_sleep)
{
	atomic_store(&dev->sleeping, true);
	net_rx_sleeping(dev->net, true);
	if (dev_progress(dev, 256) > 0) {
		net_rx_sleeping(dev->net, false);
		atomic_store(&dev->sleeping, false);
		return -1;
	}
	if (count_sleep)
		dev_count(dev, UC_engine_sleeps, 1);
	int n = engine_sleep(dev, dev->epfd, 0, true);
	net_rx_sleeping(dev->net, false);
	if (n > 0)
		atomic_store_explicit(&dev->net->rx_sockets_due, true, memory_order_relaxed);
	return n;
}

static void *engine_main(void *arg)
{
	struct uroce_dev *dev = arg;
	uint64_t last_traffic = 0, spare_seen = 0;
	unsigned spin_rounds = 0;
	bool spare = false;

	on_engine_thread = true;
	while (!atomic_load(&dev->stop)) {
		uint64_t now = now_ns();
		uint64_t app = atomic_load_explicit(&dev->app_poll_ns, memory_order_relaxed);
		uint64_t grace = (uint64_t)dev->cfg.poll_grace_us * 1000;
		bool defer = dev->cfg.handoff_defer && dev->engine_rt;
		if (!defer && now - app < grace) {
			/* grace: an application is polling and receives; the engine
			 * only runs what is due, if no poller is at it, and wakes to
			 * notice when polling stops */
			bool due = atomic_load(&dev->timer_next) <= now || atomic_load(&dev->ack_flush_next) <= now;
			if (due && !pthread_mutex_trylock(&dev->rx_lock)) {
				progress_locked(dev, 0);
				pthread_mutex_unlock(&dev->rx_lock);
				due = false;
			}
			/* what a poller holding rx_lock left due, its next poll runs
			 * (progress_locked ends with the due work), or this engine
			 * one grace later */
			engine_sleep(dev, dev->epfd_timers, grace, !due);
			continue;
		}
		if (dev_progress(dev, 256) > 0) {
			last_traffic = now_ns();
			continue;
		}
		if (defer) {
			/* defer mode: sleep on the sockets; when packets come while
			 * an application is polling this very moment, give it the
			 * first chance and take only what it leaves behind */
			int n = sleep_on_sockets(dev, false);
			if (n < 0)
				continue;
			now = now_ns();
			app = atomic_load_explicit(&dev->app_poll_ns, memory_order_relaxed);
			if (n > 0 && (int64_t)(now - app) < (int64_t)grace)
				engine_sleep(dev, dev->epfd_timers, grace, true);
			continue;
		}
		/* traffic flows and no application polls: spin a while, if no
		 * one else wants the CPU, so that the next packet needs no wake-up */
		if (now - last_traffic < (uint64_t)dev->cfg.spin_us * 1000) {
			/* a look costs as much as a round of the spin: look again
			 * after 10 us (a thread that became runnable meanwhile
			 * waits at most that long) */
			if (now - spare_seen > 10000) {
				spare = cpu_to_spare(dev);
				spare_seen = now;
				if (!spare)
					dev_count(dev, UC_engine_spin_no_cpu, 1);
			}
			if (spare) {
				/* an ordinary thread now, it lets one that the
				 * scheduler put on its CPU run now and then: the
				 * ib_read_lat client, else stalled up to the spin
				 * (p99 ~60 us); a yield per round cost 0.15 us of
				 * median, one per 16 rounds nothing measurable */
				engine_spin_fair(dev, true);
				if (++spin_rounds % 16 == 0)
					sched_yield();
				continue;
			}
		}
		int n = sleep_on_sockets(dev, last_traffic != 0);
		if (n != 0)
			last_traffic = now_ns();
	}
	return NULL;
}

int engine_start(struct uroce_dev *dev)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 0 };
	int rc;

	atomic_store(&dev->timer_next, UINT64_MAX);
	atomic_store(&dev->ack_flush_next, UINT64_MAX);
	cpu_set_t cpus;
	dev->ncpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
	dev->loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	atomic_store(&dev->engine_wake_ns, UINT64_MAX);
	dev->rx_pkts = calloc(UROCE_RX_BATCH, sizeof(*dev->rx_pkts));
	dev->acks_owed = calloc(UROCE_RX_BATCH, sizeof(*dev->acks_owed));
	if (!dev->rx_pkts || !dev->acks_owed)
		return -ENOMEM;
	dev->epfd = epoll_create1(EPOLL_CLOEXEC);
	dev->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (dev->epfd < 0 || dev->kick_fd < 0)
		return -errno;
	if (epoll_ctl(dev->epfd, EPOLL_CTL_ADD, dev->kick_fd, &ev) < 0)
		return -errno;
	dev->epfd_timers = epoll_create1(EPOLL_CLOEXEC);
	if (dev->epfd_timers < 0 || epoll_ctl(dev->epfd_timers, EPOLL_CTL_ADD, dev->kick_fd, &ev) < 0)
		return -errno;
	rc = dev->net->ops->add_fds(dev->net, dev->epfd);
	if (rc < 0)
		return rc;
	/* One-sided operations are executed by the engine while the target
	 * application spins on memory.  On two cores with spinning applications
	 * a sleeping CFS thread wakes late -- under load, by tens of ms -- so the
	 * engine asks for the lowest real-time priority when it may (root,
	 * CAP_SYS_NICE or RLIMIT_RTPRIO): it then wakes within microseconds.  It
	 * spins only while a CPU is to spare (cpu_to_spare), and rx_lock inherits
	 * priority, so an application thread holding it is never left behind.
	 * UROCE_ENGINE_RT=0 keeps it an ordinary thread.  The policy is set
	 * before the thread starts, so engine_rt never changes under it. */
	const char *rt = getenv("UROCE_ENGINE_RT");
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	if (!rt || *rt != '0') {
		struct sched_param sp = { .sched_priority = 1 };
		pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
		pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
		pthread_attr_setschedparam(&attr, &sp);
		dev->engine_rt = true;
	}
	rc = pthread_create(&dev->engine, &attr, engine_main, dev);
	pthread_attr_destroy(&attr);
	if (rc == EPERM && dev->engine_rt) {
		dev->engine_rt = false;  /* not permitted: an ordinary thread */
		rc = pthread_create(&dev->engine, NULL, engine_main, dev);
	}
	if (rc)
		return -rc;
	pthread_setname_np(dev->engine, "uroce-engine");
	dev->engine_running = true;
	return 0;
}

void engine_stop(struct uroce_dev *dev)
{
	/* ACKs still deferred go out: the peers' sends were placed here */
	pthread_mutex_lock(&dev->rx_lock);
	transport_flush_deferred_acks(dev, UINT64_MAX);
	pthread_mutex_unlock(&dev->rx_lock);
	atomic_store(&dev->stop, true);
	engine_kick(dev);
	pthread_join(dev->engine, NULL);
	dev->engine_running = false;
	close(dev->epfd);
	close(dev->epfd_timers);
	close(dev->kick_fd);
	if (dev->loadavg_fd >= 0)
		close(dev->loadavg_fd);
	free(dev->rx_pkts);
	dev->rx_pkts = NULL;
	free(dev->acks_owed);
	dev->acks_owed = NULL;
}
