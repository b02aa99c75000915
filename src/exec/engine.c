/* The engine thread: receives the packets no polling application takes,
 * runs the transport for them, fires QP timers and sends deferred ACKs
 * (docs/architecture.md, "Execution model").  It sleeps in epoll (an idle
 * process uses no CPU; after traffic it first spins for UROCE_SPIN_US while
 * a CPU is to spare); other threads kick it only when they need it earlier
 * than it will wake. */
#include "exec.h"
#include "cpu_busy.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "../core/wake.h"
#include "../util/thread.h"
#include "../net/net.h"
#include "../transport/transport.h"

/* Packets one engine round takes before it looks at its state again. */
#define ENGINE_BUDGET 256
/* How often a spinning engine asks /proc/loadavg whether a CPU is to spare:
 * a look costs as much as a round of the spin, and a thread that became
 * runnable meanwhile waits at most this long. */
#define SPARE_LOOK_NS 10000ull
/* A spinning engine yields once per this many rounds, so that a thread the
 * scheduler put on its CPU runs (sched_yield every round costs latency). */
#define SPIN_YIELD_ROUNDS 16
/* A yield that kept the engine off its CPU this long gave it to a thread
 * that computes there for a scheduler slice (milliseconds), not to one
 * that runs a moment (the ib_read_lat client: tens of microseconds); the
 * engine then sleeps instead of spinning for SPIN_DISPLACED_NS. */
#define YIELD_LONG_NS 200000ull
#define SPIN_DISPLACED_NS 100000000ull
/* An engine kept busy by traffic does not sleep in epoll, where it would
 * see a same-host producer asking for a region (net_serve): it answers
 * this often then, well within the producer's wait (net/shm.c). */
#define SERVE_EVERY_NS 1000000ull
/* How long a real-time spin waits for the next packet while a message is
 * under way (engine_main) before it sleeps on the sockets.  On one host the
 * engine wakes on the CPU of the thread that sends to it and, real-time,
 * preempts it: spinning the whole UROCE_SPIN_US for the rest of a WRITE
 * kept that sender from sending the rest (onesided_lat write 16 KiB to an
 * idle target by UDP: median 92-106 us, p99 168-184 us, 1.7 engine sleeps a
 * WRITE; with 5 us: 56-69 us, 129-155 us; 64 KiB: 103 -> 68-74 us, p99
 * 205-210 -> 155-194 us).  A sender on another CPU streams packets closer
 * than that, and the sleep is real-time: the next packet wakes it at once. */
#define UNDER_WAY_SPIN_NS 5000ull
/* While a serve fd is not watched (net->serve_stalled: a connection could
 * not be accepted), every sleep ends this soon and serves again (net/ring.c). */
#define SERVE_STALLED_NS 10000000ull


/* May the engine spin without taking a CPU from anyone?  Only while no more
 * threads are runnable than there are CPUs (the "running" field of
 * /proc/loadavg counts this one too).  Spinning when they are oversubscribed
 * stalls someone: a real-time spinner pushes a polling application off its
 * CPU, and an idle-class one starves, long enough for the peer's ACK timer
 * to give up (SPARE_LOOK_NS says how often this is asked). */
