/* An MPI program of ours for the middleware tests (issue #16): a ping-pong
 * between ranks 0 and 1 over sizes 1 B - 4 MiB, every byte checked on both
 * sides, then MPI_Allreduce and MPI_Alltoall over all ranks, their results
 * checked.  Rank 0 prints one line per size, "pingpong SIZE US MBPS"
 * (half a round trip, and the bandwidth that makes; the filling and
 * checking of buffers is not timed), then "PASS".  A
 * wrong byte makes the program print where and abort the job. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZE (4u << 20)

static unsigned char pattern(size_t i, unsigned size, int iter, int from)
{
	return (unsigned char)(i * 131u + size * 7u + (unsigned)iter * 29u + (unsigned)from * 101u);
}

static void fill(unsigned char *b, unsigned size, int iter, int from)
{
	for (size_t i = 0; i < size; i++)
		b[i] = pattern(i, size, iter, from);
}

static void check(const unsigned char *b, unsigned size, int iter, int from, const char *what)
{
	for (size_t i = 0; i < size; i++)
		if (b[i] != pattern(i, size, iter, from)) {
			fprintf(stderr, "FAIL: %s size %u iteration %d: byte %zu is %u, sent %u\n", what, size, iter, i,
				b[i], pattern(i, size, iter, from));
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
}

int main(int argc, char **argv)
{
	int rank, nranks;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	unsigned char *sbuf = malloc(MAX_SIZE), *rbuf = malloc(MAX_SIZE);
	if (!sbuf || !rbuf)
		MPI_Abort(MPI_COMM_WORLD, 1);

	for (unsigned size = 1; size <= MAX_SIZE; size *= 2) {
		int iters = size <= 65536 ? 200 : size <= (1u << 20) ? 40 : 10;
		double busy = 0;
		MPI_Barrier(MPI_COMM_WORLD);
		/* only the messages are timed: each side fills what it sends
		 * before, and checks what it got after */
		for (int it = 0; it < iters && rank < 2; it++) {
			if (rank == 0) {
				fill(sbuf, size, it, 0);
				double t = MPI_Wtime();
				MPI_Send(sbuf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD);
				MPI_Recv(rbuf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				if (it > 0)   /* the first round trip sets up, not timed */
					busy += MPI_Wtime() - t;
				check(rbuf, size, it, 1, "rank 0 received");
			} else {
				fill(sbuf, size, it, 1);
				MPI_Recv(rbuf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(sbuf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD);
				check(rbuf, size, it, 0, "rank 1 received");
			}
		}
		if (rank == 0) {
			double us = busy * 1e6 / (2.0 * (iters - 1));
			printf("pingpong %u %.2f %.1f\n", size, us, size / us);
		}
	}

	/* allreduce: each rank's vector is rank*1000 + i; the sum is known */
	enum { N = 4096 };
	static int64_t vin[N], vout[N];
	for (int i = 0; i < N; i++)
		vin[i] = (int64_t)rank * 1000 + i;
	MPI_Allreduce(vin, vout, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	for (int i = 0; i < N; i++) {
		int64_t want = 1000 * (int64_t)nranks * (nranks - 1) / 2 + (int64_t)nranks * i;
		if (vout[i] != want) {
			fprintf(stderr, "FAIL: allreduce [%d] = %lld, want %lld\n", i, (long long)vout[i], (long long)want);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
	}

	/* alltoall: block b of rank r goes to rank b and says (r, b, i) */
	const int per = 16384;   /* ints per block: 64 KiB */
	int *ain = malloc(sizeof(int) * (size_t)per * (size_t)nranks);
	int *aout = malloc(sizeof(int) * (size_t)per * (size_t)nranks);
	if (!ain || !aout)
		MPI_Abort(MPI_COMM_WORLD, 1);
	for (int b = 0; b < nranks; b++)
		for (int i = 0; i < per; i++)
			ain[b * per + i] = (rank << 24) ^ (b << 16) ^ i;
	MPI_Alltoall(ain, per, MPI_INT, aout, per, MPI_INT, MPI_COMM_WORLD);
	for (int from = 0; from < nranks; from++)
		for (int i = 0; i < per; i++)
			if (aout[from * per + i] != ((from << 24) ^ (rank << 16) ^ i)) {
				fprintf(stderr, "FAIL: alltoall rank %d block from %d [%d]\n", rank, from, i);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}

	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS: %d ranks, ping-pong 1 B - 4 MiB checked, allreduce and alltoall checked\n", nranks);
	free(ain);
	free(aout);
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return 0;
}
