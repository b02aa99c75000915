/* fds.h */
#include "fds.h"
#include "log.h"
#include <sys/resource.h>

bool fds_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return false;
	rlim_t was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return false;
	LOG_DBG("uroce: out of fds (EMFILE): RLIMIT_NOFILE soft limit raised from %llu to the hard limit %llu",
		(unsigned long long)was, (unsigned long long)rl.rlim_max);
	errno = EMFILE;
	return true;
}
