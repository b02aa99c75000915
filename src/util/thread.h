/* Starting uroce's own threads (the engine, the pull helper). */
#ifndef UROCE_UTIL_THREAD_H
#define UROCE_UTIL_THREAD_H

#include <pthread.h>
#include <stdbool.h>

/* Starts fn(arg) in a thread named `name`.  With *rt, it asks for the lowest
 * real-time priority (SCHED_FIFO 1), which wakes within microseconds where a
 * sleeping ordinary thread beside spinning applications wakes late; refused
 * (no root, CAP_SYS_NICE or RLIMIT_RTPRIO), an ordinary thread, and *rt is
 * false.  *rt is final before the thread starts (it may read it).  0 or an
 * errno. */
int thread_start(pthread_t *t, void *(*fn)(void *), void *arg, bool *rt, const char *name);

#endif
