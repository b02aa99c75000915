/* The libc calls that take a path, sent into the view (tree.c) when the
 * path names one of its files; every other path goes to libc untouched,
 * after one compare of its first bytes.
 *
 * shared/docs/verbs-abi.md says hard-coded /sys/class/infiniband paths "cannot be
 * redirected by a preload": not through libibverbs' ibdev_path, true; a
 * preload can still stand in for the C library's path calls, which is what
 * this file does.  Every entry a program reaches by name is here, in its
 * glibc 2.36 symbol and the ones older binaries and _FORTIFY_SOURCE builds
 * call (__xstat, __open_2, ...); glibc's own calls between its functions
 * do not pass through the PLT, so each outer one (fopen, scandir,
 * realpath) is here too.  Not here, so not sent into the view: glob,
 * nftw, freopen and scandirat (none of the programs uroce runs reaches
 * sysfs through them).  Calls with a directory fd and a relative path are
 * left alone: a directory fd of the view is a real directory. */
#undef _FORTIFY_SOURCE
#include "sysfs.h"
#include <alloca.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static const char *const view_prefixes[] = {
	"/sys/class/infiniband",      /* whole components: not ..._verbs */
	"/sys/class/infiniband_verbs",
	"/dev/infiniband",
};

bool sysfs_path_in_view(const char *path)
{
	if (!path || path[0] != '/' || (path[1] != 's' && path[1] != 'd'))
		return false;
	for (size_t i = 0; i < sizeof(view_prefixes) / sizeof(view_prefixes[0]); i++) {
		size_t n = strlen(view_prefixes[i]);
		if (!strncmp(path, view_prefixes[i], n) && (path[n] == '\0' || path[n] == '/'))
			return true;
	}
	return false;
}

/* The path's place in the view, in buf[PATH_MAX]; NULL with ENOENT when
 * the view cannot be made: the call fails as it would on a host with no
 * RDMA device (a host's own devices are never shown under uroce). */
static const char *redirect(const char *path, char *buf)
{
	char root[128];

	if (!sysfs_view_root(root, sizeof(root)) ||
	    snprintf(buf, PATH_MAX, "%s%s", root, path) >= PATH_MAX) {
		errno = ENOENT;
		return NULL;
	}
	return buf;
}

/* libc's function of that name, found once (the loader's lookup is
 * idempotent, so two threads racing store the same pointer) and read
 * once per call; without it the call fails, returning `fail` */
#define REAL(fail, ret, name, ...)                                                \
	static ret (*real_fn)(__VA_ARGS__);                                       \
	ret (*real)(__VA_ARGS__) = __atomic_load_n(&real_fn, __ATOMIC_ACQUIRE);   \
	if (!real) {                                                              \
		real = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, name);               \
		__atomic_store_n(&real_fn, real, __ATOMIC_RELEASE);               \
	}                                                                         \
	if (!real) {                                                              \
		errno = ENOSYS;                                                   \
		return fail;                                                      \
	}

/* p_: p, or its place in the view.  The PATH_MAX buffer is taken from the
 * stack only for a view path (alloca), so that every other call -- in a
 * signal handler on a small alternate stack, in a thread with a small
 * stack -- costs the program no more stack than libc's own. */
