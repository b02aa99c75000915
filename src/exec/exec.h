/* Execution: who runs the receive path, the transport for what came, QP
 * timers and deferred ACKs (docs/architecture.md, "Execution model").  The
 * only room that drives receiving and timers. */
#ifndef UROCE_EXEC_H
#define UROCE_EXEC_H

#include "../core/device.h"

/* The process's device, opened on first use (config, stats page, packet
 * I/O, engine); one reference per ibv_context. */
struct uroce_dev *uroce_dev_get(void);
void uroce_dev_put(struct uroce_dev *dev);
/* A copy of the open device's configuration, whose automatic address is
 * filled in; false while no device is open. */
bool uroce_dev_config(struct uroce_config *out);
/* Changes whenever a device opens or closes. */
unsigned uroce_dev_generation(void);
/* A device on `backend` (NULL: UDP and same-host rings), with or without
 * an engine thread: the white-box tests drive one by hand.  One device at
 * a time in a process (the stats page, the MR table and the log level are
 * the process's): EBUSY while another is open. */
struct uroce_net_ops;
struct uroce_dev *uroce_dev_open(const struct uroce_net_ops *backend, bool engine);
void uroce_dev_close(struct uroce_dev *dev);

/* engine.c: the engine thread.  engine_stop joins it if it runs and closes
 * whatever engine_start opened, even after engine_start failed. */
int engine_start(struct uroce_dev *dev);
void engine_stop(struct uroce_dev *dev);

/* progress.c */
/* Up to `budget` received packets, then what is due; returns the packets
 * handled.  exec_progress takes rx_lock; the _locked form needs it held. */
int exec_progress(struct uroce_dev *dev, int budget);
int exec_progress_locked(struct uroce_dev *dev, int budget);
/* From ibv_poll_cq on an empty CQ: process what has arrived, if no one else
 * is.  Returns the poll's time stamp (0: polls do not drive progress). */
uint64_t exec_poll_progress(struct uroce_dev *dev);
/* ibv_poll_cq returns completions: the application may stop polling now.
 * `now`: exec_poll_progress's stamp of this very poll, or 0. */
void exec_poll_found(struct uroce_dev *dev, uint64_t now);
/* Until when an application's spin holds the sockets (the engine stays
 * off them, and pollers receive): its last poll plus UROCE_POLL_GRACE_US,
 * or in a process that peers send requests to, plus as long as it lasted
 * (at least UROCE_POLL_SPIN_US). */
uint64_t exec_spin_held(const struct uroce_dev *dev, uint64_t now);
/* ibv_req_notify_cq: the application is about to block for an event, so
 * its spin, if any, is over: the sockets go back to the engine. */
void exec_poll_block(struct uroce_dev *dev);

#endif
