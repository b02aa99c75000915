/* mem/pull.c: a large pull shared with the helper thread.  Pulls from this
 * very process (process_vm_readv reads our own memory as any other's):
 *  - pull_iov_slice cuts the exact bytes of a range out of odd segments,
 *    and says 0 when the range is not there or needs more than it may use;
 *  - pull_copy places every byte, whatever the segments on either side,
 *    shared (split_min 1) or not (0), and makes one call per chunk when
 *    shared, counted between the caller and the helper;
 *  - a chunk that cannot be read fails its pull, and only that one;
 *  - two threads pulling at once (one has the helper, the other copies
 *    alone) and a forked child (no helper thread there until it makes
 *    its own, checked by the threads' names; not under ThreadSanitizer,
 *    which cannot start a thread there) place every byte too.
 * Which thread copied which chunk is the scheduler's business, so no check
 * depends on the helper having run; the bytes it copied are printed. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "mem/pull.h"

static int checks, failures;
#define CHECK(cond, name) do { checks++; if (!(cond)) { failures++; printf("not ok: %s\n", name); } } while (0)

#define SRC_LEN ((1u << 20) + 4093u)

static _Atomic uint64_t helper_total;

static void test_slice(void)
{
	char buf[100];
	struct iovec v[3] = { { buf, 10 }, { buf + 20, 30 }, { buf + 60, 5 } }, out[3];
	unsigned n = pull_iov_slice(v, 3, 5, 30, out, 3);
	CHECK(n == 2 && out[0].iov_base == buf + 5 && out[0].iov_len == 5 && out[1].iov_base == buf + 20 &&
	      out[1].iov_len == 25, "slice across two segments");
	n = pull_iov_slice(v, 3, 35, 5, out, 3);
	CHECK(n == 1 && out[0].iov_base == buf + 45 && out[0].iov_len == 5, "slice to a segment's end");
	n = pull_iov_slice(v, 3, 41, 3, out, 3);
	CHECK(n == 1 && out[0].iov_base == buf + 61 && out[0].iov_len == 3, "slice inside the last segment");
	n = pull_iov_slice(v, 3, 0, 45, out, 3);
	CHECK(n == 3 && out[2].iov_base == buf + 60 && out[2].iov_len == 5, "slice of everything");
	CHECK(pull_iov_slice(v, 3, 0, 45, out, 2) == 0, "slice that needs more segments than allowed: 0");
	CHECK(pull_iov_slice(v, 3, 40, 6, out, 3) == 0, "slice past the end: 0");
	CHECK(pull_iov_slice(v, 3, 45, 1, out, 3) == 0, "slice that starts past the end: 0");
}

/* Segments of odd sizes over [base, base + len): n of them, the last
 * taking what is left. */
static unsigned odd_segs(char *base, size_t len, struct iovec *v, unsigned n, unsigned seed)
{
	size_t off = 0, even = len / n;
	for (unsigned i = 0; i < n - 1; i++) {
		/* within a quarter of an even share either way */
		size_t l = even - even / 4 + (seed * 7919u + i * 104729u) % (even / 2 + 1);
		v[i].iov_base = base + off;
		v[i].iov_len = l;
		off += l;
	}
	v[n - 1].iov_base = base + off;
	v[n - 1].iov_len = len - off;
	return n;
}

/* One pull of len bytes of src into dst, both cut into odd segments. */
static bool pull_once(char *src, char *dst, size_t len, unsigned nl, unsigned nr, size_t split_min, unsigned seed,
		      struct pull_cost *cost)
{
	struct iovec l[PULL_MAX_LOCAL], r[PULL_MAX_REMOTE];
	for (size_t i = 0; i < len; i++)
		src[i] = (char)(i * 131u + seed * 17u);
	memset(dst, 0xee, len + 64);
	odd_segs(dst, len, l, nl, seed);
	odd_segs(src, len, r, nr, seed + 1);
	bool ok = pull_copy(getpid(), l, nl, r, nr, len, split_min, false, cost);
	helper_total += cost->helper_bytes;
	for (size_t i = 0; i < len; i++)
		if (dst[i] != (char)(i * 131u + seed * 17u))
			return false;
	for (size_t i = len; i < len + 64; i++)
		if (dst[i] != (char)0xee)
			return false;  /* a byte past the end */
	return ok;
}

