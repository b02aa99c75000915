#include "log.h"
#include <stdarg.h>
#include <stdio.h>

static int log_level;

void uroce_log_set_level(int level)
{
	log_level = level;
}

void uroce_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > log_level)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
