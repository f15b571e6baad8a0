/* The master's jobs: per-node plan blobs, the job's state, the nodes'
 * reports and the results a job leaves behind. Runs on the server's
 * completion-queue thread only (master.c says why).
 *
 *   SUBMITTED --start--> RUNNING --every node reports OK--> SUCCEEDED
 *       |                   |---a node reports a failure--> FAILED
 *       |                   |---a node is lost or leaves--> FAILED
 *       +-------stop--------+---stop, or its client lost--> STOPPED
 *
 * The first failure wins and names its node. Finished jobs stay (with
 * their results) until CP_MAX_FINISHED_JOBS newer ones have finished. */
#include <stdio.h>
#include <string.h>

#include "cp_int.h"

struct cp_job {
  uint64_t id;
  sl__cp_job_state state;
  sl_status status;
  int failed_node;
  char message[512];
  int n_plans;
  ProtobufCBinaryData *plans; /* owned copies */
  bool *reported;             /* per rank */
  int n_reported;
  uint32_t submitter; /* member id */
  uint64_t finished;  /* order of finishing; 0 while not finished */
  cp_kv results;
  cp_job *next;
};

static bool terminal(sl__cp_job_state s) { return s >= SL__CP_JOB_SUCCEEDED; }

static void job_free(cp_job *j) {
  for (int i = 0; i < j->n_plans; i++)
    sl__free(j->plans[i].data);
  sl__free(j->plans);
  sl__free(j->reported);
  sl__cp_kv_free(&j->results);
  sl__free(j);
}

static void job_remove(sl__cp_master *m, cp_job *j) {
  for (cp_job **p = &m->jobs; *p; p = &(*p)->next)
    if (*p == j) {
      *p = j->next;
      break;
    }
  job_free(j);
}

void sl__cp_jobs_free(sl__cp_master *m) {
  while (m->jobs)
    job_remove(m, m->jobs);
}

static cp_job *job_find(sl__cp_master *m, uint64_t id) {
  for (cp_job *j = m->jobs; j; j = j->next)
    if (j->id == id) return j;
  return NULL;
}

/* Keeps the newest CP_MAX_FINISHED_JOBS finished jobs. */
static void evict(sl__cp_master *m) {
  for (;;) {
    int n = 0;
    cp_job *oldest = NULL;
    for (cp_job *j = m->jobs; j; j = j->next)
      if (j->finished) {
        n++;
        if (!oldest || j->finished < oldest->finished) oldest = j;
      }
    if (n <= CP_MAX_FINISHED_JOBS) return;
    job_remove(m, oldest);
  }
}

static void finish(sl__cp_master *m, cp_job *j, sl__cp_job_state state,
                   sl_status st, int node, const char *msg) {
  j->state = state;
  j->status = st;
  j->failed_node = node;
  snprintf(j->message, sizeof j->message, "%s", msg);
  j->finished = ++m->job_seq;
  if (state == SL__CP_JOB_FAILED) {
    sl__cp_master_count(m, &m->stats.jobs_failed, 1);
    SL_WARN("control plane: job %llu failed: %s", (unsigned long long)j->id,
            msg);
  } else {
    SL_INFO("control plane: job %llu %s%s%s", (unsigned long long)j->id,
            sl__cp_job_state_name(state), msg[0] ? ": " : "", msg);
  }
  sl__cp_wake(m, CP_WAIT_JOB);
  sl__cp_wake(m, CP_WAIT_RESULT);
  /* j is the newest finished job, so it stays; the list stays linked. */
  evict(m);
}

static void reply_status(sl__cp_call *c, const cp_job *j) {
  Sluice__Cp__JobStatus r = SLUICE__CP__JOB_STATUS__INIT;
  r.job = j->id;
  r.state = (Sluice__Cp__JobState)j->state;
  r.status = (uint32_t)j->status;
  r.message = (char *)j->message;
  r.failed_node = j->failed_node;
  r.reported = (uint32_t)j->n_reported;
  sl__cp_call_reply(c, &r.base);
}

static cp_job *need_job(sl__cp_call *c, sl__cp_master *m, uint64_t id) {
  cp_job *j = job_find(m, id);
  if (!j)
    sl__cp_call_fail(c, SL_ENOTFOUND, "%s: no job %llu",
                     sl__cp_methods[c->method].name, (unsigned long long)id);
  return j;
}

/* ---- plans ------------------------------------------------------------- */

