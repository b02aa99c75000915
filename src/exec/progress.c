/* Progress: receiving, the transport for what came, due timers and
 * deferred ACKs -- run by the engine thread or by an application polling
 * an empty CQ, whoever holds dev->rx_lock (docs/architecture.md,
 * "Execution model"). */
#include "exec.h"
#include "../core/wake.h"
#include "../net/net.h"
#include "../transport/transport.h"

/* At most one hand-back a while (exec_poll_found): an application that
 * keeps polling through bidirectional WRITE streams must not kick the
 * engine per completion. */
#define HANDBACK_MIN_NS 100000ull
/* Empty polls in a row, each within UROCE_POLL_SPIN_US of the one before,
 * that make a spin (exec_poll_progress). */
#define SPIN_POLLS 8

static void run_timers(struct uroce_dev *dev, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	atomic_store(&dev->timer_next, UINT64_MAX);
	dev_count(dev, UC_timer_scans, 1);
	pthread_mutex_lock(&dev->lock);
	for (struct uroce_qp *qp = dev->qp_list; qp; qp = qp->next_in_dev) {
		pthread_mutex_lock(&qp->lock);
		if (qp->timer.deadline && qp->timer.deadline <= now)
			retry_timer_fire(qp, now);
		if (qp->timer.deadline && qp->timer.deadline < next)
			next = qp->timer.deadline;
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
int exec_progress_locked(struct uroce_dev *dev, int budget)
{
	int done = receive_locked(dev, budget);
	uint64_t now = now_ns();

	if (atomic_load(&dev->ack_flush_next) <= now)
		ack_flush_deferred(dev, now);
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

int exec_progress(struct uroce_dev *dev, int budget)
{
	pthread_mutex_lock(&dev->rx_lock);
	int done = exec_progress_locked(dev, budget);
	pthread_mutex_unlock(&dev->rx_lock);
	return done;
}

/* Hand-off (docs/architecture.md): an application spinning on ibv_poll_cq
 * runs the receive path itself, and the engine stays off the sockets while
 * it does, so the two never fight over the cores. */
void exec_poll_progress(struct uroce_dev *dev)
{
	if (!dev->cfg.poll_progress)
		return;
	/* a spin is a run of empty polls close together (any thread's): one
	 * poll now and then, however recent, says nothing of the next, and
	 * the engine must not wait for it (issue #14); nor do two, as when a
	 * program that polls on a period catches up after it was descheduled */
	uint64_t now = now_ns();
	uint64_t prev = atomic_load_explicit(&dev->eng.app_poll_ns, memory_order_relaxed);
	atomic_store_explicit(&dev->eng.app_poll_ns, now, memory_order_relaxed);
	/* plain loads and stores, no locked instruction in the poll loop: two
	 * threads racing on the count only make a run a poll longer or shorter */
	uint32_t run = atomic_load_explicit(&dev->eng.app_poll_run, memory_order_relaxed);
	if (now - prev >= (uint64_t)dev->cfg.poll_spin_us * 1000) {
		if (run)
			atomic_store_explicit(&dev->eng.app_poll_run, 0, memory_order_relaxed);
	} else if (run + 1 < SPIN_POLLS) {
		atomic_store_explicit(&dev->eng.app_poll_run, run + 1, memory_order_relaxed);
	} else {
		atomic_store_explicit(&dev->eng.app_spin_ns, now, memory_order_relaxed);
	}
	if (pthread_mutex_trylock(&dev->rx_lock))
		return;
	exec_progress_locked(dev, UROCE_RX_BATCH);
	pthread_mutex_unlock(&dev->rx_lock);
}

/* The application got its completion and may now spin on memory, while an
 * RDMA WRITE it waits for is only partly here (its first window rode in
 * with the ACK; the rest follows as the ACKs reach the requester).  With
 * the engine off the sockets for the poll grace, the rest would wait that
 * long: hand the sockets back to the engine now.  At most once per 100 us,
 * so that applications that keep polling during bidirectional WRITE
 * streams do not kick it per completion. */
void exec_poll_found(struct uroce_dev *dev)
{
	if (atomic_load_explicit(&dev->rx_writes_open, memory_order_relaxed) <= 0 || dev->cfg.handoff_defer)
		return;
	uint64_t now = now_ns(), last = atomic_load_explicit(&dev->eng.handback_ns, memory_order_relaxed);
	if (now - last < HANDBACK_MIN_NS || !atomic_compare_exchange_strong(&dev->eng.handback_ns, &last, now))
		return;
	atomic_store_explicit(&dev->eng.app_spin_ns, 0, memory_order_relaxed);
	wake_engine_by(dev, now);
}

