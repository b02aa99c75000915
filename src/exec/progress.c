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
/* How long a run of polls close together must last to be a spin
 * (poll_stamp).  10 us: longer than a drain of a few polls or a burst of
 * 16 (progress_poll_burst_*), and short enough that a spin that begins as
 * a peer's message is on its way is known before it comes (issue #16: MPI
 * ranks that start polling after a millisecond's work; with 50 us the
 * first hops of each 1 MiB ping went through both sleeping engines, a
 * doorbell and a wake-up each, ~45 us more per message). */
#define SPIN_MIN_NS 10000ull
/* How often polls that keep finding completions receive (exec_poll_found). */
#define FOUND_RX_NS 25000ull

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
			/* who receives (issue #14's test: a target that polls now
			 * and then leaves receiving to the engine) */
			if (on_engine_thread())
				dev_count(dev, UC_rx_by_engine, (uint64_t)n);
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

/* A poll by the application, empty or not: is it spinning?  A spin is a
 * run of polls (any thread's), each within UROCE_POLL_SPIN_US of the one
 * before, that has lasted SPIN_MIN_NS; only a spin keeps the engine off
 * the sockets (engine.c, issue #14).  One poll now and then, however
 * recent, says nothing of the next; nor does a short run: a program that
 * polls on a period drains its completions in a few polls, or makes one of
 * catch-up after it was descheduled.  Polls that find completions count:
 * an application that mostly finds some (ib_write_bw's requester) spins
 * all the same -- and so they receive too, now and then (exec_poll_found).
 * No locked instruction in the poll loop: a run's start is stored before
 * the poll's stamp (release; read with acquire), so a thread that sees
 * another's stamp sees the run it belongs to; the gap is compared signed,
 * as another thread may have stamped a later clock reading meanwhile. */
static void poll_stamp(struct uroce_dev *dev, uint64_t now)
{
	int64_t gap = (int64_t)(now - atomic_load_explicit(&dev->eng.app_poll_ns, memory_order_acquire));
	/* posts since the last poll count as polls (dev_post_stamp) */
	int64_t gap_post = (int64_t)(now - atomic_load_explicit(&dev->eng.app_post_ns, memory_order_relaxed));
	if (gap_post < gap)
		gap = gap_post;

	if (gap >= (int64_t)dev->cfg.poll_spin_us * 1000) {
		atomic_store_explicit(&dev->eng.app_run_ns, now, memory_order_release);
	} else {
		uint64_t run = atomic_load_explicit(&dev->eng.app_run_ns, memory_order_acquire);
		if ((int64_t)(now - run) >= (int64_t)SPIN_MIN_NS) {
			bool begins = atomic_load_explicit(&dev->eng.app_spin_from_ns, memory_order_relaxed) != run;
			/* the run's start before its last poll (release; the
			 * reader takes the poll with acquire, exec_spin_held) */
			atomic_store_explicit(&dev->eng.app_spin_from_ns, run, memory_order_relaxed);
			atomic_store_explicit(&dev->eng.app_spin_ns, now, memory_order_release);
			/* A spin begins while the engine sleeps on the sockets:
			 * same-host senders ring it for every record (the ring's
			 * rx_sleeping) and its wake-up preempts the spinner, for
			 * packets the spinner would take itself.  Kicked, it
			 * sees the spin and sleeps off the sockets (engine.c's
			 * grace), once per spin.  Asleep and not off the sockets
			 * until a hold's end is asleep on them, but in the defer
			 * mode, which has no grace.  (A spin that begins as the
			 * engine is about to sleep there is missed, and its next
			 * doorbell wakes the engine as before.) */
			if (begins && !dev->cfg.handoff_defer && atomic_load(&dev->eng.sleeping) &&
			    !atomic_load(&dev->eng.off_until_ns)) {
				dev_count(dev, UC_engine_kicks, 1);
				engine_kick(dev);
			}
		}
	}
	atomic_store_explicit(&dev->eng.app_poll_ns, now, memory_order_release);
}

/* Until when the engine leaves the sockets to a spin.  For a process that
 * peers send requests to (one received within the grace), for as long
 * after the spin's last poll as the spin has lasted, at least
 * UROCE_POLL_SPIN_US (a gap that still continues the run) and at most
 * UROCE_POLL_GRACE_US; for any other, the whole grace.  The grace outlasts
 * the pauses of a spin that has gone on for a while (engine.c), but a
 * short one is weak evidence that the next poll comes soon: a periodic
 * poller whose thread woke 300 us late once, and on time the next period,
 * polls twice 50-200 us apart, which is a spin by the rule above -- and
 * held the sockets for the whole 3 ms while one-sided requests waited for
 * its next poll (issue #14, the bench's runs of slow operations ~3 ms
 * long).  Held as long as it lasted, such a spin delays a request by at
 * most that.  A process that is no target waits only for answers to its
 * own requests, and its own polls receive those: a client that posts a
 * READ, polls for its answer and sleeps 100 us is a spin only now and then,
 * and held for its short spins alone it was left to its engine, whose
 * wake-up doubled an idle target's READ latency (onesided_lat idle by UDP,
 * median ~35 -> ~65 us on the 2-core VM; 1,674 of 2,020 packets received
 * by the client's engine against 9).  A torn read (the start of one spin,
 * the last poll of another) gets the whole grace, as before. */