void sl__cp_do_plan_submit(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__PlanSubmit *q = (const void *)c->body;
  if ((int)q->n_plans != m->nnodes) {
    sl__cp_call_fail(c, SL_EINVAL,
                     "PlanSubmit: job %llu has %zu plans for %d nodes",
                     (unsigned long long)q->job, q->n_plans, m->nnodes);
    return;
  }
  cp_job *old = job_find(m, q->job);
  if (old && !terminal(old->state)) {
    sl__cp_call_fail(c, SL_ESTATE, "PlanSubmit: job %llu is %s",
                     (unsigned long long)q->job,
                     sl__cp_job_state_name(old->state));
    return;
  }
  cp_job *j;
  if (SL_NEW(j) != SL_OK) goto nomem;
  j->plans = sl__calloc(q->n_plans, sizeof *j->plans);
  j->reported = sl__calloc((size_t)m->nnodes, sizeof *j->reported);
  if (!j->plans || !j->reported) goto nomem;
  for (size_t i = 0; i < q->n_plans; i++, j->n_plans++) {
    size_t n = q->plans[i].len;
    j->plans[i].data = sl__malloc(n ? n : 1);
    if (!j->plans[i].data) goto nomem;
    if (n) memcpy(j->plans[i].data, q->plans[i].data, n);
    j->plans[i].len = n;
  }
  j->id = q->job;
  j->state = SL__CP_JOB_SUBMITTED;
  j->failed_node = -1;
  j->submitter = c->member;
  sl__cp_kv_init(&j->results);
  if (old) job_remove(m, old);
  j->next = m->jobs;
  m->jobs = j;
  Sluice__Cp__Empty r = SLUICE__CP__EMPTY__INIT;
  sl__cp_call_reply(c, &r.base);
  sl__cp_wake(m, CP_WAIT_PLAN);
  sl__cp_wake(m, CP_WAIT_JOB);
  return;
nomem:
  if (j) job_free(j);
  sl__cp_call_fail(c, SL_ENOMEM, "PlanSubmit: out of memory");
}

bool sl__cp_do_plan_fetch(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__PlanFetch *q = (const void *)c->body;
  if ((int)q->node >= m->nnodes) {
    sl__cp_call_fail(c, SL_EINVAL, "PlanFetch: node %u is outside 0..%d",
                     (unsigned)q->node, m->nnodes - 1);
    return true;
  }
  cp_job *j = job_find(m, q->job);
  if (!j) return false;
  Sluice__Cp__Value r = SLUICE__CP__VALUE__INIT;
  r.value = j->plans[q->node];
  sl__cp_call_reply(c, &r.base);
  return true;
}

/* ---- start, stop, report, status --------------------------------------- */

void sl__cp_do_job_start(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__JobRequest *q = (const void *)c->body;
  cp_job *j = need_job(c, m, q->job);
  if (!j) return;
  if (j->state != SL__CP_JOB_SUBMITTED) {
    sl__cp_call_fail(c, SL_ESTATE, "JobStart: job %llu is %s",
                     (unsigned long long)j->id,
                     sl__cp_job_state_name(j->state));
    return;
  }
  for (int r = 0; r < m->nnodes; r++) {
    const cp_member *x = m->nodes[r];
    if (!x || x->state != SL__CP_MEMBER_LIVE) {
      sl__cp_call_fail(c, SL_ECOMM, "JobStart: job %llu: node %d is %s",
                       (unsigned long long)j->id, r,
                       x ? sl__cp_member_state_name(x->state)
                         : "not connected");
      return;
    }
  }
  j->state = SL__CP_JOB_RUNNING;
  SL_INFO("control plane: job %llu running", (unsigned long long)j->id);
  reply_status(c, j);
  sl__cp_wake(m, CP_WAIT_JOB);
}

void sl__cp_do_job_stop(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__JobRequest *q = (const void *)c->body;
  cp_job *j = need_job(c, m, q->job);
  if (!j) return;
  if (!terminal(j->state)) {
    char msg[512];
    snprintf(msg, sizeof msg, "stopped%s%s", q->reason[0] ? ": " : "",
             q->reason);
    finish(m, j, SL__CP_JOB_STOPPED, SL_EABORTED, -1, msg);
  }
  reply_status(c, j);
}

