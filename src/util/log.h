/* Diagnostics to stderr, by level: UROCE_LOG (0 errors, 1 info, 2 debug). */
#ifndef UROCE_UTIL_LOG_H
#define UROCE_UTIL_LOG_H

void uroce_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The level in force; config loading sets it (config.c). */
void uroce_log_set_level(int level);
#define LOG_ERR(...) uroce_log(0, __VA_ARGS__)
#define LOG_INFO(...) uroce_log(1, __VA_ARGS__)
#define LOG_DBG(...) uroce_log(2, __VA_ARGS__)

#endif
