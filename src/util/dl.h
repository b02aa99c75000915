/* Libraries opened when a feature is first used, not when liburoce is
 * loaded (docs/architecture.md, "Libraries opened on demand"): `uroce run`
 * preloads liburoce into every process it starts -- shells, mpirun, python,
 * each rank -- and most of them never capture (libpcap) or send by AF_XDP
 * (libxdp, libbpf). */
#ifndef UROCE_UTIL_DL_H
#define UROCE_UTIL_DL_H

#include <stdatomic.h>
#include <stdbool.h>

/* A table of a library's functions, each slot typed after the library's
 * own header:
 *   #define FOO_SYMS(X) X(foo_open) X(foo_close)
 *   static struct { FOO_SYMS(DL_SLOT) } foo;
 *   static const char *const foo_names[] = { FOO_SYMS(DL_NAME) };
 *   static struct dl_lib foo_lib = { "libfoo.so.1", "/usr/lib/.../libfoo.so.1", 0 };
 *   if (dl_load(&foo_lib, &foo, foo_names, DL_COUNT(foo_names), "UROCE_FOO")) foo.foo_open(...); */
#define DL_SLOT(f) __typeof__(f) *f;
#define DL_NAME(f) #f,
#define DL_COUNT(names) ((unsigned)(sizeof(names) / sizeof((names)[0])))

struct dl_lib {
	const char *soname;
	const char *path;       /* where the build found it: tried if the soname is not found */
	_Atomic int state;      /* 0 not tried, 1 loaded, -1 failed */
};

/* Opens lib->soname (else lib->path), once, and fills the table `slots`
 * with the functions `names` names, in order.  On failure it says why
 * once, as `who` (the setting that asked for the library), leaves every
 * slot NULL, and every later call fails too. */
bool dl_load(struct dl_lib *lib, void *slots, const char *const *names, unsigned n, const char *who);

#endif