static bool cpu_to_spare(struct uroce_dev *dev)
{
	char buf[128];

	if (dev->eng.loadavg_fd < 0)
		return false;
	dev_count_syscall(dev, UC_sys_other);
	ssize_t n = pread(dev->eng.loadavg_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = 0;
	/* "0.52 0.58 0.59 3/310 12345": the fourth field's count, read by
	 * hand -- sscanf's float conversions of the three averages cost more
	 * than the read (perf: vfscanf and strtod on a spinning engine) */
	const char *c = buf;
	for (int field = 0; field < 3; field++) {
		c = strchr(c, ' ');
		if (!c)
			return false;
		c++;
	}
	if (*c < '0' || *c > '9')
		return false;
	long running = 0;
	while (*c >= '0' && *c <= '9' && running < 1000000)
		running = running * 10 + (*c++ - '0');
	return *c == '/' && running <= dev->eng.ncpus;
}

/* A real-time engine spins as an ordinary thread.  Spinning as SCHED_FIFO,
 * it keeps any ordinary thread the scheduler puts on its CPU -- a polling
 * application moved there -- from running until the spin ends (figures in
 * bench/README.md).  It sleeps real-time again, to wake within microseconds.
 * A switch is a system call, made when a spin begins and before a sleep
 * only. */
static void engine_spin_fair(struct uroce_dev *dev, bool fair)
{
	if (!dev->eng.rt || dev->eng.fair == fair)
		return;
	struct sched_param sp = { .sched_priority = fair ? 0 : 1 };
	dev_count_syscall(dev, UC_sys_sched);
	if (pthread_setschedparam(pthread_self(), fair ? SCHED_OTHER : SCHED_FIFO, &sp) == 0)
		dev->eng.fair = fair;
}

/* Where a real-time engine sleeps.  The scheduler wakes a real-time thread
 * on the CPU it last ran on unless a real-time thread runs there
 * (select_task_rq_rt); an ordinary thread would be placed by wake_affine
 * and the idle-CPU search instead.  An engine that last ran beside a
 * thread that keeps its CPU busy -- its own application computing, spinning
 * on memory or polling now and then, a forked child computing -- is then
 * woken there, from the CPU where the request came in (the requester's, for
 * a doorbell and for a same-host datagram alike: loopback's softirq runs on
 * the sender's CPU), through an inter-processor interrupt.  On the 2-vCPU
 * VM that is ~20 us from waking to running against ~2 us on the waker's
 * own CPU (ftrace sched_waking to sched_switch; onesided_lat READ 64 B by
 * UDP to a computing target: median 35 us against 17 us idle).  So before
 * it sleeps, the engine looks at how busy its CPU has been kept by other
 * threads over the last window (cpu_busy.c: the kernel's per-CPU idle
 * time in /proc/stat, less the engine's own), and if that is most of it while another
 * CPU it may run on has been mostly idle, moves there.  Moving after the
 * waker instead (a doorbell names its ringer's CPU) put the engine of an
 * idle perftest target onto the CPU its streaming requester keeps busy,
 * beside an idle one (ib_write_bw 64 B by the rings 2.2 -> 0.13 M msg/s):
 * a CPU's idle time tells that case apart, and a datagram names no ringer.
 * Affinity is the only way a thread moves itself: the mask narrowed to
 * that CPU (the kernel migrates a running thread before the call returns)
 * and put back as it was. */
/* Busy shares, of the window, that move the engine: its CPU kept busy by
 * others at least this much (a target computing beside its engine reads
 * ~0.9: the engine's own time is left out, the cost of its wake-ups there
 * is not) ... */
#define PLACE_BUSY_HERE 0.75
/* ... and another CPU at most this busy (a client that posts a READ, polls
 * for its answer and sleeps 100 us reads 0.2-0.4).  The gap between the two
 * keeps a move from being undone at the next look. */
#define PLACE_IDLE_THERE 0.5

/* A real-time engine's placement (engine thread only). */
struct engine_placement {
	struct cpu_busy busy;
	cpu_set_t allowed;              /* this thread's CPUs at the last sample */
};

static void engine_place(struct uroce_dev *dev, struct engine_placement *p, uint64_t now)
{
	int here = sched_getcpu();
	if (here < 0)
		return;
	if (cpu_busy_sample(&p->busy, now, here)) {
		UROCE_COUNT_SYSCALL(dev->stats, UC_sys_other, CPU_BUSY_SAMPLE_CALLS);
		dev_count_syscall(dev, UC_sys_sched);
		if (sched_getaffinity(0, sizeof(p->allowed), &p->allowed) < 0)
			CPU_ZERO(&p->allowed);
	}
	/* By the last window's shares and CPUs, until the next, with no system
	 * call: the kernel may wake the engine on the busy CPU again meanwhile
	 * (it wakes a real-time thread elsewhere when a real-time thread runs
	 * where it last ran, a requester's own engine, say), and it moves off
	 * at its next sleep, without waiting a window there. */
	double other_busy;
	int other;
	if (cpu_busy_share(&p->busy, here) < PLACE_BUSY_HERE ||
	    (other = cpu_busy_least(&p->busy, &p->allowed, here, &other_busy)) < 0 || other_busy > PLACE_IDLE_THERE)
		return;
	/* the mask as it is now, to be put back */
	cpu_set_t allowed, one;
	dev_count_syscall(dev, UC_sys_sched);
	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0 || !CPU_ISSET(other, &allowed))
		return;
	CPU_ZERO(&one);
	CPU_SET(other, &one);
	dev_count_syscall(dev, UC_sys_sched);
	if (sched_setaffinity(0, sizeof(one), &one) < 0)
		return;
	/* Put back as read above: a change another thread made to this
	 * thread's affinity in between (two system calls) is lost.  A mask
	 * that cannot be put back (a cpuset changed meanwhile) leaves the
	 * engine on `other`; it is then placed no more. */
	dev_count_syscall(dev, UC_sys_sched);
	if (sched_setaffinity(0, sizeof(allowed), &allowed) < 0) {
		LOG_DBG("uroce: engine affinity not restored (%s): placement stops", strerror(errno));
		cpu_busy_close(&p->busy);
	}
	dev_count(dev, UC_engine_moves, 1);
}

