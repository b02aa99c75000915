/* The device where the system's tools look for one (issue #16): the files
 * the kernel would show for an RDMA device -- /sys/class/infiniband/uroce0
 * and its ports, /sys/class/infiniband_verbs/uverbs0, /dev/infiniband --
 * made as real files in a directory of the process's (tree.c), and the
 * libc calls that take a path sent there when the path names one of them
 * (paths.c).  docs/architecture.md, "The device in sysfs and /dev", says
 * why this and not a private mount namespace. */
#ifndef UROCE_SYSFS_H
#define UROCE_SYSFS_H

#include <stdbool.h>
#include <stddef.h>

/* Whether `path` names a file of the view: one of the prefixes, whole
 * components ("/sys/class/infiniband" or ".../infiniband/x", not
 * ".../infinibandx"). */
bool sysfs_path_in_view(const char *path);

/* The view's root as the device stands now (built, or built again when
 * its facts changed: the device opened and got its automatic address),
 * copied into root[n]; false (errno set) when it cannot be made. */
bool sysfs_view_root(char *root, size_t n);

#endif