uint64_t exec_spin_held(const struct uroce_dev *dev, uint64_t now)
{
	uint64_t spin = atomic_load_explicit(&dev->eng.app_spin_ns, memory_order_acquire);
	uint64_t from = atomic_load_explicit(&dev->eng.app_spin_from_ns, memory_order_relaxed);
	uint64_t grace = (uint64_t)dev->cfg.poll_grace_us * 1000;
	uint64_t gap = (uint64_t)dev->cfg.poll_spin_us * 1000;
	uint64_t request = atomic_load_explicit(&dev->eng.rx_request_ns, memory_order_relaxed);
	int64_t lasted = (int64_t)(spin - from);

	if ((int64_t)(now - request) < (int64_t)grace && lasted >= 0 && (uint64_t)lasted < grace) {
		uint64_t hold = (uint64_t)lasted > gap ? (uint64_t)lasted : gap;
		if (hold < grace)
			grace = hold;
	}
	return spin + grace;
}

/* Is the receive path the pollers' now?  While a spin holds the sockets,
 * and while the engine sleeps off them until the end of a hold it
 * computed earlier: a hold can shrink after that (a process's first
 * request, a short spin after a long one), and in between neither would
 * receive (issue #14's review). */
static bool spin_holds(const struct uroce_dev *dev, uint64_t now)
{
	uint64_t off = atomic_load(&dev->eng.off_until_ns);
	return (int64_t)(now - exec_spin_held(dev, now)) < 0 || (off && (int64_t)(now - off) < 0);
}

/* A poll runs the receive path only when there may be something to run:
 * a packet ready (net_rx_ready, a look that takes no lock), an ACK or a
 * timer due.  A spinner that took rx_lock on every poll held it most of
 * the time, and the scheduler preempted it there: with more spinners than
 * cores (a target's two polling threads beside a client), a READ then
 * waited in the socket until the holder ran again, milliseconds (issue
 * #14: poll-threads p99s of ~12 ms).  Now a thread holds the lock only
 * while it has a packet in hand.  Once per RX_LOOK_NS a thread's poll runs
 * it anyway, for the receive path's housekeeping (a ring's dead producers
 * reaped, a broken ring given back: shm.c's rx_poll).  By time, not by a
 * count of polls: once every 64 polls held the lock ~5% of a spinner's
 * time, and the client whose wake-up preempted such a holder then spun on
 * that very core for its READ's answer, which the holder was to make,
 * until the scheduler ended its slice (poll-threads p99s of 2-5 ms). */
#define RX_LOOK_NS 1000000ull
/* Where the look at the sockets is a system call that costs what an empty
 * receive call does (one UDP socket: net_rx_ready's skip_call), a poll
 * receives at once instead, one call where a packet took two: ib_send_lat
 * 2 B between two namespaces by UDP, 6.75-8.45 -> 5.97-7.47 us one way in
 * three alternated runs (docs/architecture.md, Execution model).  It
 * then holds rx_lock through each empty receive call, which issue #14's
 * threads must not: a poller preempted holding it kept the others from
 * receiving for its slice (onesided_lat poll-threads by UDP, p99s of
 * 1.6-3 ms when a thread only looked first after finding the lock taken).
 * So only a poller alone does: no other thread's poll has come between
 * two of its own for RX_POLLERS_NS.  (The engine stays off the sockets
 * while a poller spins, and a lone poller preempted with the lock keeps
 * its packets from nobody who would receive them -- but in the defer mode,
 * where the engine receives beside the pollers: there they look first.) */
#define RX_POLLERS_NS 100000000ull

/* Does the engine leave the sockets to the pollers now: an application
 * spins (within the grace after its spin's last poll), or the defer mode
 * gives pollers the first chance (engine.c)?  Otherwise the engine is on
 * the sockets, and a poll that received beside it only raced it: a poller
 * preempted with packets in hand (its receive call had taken them out of
 * the socket) held them while the engine, woken for them, found the
 * socket empty and slept -- a 64 KiB WRITE to a target polling every
 * 500 us and sleeping waited until its next poll (onesided_lat poll-sleep
 * by UDP, p99 ~300 us a run in three; max up to 1.5 ms, against ~0.3 ms
 * with UROCE_POLL_PROGRESS=0). */
static bool pollers_receive(struct uroce_dev *dev, uint64_t now)
{
	if (dev->cfg.handoff_defer && dev->eng.rt)
		return true;
	return spin_holds(dev, now);
}

