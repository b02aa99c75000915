/* The congestion window (cc/cc.h, cc/aimd.c): the default keeps the same
 * bytes in flight at every path MTU, UROCE_WINDOW overrides it, and AIMD
 * halves on loss, drops to its floor on a timeout, grows back, and never
 * goes past the window it was given -- even one set below its floor. */
#include <stdio.h>
#include "cc/cc.h"

static int failures, checks;
#define CHECK(cond, name) do { checks++; if (!(cond)) { failures++; printf("not ok: %s\n", name); } } while (0)

int main(void)
{
	CHECK(cc_window_max(0, 4096) == 128 && cc_window_max(0, 2048) == 256 && cc_window_max(0, 1024) == 512 &&
	      cc_window_max(0, 512) == 1024 && cc_window_max(0, 256) == 2048, "default: 512 KiB of packets");
	CHECK(cc_window_max(0, 0) == CC_WINDOW_MIN, "no path MTU yet: the floor");
	CHECK(cc_window_max(16, 1024) == 16 && cc_window_max(4096, 4096) == 4096 && cc_window_max(1, 256) == 1,
	      "UROCE_WINDOW overrides the default");

	struct uroce_cc cc = { 0 };
	cc_init(&cc, 512);
	CHECK(cc_window(&cc) == 512, "starts with the whole window");
	cc_on_loss(&cc, false);
	CHECK(cc_window(&cc) == 256, "a loss halves it");
	cc_on_loss(&cc, true);
	CHECK(cc_window(&cc) == 4, "a timeout drops it to the floor");
	cc_on_ack(&cc, 60);
	CHECK(cc_window(&cc) == 64, "slow start: +1 a packet acknowledged, to the threshold");
	for (int i = 0; i < 10000; i++)
		cc_on_ack(&cc, 64);
	CHECK(cc_window(&cc) == 512, "grows back to the window, not past it");

	cc_init(&cc, 2);
	cc_on_loss(&cc, false);
	CHECK(cc_window(&cc) <= 2, "a loss never raises a window set below the floor");
	cc_on_loss(&cc, true);
	CHECK(cc_window(&cc) <= 2, "nor does a timeout");

	printf("%d passed, %d failed\n", checks - failures, failures);
	return failures != 0;
}
