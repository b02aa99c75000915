/* The counters table as names and help texts (counters.h). */
#include "counters.h"

_Thread_local _Bool uroce_engine_thread;

const char *const uroce_counter_names[UC__COUNT] = {
#define X(n, d) #n,
	UROCE_COUNTERS(X)
#undef X
};
const char *const uroce_counter_help[UC__COUNT] = {
#define X(n, d) d,
	UROCE_COUNTERS(X)
#undef X
};

