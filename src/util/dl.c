/* Libraries opened on demand (dl.h). */
#include "dl.h"
#include "log.h"
#include <dlfcn.h>
#include <pthread.h>

static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;

bool dl_load(struct dl_lib *lib, void *slots, const char *const *names, unsigned n, const char *who)
{
	int st = atomic_load_explicit(&lib->state, memory_order_acquire);
	if (st)
		return st > 0;
	pthread_mutex_lock(&dl_lock);
	if (!lib->state) {
		/* RTLD_LOCAL: its symbols stay out of the application's
		 * namespace; an application that loaded it itself shares the copy */
		void *h = dlopen(lib->soname, RTLD_NOW | RTLD_LOCAL);
		if (!h && lib->path)
			h = dlopen(lib->path, RTLD_NOW | RTLD_LOCAL);  /* a library outside ld.so's paths */
		void **fn = slots;  /* the slots are function pointers, as dlsym's */
		st = 1;
		if (!h) {
			LOG_ERR("uroce: %s: cannot open %s: %s", who, lib->soname, dlerror());
			st = -1;
		}
		for (unsigned i = 0; st > 0 && i < n; i++)
			if (!(fn[i] = dlsym(h, names[i]))) {
				LOG_ERR("uroce: %s: %s has no %s", who, lib->soname, names[i]);
				st = -1;
			}
		if (st < 0) {
			for (unsigned i = 0; i < n; i++)
				fn[i] = NULL;  /* none left pointing into a closed library */
			if (h)
				dlclose(h);
		}
		atomic_store_explicit(&lib->state, st, memory_order_release);
	}
	st = lib->state;
	pthread_mutex_unlock(&dl_lock);
	return st > 0;
}