/* Sleep in epoll on `epfd` until an event, the earliest deadline (unless
 * a poller has taken them over), or `cap` ns from now (0: no cap).  Returns
 * epoll's count (but the rendezvous listeners'), of which *rung (when not
 * NULL) were rings' bells; drains the kick. */
static int engine_sleep_unless(struct uroce_dev *dev, int epfd, uint64_t cap, bool deadlines,
			       const _Atomic uint64_t *watch, uint64_t seen, int *rung)
{
	if (rung)
		*rung = 0;
	struct epoll_event evs[8];
	struct timespec ts, *tsp = NULL;

	engine_spin_fair(dev, false);
	atomic_store(&dev->eng.sleeping, true);
	/* Dekker with hand_back (exec/progress.c): it changes *watch, then
	 * reads `sleeping` to kick; either it kicks this sleep or this sees
	 * its change and does not sleep */
	if (watch && atomic_load(watch) != seen) {
		atomic_store(&dev->eng.sleeping, false);
		return 0;
	}
	uint64_t now = now_ns();
	uint64_t wake = UINT64_MAX;
	if (deadlines) {
		uint64_t t = atomic_load(&dev->timer_next), a = atomic_load(&dev->ack_flush_next);
		wake = t < a ? t : a;
	}
	bool stalled = atomic_load_explicit(&dev->net->serve_stalled, memory_order_relaxed);
	if (stalled && (!cap || cap > SERVE_STALLED_NS))
		cap = SERVE_STALLED_NS;
	if (cap && now + cap < wake)
		wake = now + cap;
	atomic_store(&dev->eng.wake_ns, wake);
	if (wake != UINT64_MAX) {
		uint64_t d = wake > now ? wake - now : 0;
		ts.tv_sec = (time_t)(d / 1000000000ull);
		ts.tv_nsec = (long)(d % 1000000000ull);
		tsp = &ts;
	}
	dev_count_syscall(dev, UC_sys_poll);
	int n = epoll_pwait2(epfd, evs, 8, tsp, NULL);
	atomic_store(&dev->eng.sleeping, false);
	atomic_store(&dev->eng.wake_ns, UINT64_MAX);
	int serve = 0, bells = 0;
	for (int i = 0; i < n; i++)
		if (evs[i].data.u32 == 0) {
			uint64_t v;
			dev_count_syscall(dev, UC_sys_eventfd);
			if (read(dev->eng.kick_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				LOG_DBG("uroce: kick read failed");
		} else if (evs[i].data.u32 == NET_EV_SERVE) {
			serve++;  /* one per listener that is readable */
		} else if (evs[i].data.u32 == NET_EV_BELL) {
			bells++;  /* a ring has records: no socket to read */
		}
	/* a same-host producer asks for a region (net/shm.c, "Rendezvous"):
	 * answered at once, whatever this sleep was for; not a packet.  A
	 * stalled serve fd is retried after every sleep (SERVE_STALLED_NS). */
	if (serve || stalled)
		net_serve(dev->net);
	if (rung)
		*rung = bells;
	return n - serve;
}

static int engine_sleep(struct uroce_dev *dev, int epfd, uint64_t cap, bool deadlines)
{
	return engine_sleep_unless(dev, epfd, cap, deadlines, NULL, 0, NULL);
}

/* Sleep in epoll on the sockets (and the kick) until a packet, a kick or the
 * earliest deadline.  Sleeping is announced first -- to kickers
 * (dev->eng.sleeping) and to same-host senders, who then ring a doorbell on the
 * socket -- and what came meanwhile is run instead: returns -1 then, else
 * epoll's count. */
static int sleep_on_sockets(struct uroce_dev *dev, bool count_sleep, struct engine_placement *place)
{
	atomic_store(&dev->eng.sleeping, true);
	net_rx_sleeping(dev->net, true);
	if (exec_progress(dev, ENGINE_BUDGET) > 0) {
		net_rx_sleeping(dev->net, false);
		atomic_store(&dev->eng.sleeping, false);
		return -1;
	}
	if (count_sleep)
		dev_count(dev, UC_engine_sleeps, 1);
	if (place)
		engine_place(dev, place, now_ns());
	int bells;
	int n = engine_sleep_unless(dev, dev->eng.epfd, 0, true, NULL, 0, &bells);
	net_rx_sleeping(dev->net, false);
	/* read after the flag is down, so that no producer rings again for
	 * what this wake-up is about to receive anyway */
	if (bells)
		net_bells(dev->net);
	/* a bell says a ring has records; anything else, a socket */
	if (n > bells)
		atomic_store_explicit(&dev->net->rx_sockets_due, true, memory_order_relaxed);
	return n;
}

static void *engine_main(void *arg)
{
	struct uroce_dev *dev = arg;
	uint64_t last_traffic = 0, spare_seen = 0, served = 0, displaced_until = 0;
	unsigned spin_rounds = 0;
	bool spare = false;

	mark_engine_thread();
	/* where a real-time engine sleeps (engine_place); an ordinary one is
	 * placed by the kernel's wake_affine */
	struct engine_placement placement;
	struct engine_placement *place =
		dev->eng.rt && dev->cfg.engine_place && cpu_busy_open(&placement.busy) ? &placement : NULL;
	/* A real-time engine spins as an ordinary thread (engine_spin_fair),
	 * and at nice 0 it was preempted mid-spin by the application threads
	 * the scheduler put beside it, runnable but off its CPU for a CFS
	 * slice (~4 ms: one-sided p99s of 4 ms against a target that computes
	 * or spins on memory).  At the highest nice weight the application
	 * does not displace it, and the spin still ends within SPARE_LOOK_NS
	 * once more threads are runnable than there are CPUs.  (Refused
	 * without CAP_SYS_NICE or RLIMIT_NICE, e.g. when real-time came from
	 * RLIMIT_RTPRIO alone: the engine then spins at nice 0.) */
	if (dev->eng.rt && setpriority(PRIO_PROCESS, (id_t)gettid(), -20) < 0)
		LOG_DBG("uroce: engine nice -20 refused");
	/* The thread inherits its creator's signal mask; a fault in the
	 * counters page a process of our user truncated raises SIGBUS here,
	 * and a blocked SIGBUS from a fault kills the process whatever handler
	 * is installed (net/shm.c's guard, issue #13) */
	sigset_t bus;
	sigemptyset(&bus);
	sigaddset(&bus, SIGBUS);
	pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
	while (!atomic_load(&dev->eng.stop)) {
		uint64_t now = now_ns();
		uint64_t held = exec_spin_held(dev, now);
		uint64_t grace = (uint64_t)dev->cfg.poll_grace_us * 1000;
		bool defer = dev->cfg.handoff_defer && dev->eng.rt;
		/* signed: a poller may have stamped a later clock reading than
		 * this one */
		if (!defer && (int64_t)(now - held) < 0) {
			uint64_t seen = atomic_load(&dev->eng.handback_ns);
			/* grace: an application spins on its CQ (a run of polls
			 * close together lasting 10 us: poll_stamp) and receives;
			 * the engine stays off the sockets, so that no packet wakes
			 * a thread to preempt it, runs only what is due, if no
			 * poller is at it, and wakes to notice when the spin stops.
			 * Only a spin holds the sockets: an application that polls
			 * now and then, however recently, may not poll again for
			 * long, and a one-sided request must not wait for it (issue
			 * #14: a target polling once per 500 us held them for good,
			 * and a READ waited ~350 us).  The grace outlasts pauses of
			 * the spin (the spinner preempted, handling completions):
			 * an engine that took the sockets back at each pause would
			 * wake for every packet and doorbell until the spin resumed,
			 * preempting the spinners on two cores. */
			bool due = atomic_load(&dev->timer_next) <= now || atomic_load(&dev->ack_flush_next) <= now;
			if (due && !pthread_mutex_trylock(&dev->rx_lock)) {
				exec_progress_locked(dev, 0);
				pthread_mutex_unlock(&dev->rx_lock);
				due = false;
			}
			/* The next look: when the grace after the spin's last
			 * poll ends (not a grace from now: a request that came
			 * right after the spin stopped would wait up to two).
			 * What a poller holding rx_lock kept from running here,
			 * its next polls run (exec_progress_locked ends with the
			 * due work); looking again soon instead woke the engine
			 * every 20 us beside the spinners, with deferred ACKs due
			 * all the time (ib_send_lat's p99 1.2 -> 5-18 us).  No
			 * later than a grace from now, either: a deferred ACK
			 * kicks an engine that sleeps longer (ack.c), and a
			 * slack past the grace made one kick per ~150 iterations
			 * of ib_write_lat.  A hand-back meanwhile cancels the
			 * sleep. */
			uint64_t cap = held - now;
			/* published, so that pollers receive and a CQ armed
			 * hands back until then, even if the hold shrinks
			 * meanwhile (progress.c, spin_holds) */
			atomic_store(&dev->eng.off_until_ns, held);
			engine_sleep_unless(dev, dev->eng.epfd_timers, cap, !due, &dev->eng.handback_ns, seen, NULL);
			atomic_store(&dev->eng.off_until_ns, 0);
			continue;
		}
		if (exec_progress(dev, ENGINE_BUDGET) > 0) {
			last_traffic = now_ns();
			if (last_traffic - served > SERVE_EVERY_NS) {
				net_serve(dev->net);
				served = last_traffic;
			}
			continue;
		}
		if (defer) {
			/* defer mode: sleep on the sockets; when packets come while
			 * an application is polling this very moment, give it the
			 * first chance and take only what it leaves behind */
			int n = sleep_on_sockets(dev, false, NULL);
			if (n < 0)
				continue;
			now = now_ns();
			uint64_t app = atomic_load_explicit(&dev->eng.app_poll_ns, memory_order_relaxed);
			if (n > 0 && (int64_t)(now - app) < (int64_t)grace)
				engine_sleep(dev, dev->eng.epfd_timers, grace, true);
			continue;
		}
		/* traffic flows and no application polls: spin a while, if no
		 * one else wants the CPU, so that the next packet needs no wake-up */
		/* While something is under way -- an ACK waiting for its
		 * deadline (ack.c's deferral), or an RDMA WRITE partly here
		 * (qp_set_in_write) -- the spin stays real-time.  As an ordinary
		 * thread, an engine that an application thread woken onto its
		 * CPU displaced for a CFS slice sent that ACK, or placed the rest
		 * of that WRITE, milliseconds late (every 16th WRITE to an idle
		 * target took 1-4 ms; 64 KiB WRITEs by UDP had a p99 of 2-3 ms);
		 * not spinning then cost streams a wake-up per batch (ib_write_bw
		 * by UDP fell from ~5 to ~3.2 GB/s).  Real-time, it delays such a
		 * thread by at most the spin, and only while a message is under
		 * way; between messages it spins as an ordinary thread. */
		bool under_way = atomic_load(&dev->ack_flush_next) != UINT64_MAX ||
				 atomic_load_explicit(&dev->rx_writes_open, memory_order_relaxed) > 0;
		uint64_t spin_ns = (uint64_t)dev->cfg.spin_us * 1000;
		if (under_way && dev->eng.rt && spin_ns > UNDER_WAY_SPIN_NS)
			spin_ns = UNDER_WAY_SPIN_NS;
		if (now - last_traffic < spin_ns) {
			/* a look costs as much as a round of the spin: look again
			 * after 10 us (a thread that became runnable meanwhile
			 * waits at most that long) */
			if (now < displaced_until) {
				spare = false;
			} else if (now - spare_seen > SPARE_LOOK_NS) {
				spare = cpu_to_spare(dev);
				spare_seen = now;
				if (!spare)
					dev_count(dev, UC_engine_spin_no_cpu, 1);
			}
			if (spare) {
				/* An ordinary thread now (but for what is under
				 * way), it lets one that the scheduler put on its CPU
				 * run now and then (else that one waits for the whole
				 * spin: an ib_read_lat client moved there); a yield
				 * every round would cost the spin's own latency,
				 * hence one per SPIN_YIELD_ROUNDS.  A yield can also
				 * hand the CPU to a thread that computes there, for
				 * its whole slice, while requests wait in a socket or
				 * ring nobody reads (a spinning engine takes no
				 * doorbell): READs to a target that polls every
				 * 500 us and computes waited ~300 us for its next
				 * poll, a few times a thousand (onesided_lat
				 * poll-compute, p99 300-330 us).  Such a yield lasts
				 * a slice; then the engine does not spin for a while
				 * (SPIN_DISPLACED_NS) but sleeps on the sockets, where
				 * a packet wakes it, real-time, at once -- on a CPU
				 * that runs a thread, a preemption rather than an
				 * idle CPU's wake-up.  Not yielding at all left the
				 * other thread behind the spin for UROCE_SPIN_US: a
				 * client whose WRITE's ACK it waited for, 15 -> 64 us
				 * (same session; nice -20 and one autogroup). */
				engine_spin_fair(dev, !under_way);
				if (++spin_rounds % SPIN_YIELD_ROUNDS == 0) {
					uint64_t t0 = now_ns();
					dev_count_syscall(dev, UC_sys_yield);
					sched_yield();
					uint64_t t1 = now_ns();
					/* only a real-time engine's sleep is a
					 * wake-up within microseconds */
					if (dev->eng.rt && t1 - t0 > YIELD_LONG_NS) {
						displaced_until = t1 + SPIN_DISPLACED_NS;
						dev_count(dev, UC_engine_spin_displaced, 1);
					}
				}
				continue;
			}
		}
		/* placed only once traffic came: an idle process looks at
		 * nothing */
		int n = sleep_on_sockets(dev, last_traffic != 0, last_traffic ? place : NULL);
		if (n != 0)
			last_traffic = now_ns();
	}
	if (place)
		cpu_busy_close(&place->busy);
	return NULL;
}

int engine_start(struct uroce_dev *dev)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 0 };
	int rc;

	cpu_set_t cpus;
	dev->eng.ncpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
	dev->eng.loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	dev->eng.epfd = epoll_create1(EPOLL_CLOEXEC);
	dev->eng.kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (dev->eng.epfd < 0 || dev->eng.kick_fd < 0)
		return -errno;
	if (epoll_ctl(dev->eng.epfd, EPOLL_CTL_ADD, dev->eng.kick_fd, &ev) < 0)
		return -errno;
	dev->eng.epfd_timers = epoll_create1(EPOLL_CLOEXEC);
	if (dev->eng.epfd_timers < 0 || epoll_ctl(dev->eng.epfd_timers, EPOLL_CTL_ADD, dev->eng.kick_fd, &ev) < 0)
		return -errno;
	rc = net_add_fds(dev->net, dev->eng.epfd);
	if (rc == 0)
		rc = net_add_serve_fds(dev->net, dev->eng.epfd);
	if (rc == 0)
		rc = net_add_serve_fds(dev->net, dev->eng.epfd_timers);
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
	 * before the thread starts, so eng.rt never changes under it. */
	dev->eng.rt = dev->cfg.engine_rt;
	rc = thread_start(&dev->eng.thread, engine_main, dev, &dev->eng.rt, "uroce-engine");
	if (rc)
		return -rc;
	dev->eng.running = true;
	return 0;
}

void engine_stop(struct uroce_dev *dev)
{
	if (dev->eng.running) {
		atomic_store(&dev->eng.stop, true);
		engine_kick(dev);
		pthread_join(dev->eng.thread, NULL);
		dev->eng.running = false;
	}
	/* also what an engine_start that failed half-way opened */
	int *fds[] = { &dev->eng.epfd, &dev->eng.epfd_timers, &dev->eng.kick_fd, &dev->eng.loadavg_fd };
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
}
