/* The control plane's wire: the method table, protobuf-c (de)serialization
 * with every field checked, and the mapping between sl_status and gRPC
 * status codes. Nothing here touches gRPC or OpenSSL, so the fuzz target
 * (tests/fuzz/fuzz_control.c) links it alone.
 *
 * Why check fields here rather than where they are used: the master's
 * state machine and the client then only ever see messages whose nonces
 * have their length, whose names are bounded and printable and whose enums
 * and ranks are in range, so a hostile or truncated message is one
 * SL_EINVAL at the door ("malformed message: JoinRequest.client_nonce: 5
 * bytes, expected 32"),
 * never an out-of-range index later. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_int.h"

#define SERVICE "/sluice.cp.Control/"
#define METHOD(n, req, rep)                                                    \
  {                                                                            \
    n, SERVICE n, &sluice__cp__##req##__descriptor,                            \
        &sluice__cp__##rep##__descriptor                                       \
  }

const sl__cp_method_desc sl__cp_methods[SL__CP_N_METHODS] = {
    [SL__CP_HELLO] = METHOD("Hello", hello_request, hello_reply),
    [SL__CP_JOIN] = METHOD("Join", join_request, join_reply),
    [SL__CP_MEMBERS] = METHOD("Members", members_request, members_reply),
    [SL__CP_HEARTBEAT] =
        METHOD("Heartbeat", heartbeat_request, heartbeat_reply),
    [SL__CP_LEAVE] = METHOD("Leave", leave_request, empty),
    [SL__CP_KV_PUT] = METHOD("KvPut", kv_put, empty),
    [SL__CP_KV_GET] = METHOD("KvGet", kv_get, value),
    [SL__CP_BARRIER] = METHOD("Barrier", barrier_request, empty),
    [SL__CP_PLAN_SUBMIT] = METHOD("PlanSubmit", plan_submit, empty),
    [SL__CP_PLAN_FETCH] = METHOD("PlanFetch", plan_fetch, value),
    [SL__CP_JOB_START] = METHOD("JobStart", job_request, job_status),
    [SL__CP_JOB_STOP] = METHOD("JobStop", job_request, job_status),
    [SL__CP_JOB_REPORT] = METHOD("JobReport", job_report, job_status),
    [SL__CP_JOB_STATUS] = METHOD("JobStatus", job_status_request, job_status),
    [SL__CP_RESULT_PUT] = METHOD("ResultPut", result_put, empty),
    [SL__CP_RESULT_GET] = METHOD("ResultGet", result_get, value),
};

int sl__cp_method_find(const char *path, size_t len) {
  for (int i = 0; i < SL__CP_N_METHODS; i++) {
    const char *p = sl__cp_methods[i].path;
    if (strlen(p) == len && memcmp(p, path, len) == 0) return i;
  }
  return -1;
}

const ProtobufCMessageDescriptor *const sl__cp_messages[] = {
    &sluice__cp__envelope__descriptor,
    &sluice__cp__hello_request__descriptor,
    &sluice__cp__hello_reply__descriptor,
    &sluice__cp__join_request__descriptor,
    &sluice__cp__join_reply__descriptor,
    &sluice__cp__member__descriptor,
    &sluice__cp__members_request__descriptor,
    &sluice__cp__members_reply__descriptor,
    &sluice__cp__heartbeat_request__descriptor,
    &sluice__cp__heartbeat_reply__descriptor,
    &sluice__cp__leave_request__descriptor,
    &sluice__cp__empty__descriptor,
    &sluice__cp__kv_put__descriptor,
    &sluice__cp__kv_get__descriptor,
    &sluice__cp__value__descriptor,
    &sluice__cp__barrier_request__descriptor,
    &sluice__cp__plan_submit__descriptor,
    &sluice__cp__plan_fetch__descriptor,
    &sluice__cp__job_request__descriptor,
    &sluice__cp__job_report__descriptor,
    &sluice__cp__job_status_request__descriptor,
    &sluice__cp__job_status__descriptor,
    &sluice__cp__result_put__descriptor,
    &sluice__cp__result_get__descriptor,
};
const size_t sl__cp_n_messages = SL_ARRAY_LEN(sl__cp_messages);

/* ---- field checks ------------------------------------------------------ */

#define MAX_VERSION 64
#define MAX_TEXT 1024 /* devices, messages, reasons */
#define MAX_ADDR 256
#define MAX_STATUS 255 /* sl_status values on the wire */

static sl_status bad(const ProtobufCMessage *m, const char *field,
                     const char *fmt, ...) SL__PRINTF(3, 4);
