/* Starting uroce's own threads (thread.h). */
#include "thread.h"
#include <errno.h>
#include <sched.h>

int thread_start(pthread_t *t, void *(*fn)(void *), void *arg, bool *rt, const char *name)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	if (*rt) {
		struct sched_param sp = { .sched_priority = 1 };
		pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
		pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
		pthread_attr_setschedparam(&attr, &sp);
	}
	int rc = pthread_create(t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	if (rc == EPERM && *rt) {
		*rt = false;  /* not permitted: an ordinary thread */
		rc = pthread_create(t, NULL, fn, arg);
	}
	if (rc == 0)
		pthread_setname_np(*t, name);
	return rc;
}