static void test_copies(char *src, char *dst)
{
	struct pull_cost c;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t chunks = (SRC_LEN + PULL_CHUNK - 1) / PULL_CHUNK;
	bool all = true, calls = true;

	for (unsigned it = 0; it < 50; it++) {
		unsigned nl = 1 + it % PULL_MAX_LOCAL, nr = 1 + it % PULL_MAX_REMOTE;
		all &= pull_once(src, dst, SRC_LEN, nl, nr, 1, it, &c);
		/* shared (kicked) or, with a cpuset of one CPU, not at all */
		calls &= c.eventfd_calls ? c.readv_calls + c.helper_readv == chunks
					 : cpus < 2 && c.readv_calls == 1;
	}
	CHECK(all, "shared pulls of 1 MiB + 4093 bytes, 1-32 local and 1-8 remote segments: every byte in place");
	CHECK(calls, "a shared pull makes one call per 128 KiB chunk, the caller's and the helper's together");
	all = true;
	for (unsigned it = 0; it < 10; it++) {
		all &= pull_once(src, dst, SRC_LEN, 3, 2, 0, it, &c);
		all &= c.readv_calls == 1 && c.helper_readv == 0 && c.eventfd_calls == 0;
	}
	CHECK(all, "split_min 0: one call by the caller, every byte in place");
	all = pull_once(src, dst, 4096, 2, 2, 1, 3, &c) && c.readv_calls == 1 && !c.eventfd_calls;
	CHECK(all, "a pull of one chunk is never shared");
	all = pull_once(src, dst, SRC_LEN, 4, 4, SRC_LEN + 1, 5, &c) && c.readv_calls == 1 && !c.helper_readv;
	CHECK(all, "a pull below split_min is not shared");
}

static void test_failure(char *src, char *dst)
{
	struct pull_cost c;
	long page = sysconf(_SC_PAGESIZE);
	char *hole = mmap(NULL, (size_t)page * 4, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(hole != MAP_FAILED, "a region that cannot be read");
	if (hole == MAP_FAILED)
		return;
	/* the second remote segment is unreadable: the chunks there fail */
	struct iovec l = { dst, SRC_LEN }, r[2] = { { src, SRC_LEN - (size_t)page * 4 }, { hole, (size_t)page * 4 } };
	bool ok = pull_copy(getpid(), &l, 1, r, 2, SRC_LEN, 1, false, &c);
	CHECK(!ok, "a pull whose last chunk cannot be read fails");
	CHECK(pull_once(src, dst, SRC_LEN, 5, 3, 1, 9, &c), "the next pull is whole (the failure was that pull's)");
	munmap(hole, (size_t)page * 4);
}

struct racer {
	char *src, *dst;
	unsigned seed;
	bool ok;
};

static void *racer_main(void *arg)
{
	struct racer *r = arg;
	struct pull_cost c;
	r->ok = true;
	for (unsigned it = 0; it < 30; it++)
		r->ok &= pull_once(r->src, r->dst, SRC_LEN, 7, 3, 1, r->seed + it, &c);
	return NULL;
}

static void test_race(void)
{
	struct racer r[2];
	pthread_t t[2];
	for (int i = 0; i < 2; i++) {
		r[i].src = malloc(SRC_LEN);
		r[i].dst = malloc(SRC_LEN + 64);
		r[i].seed = 100u * (unsigned)i;
		pthread_create(&t[i], NULL, racer_main, &r[i]);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		free(r[i].src);
		free(r[i].dst);
	}
	CHECK(r[0].ok && r[1].ok, "two threads pulling at once: every byte of both in place");
}

/* Threads of this process named uroce-pull. */
static int helpers(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;
	while (d && (e = readdir(d))) {
		char path[300], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f && fgets(comm, sizeof comm, f) && !strncmp(comm, "uroce-pull", 10))
			n++;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

static void test_fork(char *src, char *dst)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	CHECK(cpus < 2 || helpers() == 1, "the parent has one helper thread");
	pid_t pid = fork();
	if (pid == 0) {
		struct pull_cost c;
		bool ok = true;
		int before = helpers();
		for (unsigned it = 0; it < 10; it++)
			ok &= pull_once(src, dst, SRC_LEN, 6, 2, 1, 40 + it, &c);
		/* no helper came with the fork; the child's first shared pull made its own */
		_exit(!ok ? 1 : before != 0 ? 2 : cpus >= 2 && helpers() != 1 ? 3 : 0);
	}
	int st = 0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st), "the forked child ran");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the forked child finished (exit 0)");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 1, "a forked child's shared pulls: every byte in place");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 2 && WEXITSTATUS(st) != 3,
	      "a forked child starts with no helper and makes its own");
}

int main(void)
{
	char *src = malloc(SRC_LEN), *dst = malloc(SRC_LEN + 64);
	if (!src || !dst)
		return 1;
	test_slice();
	test_copies(src, dst);
	test_failure(src, dst);
	test_race();
#ifdef __SANITIZE_THREAD__
	/* ThreadSanitizer cannot start threads in the child of a process that
	 * has some ("starting new threads after multi-threaded fork is not
	 * supported"): the plain and ASan runs check the fork */
	printf("fork: not checked under ThreadSanitizer\n");
	(void)test_fork;
#else
	test_fork(src, dst);
#endif
	printf("pull helper copied %llu bytes of the shared pulls\n", (unsigned long long)atomic_load(&helper_total));
	printf("%d checks, %d failures\n", checks, failures);
	free(src);
	free(dst);
	return failures ? 1 : 0;
}
