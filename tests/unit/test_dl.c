/* Libraries opened on demand (util/dl.h): a table is filled with the
 * library's own functions, once; a missing library or function fails, and
 * keeps failing, without filling anything the caller would call.  And
 * (argv[1], the built liburoce.so) the library itself links none of the
 * libraries it opens on demand. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include "util/dl.h"

static int failures, checks;
#define CHECK(cond, name) do { checks++; if (!(cond)) { failures++; printf("not ok: %s\n", name); } else printf("ok: %s\n", name); } while (0)

#define Z_SYMS(X) X(crc32) X(adler32)
static struct { Z_SYMS(DL_SLOT) } z;
static const char *const z_names[] = { Z_SYMS(DL_NAME) };

int main(int argc, char **argv)
{
	struct dl_lib zl = { "libz.so.1", NULL, 0 };
	CHECK(dl_load(&zl, &z, z_names, DL_COUNT(z_names), "test") && zl.state == 1, "libz's table loads");
	/* this program links zlib: the table points at the copy it uses */
	CHECK(z.crc32 == crc32 && z.adler32 == adler32, "each slot is the library's function");
	CHECK(z.crc32(0, (const Bytef *)"a", 1) == 0xe8b7be43u, "and calls it");
	z.crc32 = NULL;
	CHECK(dl_load(&zl, &z, z_names, DL_COUNT(z_names), "test") && z.crc32 == NULL, "loaded once");

	struct { Z_SYMS(DL_SLOT) } none = { 0 };
	struct dl_lib nl = { "libno-such-library-uroce.so.9", "/nonexistent/libno-such-library-uroce.so.9", 0 };
	CHECK(!dl_load(&nl, &none, z_names, DL_COUNT(z_names), "test") && nl.state == -1 && !none.crc32,
	      "a missing library fails");
	CHECK(!dl_load(&nl, &none, z_names, DL_COUNT(z_names), "test"), "and keeps failing");

	static const char *const bad_names[] = { "crc32", "no_such_function_uroce" };
	struct dl_lib bl = { "libz.so.1", NULL, 0 };
	CHECK(!dl_load(&bl, &none, bad_names, 2, "test") && bl.state == -1, "a missing function fails the table");
	CHECK(!none.crc32 && !none.adler32, "and leaves no slot filled (crc32 was found before it)");

	/* the path the build found, where the soname is not found */
	struct { Z_SYMS(DL_SLOT) } byp = { 0 };
	struct dl_lib pl = { "libz-no-such-soname.so.1", NULL, 0 };
	Dl_info zi;
	CHECK(dladdr((void *)crc32, &zi) && zi.dli_fname, "libz's path");
	pl.path = zi.dli_fname;
	CHECK(dl_load(&pl, &byp, z_names, DL_COUNT(z_names), "test") && byp.crc32 == crc32, "by its path");

	if (argc > 1) {
		/* the built library's own DT_NEEDED entries (what ld.so loads
		 * with it, whatever this process has loaded already) */
		void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
		struct link_map *m = NULL;
		CHECK(h && dlinfo(h, RTLD_DI_LINKMAP, &m) == 0, "liburoce.so opens");
		const char *strtab = NULL;
		int needed = 0, linked = 0;
		for (const ElfW(Dyn) *d = m ? m->l_ld : NULL; d && d->d_tag != DT_NULL; d++)
			if (d->d_tag == DT_STRTAB)
				strtab = (const char *)d->d_un.d_ptr;
		for (const ElfW(Dyn) *d = m ? m->l_ld : NULL; strtab && d->d_tag != DT_NULL; d++) {
			if (d->d_tag != DT_NEEDED)
				continue;
			const char *lib = strtab + d->d_un.d_val;
			printf("# liburoce needs %s\n", lib);
			needed++;
			if (strstr(lib, "libpcap") || strstr(lib, "libxdp") || strstr(lib, "libbpf"))
				linked++;
		}
		CHECK(needed > 0, "liburoce.so's DT_NEEDED read");
		CHECK(linked == 0, "liburoce.so needs no libpcap, libxdp or libbpf");
	}
	printf("%d/%d checks passed\n", checks - failures, checks);
	return failures ? 1 : 0;
}
