/* Waking the engine thread: the deadlines it sleeps until (QP timers,
 * deferred ACKs) and the kick that wakes it earlier.  Written by any
 * thread; the engine (exec/engine.c) publishes when it sleeps and until
 * when (dev->eng.sleeping, dev->eng.wake_ns), so a kick is sent only when it
 * would otherwise wake too late. */
#ifndef UROCE_CORE_WAKE_H
#define UROCE_CORE_WAKE_H

#include "device.h"

void engine_kick(struct uroce_dev *dev);
/* Wake the engine if it sleeps past `deadline` (not from the engine itself). */
void wake_engine_by(struct uroce_dev *dev, uint64_t deadline);
/* Lower the deadline *next (timer_next, ack_flush_next) to `deadline`; with
 * `kick`, wake the engine if it sleeps past it. */
void deadline_lower(struct uroce_dev *dev, _Atomic uint64_t *next, uint64_t deadline, bool kick);
/* The QP's one timer (transport/timer.c decides which deadline it is);
 * 0 = off.  Under qp->lock. */
void qp_timer_set(struct uroce_qp *qp, uint64_t deadline);
/* Is the calling thread the engine?  The engine marks itself at start. */
bool on_engine_thread(void);
void mark_engine_thread(void);

#endif