#define PATH_OR_FAIL(p, fail)                            \
	const char *p##_ = p;                            \
	if (sysfs_path_in_view(p)) {                     \
		p##_ = redirect(p, alloca(PATH_MAX));    \
		if (!p##_)                               \
			return fail;                     \
	}

/* open(2)'s mode argument is there only with O_CREAT or O_TMPFILE */
#define MODE_ARG(flags, mode)                                 \
	mode_t mode = 0;                                      \
	if ((flags) & (O_CREAT | __O_TMPFILE)) {              \
		va_list ap;                                   \
		va_start(ap, flags);                          \
		mode = (mode_t)va_arg(ap, int);               \
		va_end(ap);                                   \
	}

#define OPEN_LIKE(name)                                           \
	EXPORT int name(const char *path, int flags, ...)         \
	{                                                         \
		MODE_ARG(flags, mode);                            \
		REAL(-1, int, #name, const char *, int, ...);         \
		PATH_OR_FAIL(path, -1);                           \
		return real(path_, flags, mode);                  \
	}
OPEN_LIKE(open)
OPEN_LIKE(open64)

#define OPENAT_LIKE(name)                                           \
	EXPORT int name(int dfd, const char *path, int flags, ...)  \
	{                                                           \
		MODE_ARG(flags, mode);                              \
		REAL(-1, int, #name, int, const char *, int, ...);      \
		PATH_OR_FAIL(path, -1);                             \
		return real(dfd, path_, flags, mode);               \
	}
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

/* a path and an int: __open_2's flags (_FORTIFY_SOURCE's open), the
 * access calls' mode */
#define PATH_INT_LIKE(name)                              \
	EXPORT int name(const char *path, int arg)       \
	{                                                \
		REAL(-1, int, #name, const char *, int); \
		PATH_OR_FAIL(path, -1);                  \
		return real(path_, arg);                 \
	}
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
PATH_INT_LIKE(__open_2)
PATH_INT_LIKE(__open64_2)
PATH_INT_LIKE(access)
PATH_INT_LIKE(euidaccess)
PATH_INT_LIKE(eaccess)

#define OPENAT2_LIKE(name)                                    \
	EXPORT int name(int dfd, const char *path, int flags) \
	{                                                     \
		REAL(-1, int, #name, int, const char *, int);     \
		PATH_OR_FAIL(path, -1);                       \
		return real(dfd, path_, flags);               \
	}
int __openat_2(int dfd, const char *path, int flags);
int __openat64_2(int dfd, const char *path, int flags);
OPENAT2_LIKE(__openat_2)
OPENAT2_LIKE(__openat64_2)

#define FOPEN_LIKE(name)                                           \
	EXPORT FILE *name(const char *path, const char *mode)      \
	{                                                          \
		REAL(NULL, FILE *, #name, const char *, const char *); \
		PATH_OR_FAIL(path, NULL);                          \
		return real(path_, mode);                          \
	}
FOPEN_LIKE(fopen)
FOPEN_LIKE(fopen64)

#define STAT_LIKE(name, st_type)                                  \
	EXPORT int name(const char *restrict path, st_type *restrict st) \
	{                                                         \
		REAL(-1, int, #name, const char *, st_type *);        \
		PATH_OR_FAIL(path, -1);                           \
		return real(path_, st);                           \
	}
STAT_LIKE(stat, struct stat)
STAT_LIKE(stat64, struct stat64)
STAT_LIKE(lstat, struct stat)
STAT_LIKE(lstat64, struct stat64)

#define FSTATAT_LIKE(name, st_type)                                                   \
	EXPORT int name(int dfd, const char *restrict path, st_type *restrict st, int flag) \
	{                                                                             \
		REAL(-1, int, #name, int, const char *, st_type *, int);                  \
		PATH_OR_FAIL(path, -1);                                               \
		return real(dfd, path_, st, flag);                                    \
	}
FSTATAT_LIKE(fstatat, struct stat)
FSTATAT_LIKE(fstatat64, struct stat64)

EXPORT int statx(int dfd, const char *restrict path, int flags, unsigned int mask, struct statx *restrict stx)
{
	REAL(-1, int, "statx", int, const char *, int, unsigned int, struct statx *);
	PATH_OR_FAIL(path, -1);
	return real(dfd, path_, flags, mask, stx);
}

/* glibc before 2.33 had programs call these for stat and lstat; binaries
 * built then still do */
#define XSTAT_LIKE(name, st_type)                                   \
	int name(int ver, const char *path, st_type *st);           \
	EXPORT int name(int ver, const char *path, st_type *st)     \
	{                                                           \
		REAL(-1, int, #name, int, const char *, st_type *);     \
		PATH_OR_FAIL(path, -1);                             \
		return real(ver, path_, st);                        \
	}
XSTAT_LIKE(__xstat, struct stat)
XSTAT_LIKE(__xstat64, struct stat64)
XSTAT_LIKE(__lxstat, struct stat)
XSTAT_LIKE(__lxstat64, struct stat64)

#define FXSTATAT_LIKE(name, st_type)                                          \
	int name(int ver, int dfd, const char *path, st_type *st, int flag);  \
	EXPORT int name(int ver, int dfd, const char *path, st_type *st, int flag) \
	{                                                                     \
		REAL(-1, int, #name, int, int, const char *, st_type *, int);     \
		PATH_OR_FAIL(path, -1);                                       \
		return real(ver, dfd, path_, st, flag);                       \
	}
FXSTATAT_LIKE(__fxstatat, struct stat)
FXSTATAT_LIKE(__fxstatat64, struct stat64)

EXPORT int faccessat(int dfd, const char *path, int mode, int flags)
{
	REAL(-1, int, "faccessat", int, const char *, int, int);
	PATH_OR_FAIL(path, -1);
	return real(dfd, path_, mode, flags);
}

EXPORT DIR *opendir(const char *path)
{
	REAL(NULL, DIR *, "opendir", const char *);
	PATH_OR_FAIL(path, NULL);
	return real(path_);
}

#define SCANDIR_LIKE(name, ent)                                                              \
	EXPORT int name(const char *restrict path, struct ent ***restrict list,              \
			int (*filter)(const struct ent *),                                   \
			int (*compar)(const struct ent **, const struct ent **))             \
	{                                                                                    \
		REAL(-1, int, #name, const char *, struct ent ***, int (*)(const struct ent *), \
		     int (*)(const struct ent **, const struct ent **));                    \
		PATH_OR_FAIL(path, -1);                                                      \
		return real(path_, list, filter, compar);                                    \
	}
SCANDIR_LIKE(scandir, dirent)
SCANDIR_LIKE(scandir64, dirent64)

EXPORT ssize_t readlink(const char *restrict path, char *restrict out, size_t n)
{
	REAL(-1, ssize_t, "readlink", const char *, char *, size_t);
	PATH_OR_FAIL(path, -1);
	return real(path_, out, n);
}

EXPORT ssize_t readlinkat(int dfd, const char *restrict path, char *restrict out, size_t n)
{
	REAL(-1, ssize_t, "readlinkat", int, const char *, char *, size_t);
	PATH_OR_FAIL(path, -1);
	return real(dfd, path_, out, n);
}

EXPORT char *realpath(const char *restrict path, char *restrict resolved)
{
	REAL(NULL, char *, "realpath", const char *, char *);
	PATH_OR_FAIL(path, NULL);
	return real(path_, resolved);
}

/* the _FORTIFY_SOURCE forms (UCX and libfabric import __realpath_chk):
 * glibc's call the inner function, not ours */
char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen);
EXPORT char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen)
{
	REAL(NULL, char *, "__realpath_chk", const char *, char *, size_t);
	PATH_OR_FAIL(path, NULL);
	return real(path_, resolved, resolvedlen);
}

ssize_t __readlink_chk(const char *path, char *out, size_t n, size_t outlen);
EXPORT ssize_t __readlink_chk(const char *path, char *out, size_t n, size_t outlen)
{
	REAL(-1, ssize_t, "__readlink_chk", const char *, char *, size_t, size_t);
	PATH_OR_FAIL(path, -1);
	return real(path_, out, n, outlen);
}

ssize_t __readlinkat_chk(int dfd, const char *path, char *out, size_t n, size_t outlen);
EXPORT ssize_t __readlinkat_chk(int dfd, const char *path, char *out, size_t n, size_t outlen)
{
	REAL(-1, ssize_t, "__readlinkat_chk", int, const char *, char *, size_t, size_t);
	PATH_OR_FAIL(path, -1);
	return real(dfd, path_, out, n, outlen);
}

EXPORT char *canonicalize_file_name(const char *path)
{
	REAL(NULL, char *, "canonicalize_file_name", const char *);
	PATH_OR_FAIL(path, NULL);
	return real(path_);
}

EXPORT int chdir(const char *path)
{
	REAL(-1, int, "chdir", const char *);
	PATH_OR_FAIL(path, -1);
	return real(path_);
}

/* ls -l asks for a file's ACL and security label by path */
#define GETXATTR_LIKE(name)                                                              \
	EXPORT ssize_t name(const char *path, const char *attr, void *value, size_t size) \
	{                                                                                \
		REAL(-1, ssize_t, #name, const char *, const char *, void *, size_t);        \
		PATH_OR_FAIL(path, -1);                                                  \
		return real(path_, attr, value, size);                                   \
	}
GETXATTR_LIKE(getxattr)
GETXATTR_LIKE(lgetxattr)

#define LISTXATTR_LIKE(name)                                               \
	EXPORT ssize_t name(const char *path, char *list, size_t size)     \
	{                                                                  \
		REAL(-1, ssize_t, #name, const char *, char *, size_t);        \
		PATH_OR_FAIL(path, -1);                                    \
		return real(path_, list, size);                            \
	}
LISTXATTR_LIKE(listxattr)
LISTXATTR_LIKE(llistxattr)
