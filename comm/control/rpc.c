/* One unary gRPC call from the client side, on the gRPC C core API: the
 * call gets its own completion queue, so any number of threads may call at
 * once on one channel, and its own deadline, so nothing waits forever.
 * Also: counted grpc_init/grpc_shutdown, channels with sluice's limits, and
 * "host:port" parsing. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "cp_int.h"

/* grpc_init and grpc_shutdown are reference counted by gRPC itself; the
 * count here lets tests check that every user gave its reference back. */
static atomic_int grpc_users;

void sl__cp_grpc_ref(void) {
  atomic_fetch_add(&grpc_users, 1);
  grpc_init();
}

void sl__cp_grpc_unref(void) {
  atomic_fetch_sub(&grpc_users, 1);
  grpc_shutdown();
}

int sl__cp_grpc_users(void) { return atomic_load(&grpc_users); }

sl_status sl__cp_addr_split(const char *addr, char *host, size_t host_size,
                            int *port) {
  if (!addr || !addr[0])
    return sl__fail(SL_EINVAL, "address: empty (expected host:port)");
  const char *colon;
  const char *h = addr;
  size_t hlen;
  if (addr[0] == '[') {
    const char *close = strchr(addr, ']');
    if (!close || close[1] != ':')
      return sl__fail(SL_EINVAL, "address '%s': expected [v6 address]:port",
                      addr);
    h = addr + 1;
    hlen = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon || strchr(addr, ':') != colon)
      return sl__fail(SL_EINVAL, "address '%s': expected host:port", addr);
    hlen = (size_t)(colon - addr);
  }
  if (hlen == 0)
    return sl__fail(SL_EINVAL, "address '%s': no host before the port", addr);
  if (hlen >= host_size)
    return sl__fail(SL_EINVAL, "address '%s': host longer than %zu bytes", addr,
                    host_size - 1);
  char *end;
  const char *p = colon + 1;
  long v = strtol(p, &end, 10);
  if (!*p || *end || p[0] == '-' || p[0] == '+' || v < 0 || v > 65535)
    return sl__fail(SL_EINVAL, "address '%s': port '%s' is not 0..65535", addr,
                    p);
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  *port = (int)v;
  return SL_OK;
}

sl_status sl__cp_channel_create(const char *target, size_t max_message,
                                grpc_channel **out) {
  *out = NULL;
  char host[256];
  int port;
  SL_CHECK(sl__cp_addr_split(target, host, sizeof host, &port));
  if (port == 0)
    return sl__fail(SL_EINVAL, "master address '%s': port 0", target);
  /* Reconnect quickly: a daemon may start before its master, and a master
   * that restarts should be found again within a heartbeat or two. */
  grpc_arg args[] = {
      {GRPC_ARG_INTEGER,
       GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
       {.integer = (int)max_message}},
      {GRPC_ARG_INTEGER,
       GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
       {.integer = (int)max_message}},
      {GRPC_ARG_INTEGER,
       GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
       {.integer = 100}},
      {GRPC_ARG_INTEGER, GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, {.integer = 100}},
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, {.integer = 1000}},
      /* Control calls are not idempotent (a barrier arrival, a report):
       * never resend one behind the caller's back. */
      {GRPC_ARG_INTEGER, GRPC_ARG_ENABLE_RETRIES, {.integer = 0}},
  };
  grpc_channel_args cargs = {SL_ARRAY_LEN(args), args};
  grpc_channel_credentials *creds = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(target, creds, &cargs);
  grpc_channel_credentials_release(creds);
  if (!ch)
    return sl__fail(SL_ECOMM, "master '%s': cannot create a channel", target);
  *out = ch;
  return SL_OK;
}

void sl__cp_channel_destroy(grpc_channel *ch) {
  if (ch) grpc_channel_destroy(ch);
}

static sl_status read_buffer(grpc_byte_buffer *bb, uint8_t **out, size_t *len) {
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb))
    return sl__fail(SL_ECOMM, "cannot read a received message");
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  size_t n = GRPC_SLICE_LENGTH(s);
  uint8_t *b = sl__malloc(n ? n : 1);
  if (!b) {
    grpc_slice_unref(s);
    return SL_ENOMEM;
  }
  if (n) memcpy(b, GRPC_SLICE_START_PTR(s), n);
  grpc_slice_unref(s);
  *out = b;
  *len = n;
  return SL_OK;
}