void sl__cp_do_job_report(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__JobReport *q = (const void *)c->body;
  if (c->rank < 0) {
    sl__cp_call_fail(c, SL_EINVAL, "JobReport: only nodes report outcomes");
    return;
  }
  cp_job *j = need_job(c, m, q->job);
  if (!j) return;
  if (j->state == SL__CP_JOB_SUBMITTED) {
    sl__cp_call_fail(c, SL_ESTATE, "JobReport: job %llu has not started",
                     (unsigned long long)j->id);
    return;
  }
  if (j->state == SL__CP_JOB_RUNNING) {
    if (q->status != SL_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "node %d failed (%s): %s", c->rank,
               sl_status_str((sl_status)q->status), q->message);
      finish(m, j, SL__CP_JOB_FAILED, (sl_status)q->status, c->rank, msg);
    } else if (!j->reported[c->rank]) {
      j->reported[c->rank] = true;
      if (++j->n_reported == m->nnodes)
        finish(m, j, SL__CP_JOB_SUCCEEDED, SL_OK, -1, "");
    }
  }
  reply_status(c, j);
}

/* States in the order a job goes through them; every terminal state
 * counts as SUCCEEDED for JobStatus's `until`. */
static int stage(sl__cp_job_state s) {
  return terminal(s) ? SL__CP_JOB_SUCCEEDED : (int)s;
}

bool sl__cp_do_job_status(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__JobStatusRequest *q = (const void *)c->body;
  cp_job *j = job_find(m, q->job);
  if (!j) {
    /* A job being waited for may not be submitted yet. */
    if (q->until != SLUICE__CP__JOB_STATE__JOB_NONE) return false;
    sl__cp_call_fail(c, SL_ENOTFOUND, "JobStatus: no job %llu",
                     (unsigned long long)q->job);
    return true;
  }
  if (stage(j->state) < (int)q->until) return false;
  reply_status(c, j);
  return true;
}

void sl__cp_job_member_gone(sl__cp_master *m, const cp_member *who,
                            const char *why) {
  for (cp_job *j = m->jobs; j; j = j->next) {
    if (who->role == SL__CP_NODE && j->state == SL__CP_JOB_RUNNING) {
      finish(m, j, SL__CP_JOB_FAILED, SL_ECOMM, who->rank, why);
    } else if (who->role == SL__CP_CLIENT && !terminal(j->state) &&
               j->submitter == who->id) {
      char msg[512];
      snprintf(msg, sizeof msg,
               "stopped: the client that submitted it is "
               "gone (%s)",
               why);
      finish(m, j, SL__CP_JOB_STOPPED, SL_EABORTED, -1, msg);
    }
  }
}

/* ---- results ----------------------------------------------------------- */

void sl__cp_do_result_put(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__ResultPut *q = (const void *)c->body;
  cp_job *j = need_job(c, m, q->job);
  if (!j) return;
  if (sl__cp_kv_set(&j->results, q->key, q->value.data, q->value.len) !=
      SL_OK) {
    sl__cp_call_fail(c, SL_ENOMEM, "ResultPut '%s': out of memory", q->key);
    return;
  }
  Sluice__Cp__Empty r = SLUICE__CP__EMPTY__INIT;
  sl__cp_call_reply(c, &r.base);
  sl__cp_wake(m, CP_WAIT_RESULT);
}

bool sl__cp_do_result_get(sl__cp_master *m, sl__cp_call *c) {
  const Sluice__Cp__ResultGet *q = (const void *)c->body;
  cp_job *j = need_job(c, m, q->job);
  if (!j) return true;
  size_t len;
  const uint8_t *v = sl__cp_kv_find(&j->results, q->key, &len);
  if (v) {
    Sluice__Cp__Value r = SLUICE__CP__VALUE__INIT;
    r.value.data = (uint8_t *)v;
    r.value.len = len;
    sl__cp_call_reply(c, &r.base);
    return true;
  }
  if (j->state == SL__CP_JOB_SUCCEEDED) {
    sl__cp_call_fail(c, SL_ENOTFOUND,
                     "ResultGet: job %llu succeeded without a result '%s'",
                     (unsigned long long)j->id, q->key);
    return true;
  }
  if (terminal(j->state)) {
    sl__cp_call_fail(c, j->status, "job %llu %s: %s", (unsigned long long)j->id,
                     sl__cp_job_state_name(j->state), j->message);
    return true;
  }
  return false;
}

const char *sl__cp_job_state_name(sl__cp_job_state s) {
  switch (s) {
  case SL__CP_JOB_NONE: return "none";
  case SL__CP_JOB_SUBMITTED: return "submitted";
  case SL__CP_JOB_RUNNING: return "running";
  case SL__CP_JOB_SUCCEEDED: return "succeeded";
  case SL__CP_JOB_FAILED: return "failed";
  case SL__CP_JOB_STOPPED: return "stopped";
  }
  return "?";
}
