/*
 * no_vm_read PROGRAM [ARGS...] -- run PROGRAM where process_vm_readv fails
 * with EPERM, as it does for a process that may not read its peer (a
 * non-dumpable peer, Yama's ptrace_scope, a container's seccomp profile).
 * Root may read any process, so the tests make the refusal this way: a
 * seccomp filter (no privilege needed with no_new_privs), inherited across
 * the exec, and by every child.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: no_vm_read PROGRAM [ARGS...]\n");
		return 2;
	}
#ifdef ARCH
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
		perror("no_vm_read: seccomp");
		return 2;
	}
#else
	fprintf(stderr, "no_vm_read: no seccomp filter for this architecture\n");
	return 77;
#endif
	execvp(argv[1], argv + 1);
	perror("no_vm_read: exec");
	return 127;
}