/* The master's own status from the "sl-status" trailer, or -1. */
static int trailer_status(const grpc_metadata_array *md) {
  for (size_t i = 0; i < md->count; i++) {
    const grpc_metadata *e = &md->metadata[i];
    if (GRPC_SLICE_LENGTH(e->key) != 9 ||
        memcmp(GRPC_SLICE_START_PTR(e->key), "sl-status", 9) != 0)
      continue;
    size_t n = GRPC_SLICE_LENGTH(e->value);
    const uint8_t *v = GRPC_SLICE_START_PTR(e->value);
    if (n == 0 || n > 3) return -1;
    int s = 0;
    for (size_t k = 0; k < n; k++) {
      if (v[k] < '0' || v[k] > '9') return -1;
      s = s * 10 + (v[k] - '0');
    }
    return s;
  }
  return -1;
}

sl_status sl__cp_rpc(grpc_channel *ch, const char *target, const char *path,
                     const char *what, const uint8_t *req, size_t len,
                     uint64_t timeout_ms, bool wait_ready, uint8_t **reply,
                     size_t *reply_len) {
  *reply = NULL;
  *reply_len = 0;
  if (timeout_ms > (uint64_t)INT64_MAX / 2)
    timeout_ms = (uint64_t)INT64_MAX / 2;
  gpr_timespec deadline =
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                   gpr_time_from_millis((int64_t)timeout_ms, GPR_TIMESPAN));
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  if (!cq) return sl__fail(SL_ECOMM, "cannot create a completion queue");
  grpc_call *call = grpc_channel_create_call(
      ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
      grpc_slice_from_static_string(path), NULL, deadline, NULL);
  grpc_slice body = grpc_slice_from_copied_buffer((const char *)req, len);
  grpc_byte_buffer *send = grpc_raw_byte_buffer_create(&body, 1);
  grpc_slice_unref(body);
  grpc_byte_buffer *recv = NULL;
  grpc_metadata_array initial_md, trailing_md;
  grpc_metadata_array_init(&initial_md);
  grpc_metadata_array_init(&trailing_md);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].flags = wait_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
  ops[5].data.recv_status_on_client.status = &code;
  ops[5].data.recv_status_on_client.status_details = &details;

  sl_status st = SL_OK;
  grpc_call_error ce = grpc_call_start_batch(call, ops, 6, (void *)1, NULL);
  if (ce != GRPC_CALL_OK) {
    st = sl__fail(SL_ECOMM, "%s: cannot start a call to the master at %s: %s",
                  what, target, grpc_call_error_to_string(ce));
  } else {
    /* The call's deadline bounds this wait: gRPC completes the batch with
     * DEADLINE_EXCEEDED at the latest then. */
    grpc_event ev = grpc_completion_queue_next(
        cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    SL_ASSERT(ev.type == GRPC_OP_COMPLETE && ev.tag == (void *)1);
    char *msg = grpc_slice_to_c_string(details);
    int mine = trailer_status(&trailing_md);
    if (code == GRPC_STATUS_OK) {
      if (!recv)
        st = sl__fail(SL_ECOMM,
                      "%s: the reply of the master at %s carried "
                      "no message",
                      what, target);
      else
        st = read_buffer(recv, reply, reply_len);
    } else if (mine > 0) {
      /* The master's own verdict and words. */
      st = sl__fail((sl_status)mine, "%s", msg);
    } else if (code == GRPC_STATUS_DEADLINE_EXCEEDED) {
      grpc_connectivity_state cs = grpc_channel_check_connectivity_state(ch, 0);
      if (cs != GRPC_CHANNEL_READY)
        st = sl__fail(SL_ETIMEOUT,
                      "%s: could not reach the master at %s within %llu ms "
                      "(is it running, and is the address right?)",
                      what, target, (unsigned long long)timeout_ms);
      else
        st = sl__fail(SL_ETIMEOUT,
                      "%s: no answer from the master at %s within %llu ms",
                      what, target, (unsigned long long)timeout_ms);
    } else if (code == GRPC_STATUS_UNAVAILABLE) {
      st = sl__fail(SL_ECOMM, "%s: the master at %s is unavailable: %s", what,
                    target, msg);
    } else {
      st = sl__fail(sl__cp_status_from_grpc(code),
                    "%s: the master at %s answered gRPC status %d: %s", what,
                    target, (int)code, msg);
    }
    gpr_free(msg);
  }
  if (recv) grpc_byte_buffer_destroy(recv);
  grpc_byte_buffer_destroy(send);
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&initial_md);
  grpc_metadata_array_destroy(&trailing_md);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  while (
      grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
          .type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  return st;
}
