#include "wake.h"
#include <errno.h>
#include <string.h>
#include <unistd.h>

void engine_kick(struct uroce_dev *dev)
{
	uint64_t one = 1;
	dev_count_syscall(dev, UC_sys_eventfd);
	if (write(dev->eng.kick_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		LOG_ERR("uroce: engine kick: %s", strerror(errno));
}

bool on_engine_thread(void)
{
	return uroce_engine_thread;
}

void mark_engine_thread(void)
{
	uroce_engine_thread = true;
}

void wake_engine_by(struct uroce_dev *dev, uint64_t deadline)
{
	/* the engine announces sleeping, then reads the deadlines, then
	 * publishes when it will wake (exec/engine.c, engine_sleep) */
	if (!uroce_engine_thread && atomic_load(&dev->eng.sleeping) && atomic_load(&dev->eng.wake_ns) > deadline) {
		dev_count(dev, UC_engine_kicks, 1);
		engine_kick(dev);
	}
}

void deadline_lower(struct uroce_dev *dev, _Atomic uint64_t *next, uint64_t deadline, bool kick)
{
	uint64_t cur = atomic_load(next);

	while (deadline < cur) {
		if (atomic_compare_exchange_weak(next, &cur, deadline)) {
			if (kick)
				wake_engine_by(dev, deadline);
			break;
		}
	}
}

void qp_timer_set(struct uroce_qp *qp, uint64_t deadline)
{
	qp->timer.deadline = deadline;
	if (deadline)
		deadline_lower(qp->dev, &qp->dev->timer_next, deadline, true);
}
