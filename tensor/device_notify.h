/* sluice tensor — stream-completion notification: tells a CPU thread that
 * work it queued on a device stream has completed, without any CPU thread
 * blocking on the device (DESIGN.md section 7: "for CUDA, messages go out
 * only after the stream's event completes").
 *
 * An actor that queues a kernel on its stream calls sl__notifier_watch
 * (or _watch_completion after sl_act_defer) and returns; the notifier calls
 * back once the stream has reached that point. Two ways, one interface, so
 * they can be measured against each other (bench/cuda_notify.c, results in
 * bench/README.md):
 *
 *   SL__NOTIFY_POLL      watch records a pooled event on the stream; one
 *                        poller thread per notifier (per device) queries
 *                        the oldest event of each stream — later events of
 *                        a stream cannot complete first — spinning briefly
 *                        after activity, then sleeping with an exponential
 *                        back-off, and sleeping without timeout when
 *                        nothing is pending. Callbacks run on the poller.
 *   SL__NOTIFY_CALLBACK  watch adds a stream callback (cudaStreamAddCallback
 *                        for CUDA); the callback runs on the backend's
 *                        thread (CUDA's internal one). No thread of ours,
 *                        but the stream waits for the callback to return.
 *
 * Both are generic over the device interface (event_query, or
 * stream_add_callback), so tests drive them with a fake device whose
 * events complete after a delay. */
#ifndef SLUICE_DEVICE_NOTIFY_H
#define SLUICE_DEVICE_NOTIFY_H

#include <stdint.h>

#include <sluice/actor.h>

#include "device_iface.h"

typedef enum sl__notify_mode {
  SL__NOTIFY_POLL = 0,
  SL__NOTIFY_CALLBACK = 1,
} sl__notify_mode;

/* Zero fields take the defaults in brackets (poll mode only). */
typedef struct sl__notifier_config {
  sl__notify_mode mode;
  uint64_t spin_ns;      /* after a completion or a new watch, query
                            without sleeping this long [20 us] */
  uint64_t min_sleep_ns; /* then sleep between passes, first this long
                            [2 us] */
  uint64_t max_sleep_ns; /* doubling up to this [100 us] */
} sl__notifier_config;

typedef struct sl__notifier_stats {
  uint64_t watches;     /* accepted watches */
  uint64_t completions; /* callbacks made, failures included */
  uint64_t failures;    /* callbacks made with a device error */
  uint64_t queries;     /* event queries by the poller */
  uint64_t sleeps;      /* back-off sleeps of the poller */
  uint64_t idle_waits;  /* times the poller slept with nothing pending */
  uint64_t events;      /* events created for the pool */
} sl__notifier_stats;

typedef struct sl__notifier sl__notifier;

/* Creates a notifier for the streams of dev (which must outlive it); poll
 * mode starts its thread. SL_EINVAL for a bad config, SL_EUNSUPPORTED when
 * dev lacks event_query/event_record (poll) or stream_add_callback
 * (callback), SL_ENOMEM, SL_EINTERNAL (thread). */
sl_status sl__notifier_create(sl__device *dev, const sl__notifier_config *cfg,
                              sl__notifier **out);

/* Waits until every watch made so far has called back, then stops. So
 * callers abort their device work (or let it finish) first. NULL is a
 * no-op. No watch may be made concurrently with or after destroy. */
void sl__notifier_destroy(sl__notifier *n);

/* Calls fn(arg, st) exactly once after the work queued on s before this
 * call has completed: st is SL_OK, or the device error (that thread's
 * sl_last_error has its message). Watches of one stream call back in the
 * order they were made when made from one thread. fn runs on the poller
 * or the backend's callback thread — for the CPU device in callback mode,
 * on the caller's, before watch returns — and must not block or call the
 * device. Any thread may watch. On failure (event or callback could not be
 * queued: the backend's status) fn is not called. */
sl_status sl__notifier_watch(sl__notifier *n, sl__stream *s, sl__stream_fn fn,
                             void *arg);

/* sl__notifier_watch calling sl_completion_done(c, st): what an actor does
 * after queueing its kernel and calling sl_act_defer. */
sl_status sl__notifier_watch_completion(sl__notifier *n, sl__stream *s,
                                        sl_completion *c);

void sl__notifier_get_stats(sl__notifier *n, sl__notifier_stats *out);
sl__notify_mode sl__notifier_mode(const sl__notifier *n);
const char *sl__notify_mode_name(sl__notify_mode m);

#endif