static void poll_receive(struct uroce_dev *dev, uint64_t now)
{
	static _Thread_local uint64_t looked;
	static _Thread_local char mark;  /* its address names this thread */

	if (!pollers_receive(dev, now))
		return;

	atomic_store_explicit(&dev->eng.app_rx_ns, now, memory_order_relaxed);
	/* several pollers? (a store only when another thread polled last) */
	uintptr_t last = atomic_load_explicit(&dev->eng.rx_poller, memory_order_relaxed);
	if (last != (uintptr_t)&mark) {
		atomic_store_explicit(&dev->eng.rx_poller, (uintptr_t)&mark, memory_order_relaxed);
		if (last)
			atomic_store_explicit(&dev->eng.rx_pollers_ns, now, memory_order_relaxed);
	}
	/* signed: another poller may have stamped a later clock reading;
	 * in the defer mode the engine receives beside the pollers */
	bool alone = (int64_t)(now - atomic_load_explicit(&dev->eng.rx_pollers_ns, memory_order_relaxed)) >=
		     (int64_t)RX_POLLERS_NS && !dev->cfg.handoff_defer;
	/* the cheap tests first: the look may be a system call */
	if (atomic_load(&dev->ack_flush_next) > now && atomic_load(&dev->timer_next) > now && now - looked < RX_LOOK_NS &&
	    !net_rx_ready(dev->net, alone))
		return;
	if (pthread_mutex_trylock(&dev->rx_lock))
		return;
	looked = now;
	exec_progress_locked(dev, UROCE_RX_BATCH);
	pthread_mutex_unlock(&dev->rx_lock);
}

/* Hand-off (docs/architecture.md): an application spinning on ibv_poll_cq
 * runs the receive path itself, and the engine stays off the sockets while
 * it does, so the two never fight over the cores. */
uint64_t exec_poll_progress(struct uroce_dev *dev)
{
	if (!dev->cfg.poll_progress)
		return 0;
	uint64_t now = now_ns();
	poll_stamp(dev, now);
	poll_receive(dev, now);
	return now;
}

/* The spin ends here as far as the engine knows: a new one must last
 * SPIN_MIN_NS again, and the engine, if it sleeps off the sockets, is
 * kicked.  The hand-back's stamp is what the engine's sleep checks after
 * announcing it (engine_sleep: a hand-back between its look and its sleep
 * is not lost); the CAS is sequentially consistent, as wake_engine_by's
 * load of `sleeping` is. */
static void hand_back(struct uroce_dev *dev, uint64_t now, uint64_t last)
{
	if (!atomic_compare_exchange_strong(&dev->eng.handback_ns, &last, now))
		return;
	atomic_store_explicit(&dev->eng.app_run_ns, now, memory_order_release);
	atomic_store(&dev->eng.app_spin_ns, 0);
	wake_engine_by(dev, now);
}

/* Completions found.  A poll that finds some runs no receive path, so an
 * application whose CQ is never empty -- a UC or UD requester posting and
 * polling, whose send completions are made inside ibv_post_send -- would
 * spin and hold the sockets while nobody received (issue #14's review):
 * such a poll receives itself once FOUND_RX_NS has passed since a poll
 * last did.
 * And the application got its completion and may now spin on memory,
 * while an RDMA WRITE it waits for is only partly here (its first window
 * rode in with the ACK; the rest follows as the ACKs reach the requester).
 * With the engine off the sockets for the poll grace, the rest would wait
 * that long: hand the sockets back to the engine now.  At most once per
 * 100 us, so that applications that keep polling during bidirectional
 * WRITE streams do not kick it per completion. */
void exec_poll_found(struct uroce_dev *dev, uint64_t now)
{
	if (!dev->cfg.poll_progress)
		return;
	if (!now) {
		now = now_ns();
		poll_stamp(dev, now);
		if ((int64_t)(now - atomic_load_explicit(&dev->eng.app_rx_ns, memory_order_relaxed)) >=
		    (int64_t)FOUND_RX_NS)
			poll_receive(dev, now);
	}
	if (atomic_load_explicit(&dev->rx_writes_open, memory_order_relaxed) <= 0 || dev->cfg.handoff_defer)
		return;
	uint64_t last = atomic_load_explicit(&dev->eng.handback_ns, memory_order_relaxed);
	if (now - last >= HANDBACK_MIN_NS)
		hand_back(dev, now, last);
}

/* An application that arms its CQ blocks for the event next: nobody polls
 * any more, and the SEND that is to wake it must not wait for the engine's
 * next look (ib_send_bw -e by UDP ran at ~1 GB/s instead of ~4).  Only a
 * spin is handed back; otherwise the run of polls ends here, so that the
 * drains of an event-driven application, each after its wake-up, do not
 * add up to a spin. */
void exec_poll_block(struct uroce_dev *dev)
{
	if (!dev->cfg.poll_progress || dev->cfg.handoff_defer)
		return;
	uint64_t now = now_ns();
	if (spin_holds(dev, now))
		hand_back(dev, now, atomic_load_explicit(&dev->eng.handback_ns, memory_order_relaxed));
	else  /* the polls after the event start a run of their own */
		atomic_store_explicit(&dev->eng.app_run_ns, now, memory_order_release);
}