static sl_status bad(const ProtobufCMessage *m, const char *field,
                     const char *fmt, ...) {
  char why[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return sl__fail(SL_EINVAL, "%s.%s: %s", m->descriptor->short_name, field,
                  why);
}

/* Text for log lines and messages: bounded, no control characters. */
static sl_status text(const ProtobufCMessage *m, const char *field,
                      const char *s, size_t max, bool nonempty) {
  size_t n = strnlen(s, max + 1);
  if (n > max) return bad(m, field, "longer than %zu bytes", max);
  if (nonempty && n == 0) return bad(m, field, "empty");
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
      return bad(m, field, "control character 0x%02x at byte %zu",
                 (unsigned)(unsigned char)s[i], i);
  return SL_OK;
}

static sl_status exact(const ProtobufCMessage *m, const char *field,
                       ProtobufCBinaryData b, size_t want, bool allow_empty) {
  if (b.len == want || (allow_empty && b.len == 0)) return SL_OK;
  return bad(m, field, "%zu bytes, expected %zu", b.len, want);
}

static sl_status range(const ProtobufCMessage *m, const char *field, int64_t v,
                       int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return SL_OK;
  return bad(m, field, "%lld is outside [%lld, %lld]", (long long)v,
             (long long)lo, (long long)hi);
}

#define TRY(call)                                                              \
  do {                                                                         \
    sl_status st__ = (call);                                                   \
    if (st__ != SL_OK) return st__;                                            \
  } while (0)

static sl_status check_member(const Sluice__Cp__Member *x) {
  const ProtobufCMessage *m = &x->base;
  TRY(range(m, "rank", x->rank, 0, SL__CP_MAX_NODES - 1));
  TRY(range(m, "state", x->state, SLUICE__CP__MEMBER_STATE__EMPTY,
            SLUICE__CP__MEMBER_STATE__LEFT));
  TRY(text(m, "devices", x->devices, MAX_TEXT, false));
  TRY(text(m, "data_addr", x->data_addr, MAX_ADDR, false));
  TRY(text(m, "host", x->host, MAX_ADDR, false));
  return SL_OK;
}

static sl_status check_job_status(const Sluice__Cp__JobStatus *x) {
  const ProtobufCMessage *m = &x->base;
  TRY(range(m, "state", x->state, SLUICE__CP__JOB_STATE__JOB_NONE,
            SLUICE__CP__JOB_STATE__STOPPED));
  TRY(range(m, "status", x->status, 0, MAX_STATUS));
  TRY(text(m, "message", x->message, MAX_TEXT, false));
  TRY(range(m, "failed_node", x->failed_node, -1, SL__CP_MAX_NODES - 1));
  TRY(range(m, "reported", x->reported, 0, SL__CP_MAX_NODES));
  return SL_OK;
}

sl_status sl__cp_check(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  if (d == &sluice__cp__envelope__descriptor) {
    const Sluice__Cp__Envelope *x = (const void *)m;
    return exact(m, "mac", x->mac, SL__CP_MAC_BYTES, true);
  }
  if (d == &sluice__cp__hello_request__descriptor) {
    const Sluice__Cp__HelloRequest *x = (const void *)m;
    return text(m, "version", x->version, MAX_VERSION, false);
  }
  if (d == &sluice__cp__hello_reply__descriptor) {
    const Sluice__Cp__HelloReply *x = (const void *)m;
    TRY(text(m, "version", x->version, MAX_VERSION, false));
    TRY(exact(m, "nonce", x->nonce, SL__CP_NONCE_BYTES, false));
    return range(m, "nnodes", x->nnodes, 1, SL__CP_MAX_NODES);
  }
  if (d == &sluice__cp__join_request__descriptor) {
    const Sluice__Cp__JoinRequest *x = (const void *)m;
    TRY(text(m, "version", x->version, MAX_VERSION, false));
    TRY(exact(m, "server_nonce", x->server_nonce, SL__CP_NONCE_BYTES, false));
    TRY(exact(m, "client_nonce", x->client_nonce, SL__CP_NONCE_BYTES, false));
    TRY(range(m, "role", x->role, SLUICE__CP__ROLE__NODE,
              SLUICE__CP__ROLE__CLIENT));
    TRY(range(m, "rank", x->rank, -1, SL__CP_MAX_NODES - 1));
    TRY(text(m, "devices", x->devices, MAX_TEXT, false));
    TRY(text(m, "data_addr", x->data_addr, MAX_ADDR, false));
    return text(m, "host", x->host, MAX_ADDR, false);
  }
  if (d == &sluice__cp__join_reply__descriptor) {
    const Sluice__Cp__JoinReply *x = (const void *)m;
    TRY(range(m, "member", x->member, 1, UINT32_MAX));
    TRY(range(m, "rank", x->rank, -1, SL__CP_MAX_NODES - 1));
    TRY(range(m, "nnodes", x->nnodes, 1, SL__CP_MAX_NODES));
    TRY(range(m, "heartbeat_ms", x->heartbeat_ms, 1, 3600000));
    return range(m, "timeout_ms", x->timeout_ms, x->heartbeat_ms, 3600000);
  }
  if (d == &sluice__cp__member__descriptor)
    return check_member((const void *)m);
  if (d == &sluice__cp__members_reply__descriptor) {
    const Sluice__Cp__MembersReply *x = (const void *)m;
    TRY(range(m, "members", (int64_t)x->n_members, 1, SL__CP_MAX_NODES));
    for (size_t i = 0; i < x->n_members; i++) {
      sl_status st = check_member(x->members[i]);
      if (st != SL_OK)
        return sl__fail_context(st, "MembersReply.members[%zu]: ", i);
      if (x->members[i]->rank != (int32_t)i)
        return bad(m, "members", "entry %zu holds rank %d", i,
                   (int)x->members[i]->rank);
    }
    return SL_OK;
  }
  if (d == &sluice__cp__heartbeat_reply__descriptor) {
    const Sluice__Cp__HeartbeatReply *x = (const void *)m;
    TRY(range(m, "lost", (int64_t)x->n_lost, 0, SL__CP_MAX_NODES));
    for (size_t i = 0; i < x->n_lost; i++)
      TRY(range(m, "lost", x->lost[i], 0, SL__CP_MAX_NODES - 1));
    return SL_OK;
  }
  if (d == &sluice__cp__leave_request__descriptor) {
    const Sluice__Cp__LeaveRequest *x = (const void *)m;
    return text(m, "reason", x->reason, MAX_TEXT, false);
  }
  if (d == &sluice__cp__kv_put__descriptor) {
    const Sluice__Cp__KvPut *x = (const void *)m;
    return text(m, "key", x->key, SL__CP_MAX_NAME, true);
  }
  if (d == &sluice__cp__kv_get__descriptor) {
    const Sluice__Cp__KvGet *x = (const void *)m;
    return text(m, "key", x->key, SL__CP_MAX_NAME, true);
  }
  if (d == &sluice__cp__barrier_request__descriptor) {
    const Sluice__Cp__BarrierRequest *x = (const void *)m;
    return text(m, "name", x->name, SL__CP_MAX_NAME, true);
  }
  if (d == &sluice__cp__plan_submit__descriptor) {
    const Sluice__Cp__PlanSubmit *x = (const void *)m;
    return range(m, "plans", (int64_t)x->n_plans, 1, SL__CP_MAX_NODES);
  }
  if (d == &sluice__cp__plan_fetch__descriptor) {
    const Sluice__Cp__PlanFetch *x = (const void *)m;
    return range(m, "node", x->node, 0, SL__CP_MAX_NODES - 1);
  }
  if (d == &sluice__cp__job_request__descriptor) {
    const Sluice__Cp__JobRequest *x = (const void *)m;
    return text(m, "reason", x->reason, MAX_TEXT, false);
  }
  if (d == &sluice__cp__job_report__descriptor) {
    const Sluice__Cp__JobReport *x = (const void *)m;
    TRY(range(m, "status", x->status, 0, MAX_STATUS));
    return text(m, "message", x->message, MAX_TEXT, false);
  }
  if (d == &sluice__cp__job_status_request__descriptor) {
    const Sluice__Cp__JobStatusRequest *x = (const void *)m;
    return range(m, "until", x->until, SLUICE__CP__JOB_STATE__JOB_NONE,
                 SLUICE__CP__JOB_STATE__SUCCEEDED);
  }
  if (d == &sluice__cp__job_status__descriptor)
    return check_job_status((const void *)m);
  if (d == &sluice__cp__result_put__descriptor) {
    const Sluice__Cp__ResultPut *x = (const void *)m;
    return text(m, "key", x->key, SL__CP_MAX_NAME, true);
  }
  if (d == &sluice__cp__result_get__descriptor) {
    const Sluice__Cp__ResultGet *x = (const void *)m;
    return text(m, "key", x->key, SL__CP_MAX_NAME, true);
  }
  /* MembersRequest, HeartbeatRequest, Empty, Value: any values. */
  return SL_OK;
}

/* Unknown fields are dropped, in nested messages too: nothing reads them,
 * and protobuf-c keeps some that it would not accept back (a field number 0
 * written in a non-canonical varint re-encodes as bytes its own decoder
 * refuses), so keeping them would break "what decodes, re-encodes". The
 * unpacked message came from the default allocator, malloc. */
static void drop_unknown(ProtobufCMessage *m) {
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    free(m->unknown_fields[i].data);
  free(m->unknown_fields);
  m->unknown_fields = NULL;
  m->n_unknown_fields = 0;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  for (unsigned f = 0; f < d->n_fields; f++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[f];
    if (fd->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    char *at = (char *)m + fd->offset;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(size_t *)((char *)m + fd->quantifier_offset);
      ProtobufCMessage **sub = *(ProtobufCMessage ***)at;
      for (size_t k = 0; k < n; k++)
        if (sub[k]) drop_unknown(sub[k]);
    } else {
      ProtobufCMessage *sub = *(ProtobufCMessage **)at;
      if (sub) drop_unknown(sub);
    }
  }
}

sl_status sl__cp_decode(const ProtobufCMessageDescriptor *d, const uint8_t *buf,
                        size_t len, ProtobufCMessage **out) {
  *out = NULL;
  /* protobuf-c reads nothing through a NULL buffer of length 0, but keep
   * sanitizers away from the question. */
  static const uint8_t none[1];
  ProtobufCMessage *m =
      protobuf_c_message_unpack(d, NULL, len, buf ? buf : none);
  if (!m)
    return sl__fail(SL_EINVAL,
                    "malformed %s: %zu bytes that do not decode (truncated "
                    "or not a %s)",
                    d->short_name, len, d->short_name);
  drop_unknown(m);
  sl_status st = sl__cp_check(m);
  if (st != SL_OK) {
    protobuf_c_message_free_unpacked(m, NULL);
    return sl__fail_context(st, "malformed message: ");
  }
  *out = m;
  return SL_OK;
}

void sl__cp_msg_free(ProtobufCMessage *m) {
  if (m) protobuf_c_message_free_unpacked(m, NULL);
}

sl_status sl__cp_pack(const ProtobufCMessage *m, uint8_t **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *b = sl__malloc(n ? n : 1);
  if (!b) return SL_ENOMEM;
  size_t w = protobuf_c_message_pack(m, b);
  SL_ASSERT(w == n);
  *buf = b;
  *len = n;
  return SL_OK;
}

/* ---- statuses ---------------------------------------------------------- */

/* gRPC's status codes (grpc/status.h), spelled out so that this file needs
 * no gRPC header. */
enum {
  G_OK = 0,
  G_CANCELLED = 1,
  G_UNKNOWN = 2,
  G_INVALID_ARGUMENT = 3,
  G_DEADLINE_EXCEEDED = 4,
  G_NOT_FOUND = 5,
  G_ALREADY_EXISTS = 6,
  G_PERMISSION_DENIED = 7,
  G_RESOURCE_EXHAUSTED = 8,
  G_FAILED_PRECONDITION = 9,
  G_ABORTED = 10,
  G_OUT_OF_RANGE = 11,
  G_UNIMPLEMENTED = 12,
  G_INTERNAL = 13,
  G_UNAVAILABLE = 14,
  G_DATA_LOSS = 15,
  G_UNAUTHENTICATED = 16,
};

int sl__cp_status_to_grpc(sl_status st) {
  switch (st) {
  case SL_OK: return G_OK;
  case SL_EINVAL: return G_INVALID_ARGUMENT;
  case SL_ENOMEM: return G_RESOURCE_EXHAUSTED;
  case SL_EUNSUPPORTED: return G_FAILED_PRECONDITION;
  case SL_ESTATE: return G_FAILED_PRECONDITION;
  case SL_ETIMEOUT: return G_DEADLINE_EXCEEDED;
  case SL_EABORTED: return G_ABORTED;
  case SL_ECOMM: return G_UNAVAILABLE;
  case SL_EAUTH: return G_UNAUTHENTICATED;
  case SL_ENOTFOUND: return G_NOT_FOUND;
  default: return G_INTERNAL;
  }
}

sl_status sl__cp_status_from_grpc(int code) {
  switch (code) {
  case G_OK: return SL_OK;
  case G_INVALID_ARGUMENT:
  case G_OUT_OF_RANGE: return SL_EINVAL;
  case G_DEADLINE_EXCEEDED: return SL_ETIMEOUT;
  case G_NOT_FOUND: return SL_ENOTFOUND;
  case G_ALREADY_EXISTS:
  case G_FAILED_PRECONDITION: return SL_ESTATE;
  case G_PERMISSION_DENIED:
  case G_UNAUTHENTICATED: return SL_EAUTH;
  case G_RESOURCE_EXHAUSTED: return SL_ENOMEM;
  case G_ABORTED: return SL_EABORTED;
  case G_UNIMPLEMENTED: return SL_EUNSUPPORTED;
  case G_CANCELLED:
  case G_UNAVAILABLE:
  case G_UNKNOWN:
  case G_DATA_LOSS: return SL_ECOMM;
  default: return SL_EINTERNAL;
  }
}
