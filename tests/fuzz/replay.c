/* Runs a fuzz target's LLVMFuzzerTestOneInput on every file of the given
 * directories, without libFuzzer (any compiler): the seeds and the
 * regressions of tests/fuzz as an ordinary test.  A finding aborts. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
	unsigned runs = 0;

	LLVMFuzzerInitialize(&argc, &argv);
	for (int a = 1; a < argc; a++) {
		DIR *d = opendir(argv[a]);
		struct dirent *e;
		char *names[4096];
		unsigned n = 0;
		if (!d)
			continue;  /* an empty regressions directory is not checked in */
		while ((e = readdir(d)) && n < 4096)
			if (e->d_name[0] != '.')
				names[n++] = strdup(e->d_name);
		closedir(d);
		qsort(names, n, sizeof(names[0]), cmp);
		for (unsigned i = 0; i < n; i++) {
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[a], names[i]);
			FILE *f = fopen(path, "rb");
			static uint8_t buf[1 << 20];
			size_t len = f ? fread(buf, 1, sizeof(buf), f) : 0;
			if (!f) {
				fprintf(stderr, "replay: cannot read %s\n", path);
				return 1;
			}
			fclose(f);
			LLVMFuzzerTestOneInput(buf, len);
			runs++;
			free(names[i]);
		}
	}
	printf("replay: %u inputs, no finding\n", runs);
	return runs ? 0 : 1;
}
