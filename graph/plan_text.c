/* The physical plan as text and as Graphviz DOT, and plan files in any of
 * the three forms (docs/plan.md shows both outputs). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

static const char *stream_name(uint32_t s) {
  static const char *const names[] = {"compute", "copy", "network",
                                      "collective"};
  return s < 4 ? names[s] : "?";
}

static bool is_boxing(const sl__task *t) {
  return t->kind == SL__TASK_COLL || t->kind == SL__TASK_LOCAL ||
         t->kind == SL__TASK_XCHG;
}

/* "op matmul", "collective all_reduce(sum) group 0 member 1", ... */
/* Where a boxing task's step runs; nothing for one in this process. */
static const char *engine_label(sl__engine e) {
  return e == SL__ENGINE_NODES    ? ", between nodes"
         : e == SL__ENGINE_DEVICE ? ", on the devices"
                                  : "";
}

static void task_what(const sl__pplan *p, const sl__task *t, char *buf,
                      size_t n) {
  const sl__pnode *pn =
      t->node >= 0 && t->node < p->n_nodes ? &p->nodes[t->node] : NULL;
  const sl__pstep *ps =
      pn && t->step >= 0 && t->step < pn->n_steps ? &pn->steps[t->step] : NULL;
  const char *k = sl__task_kind_name(t->kind);
  if (t->kind == SL__TASK_OP && pn)
    snprintf(buf, n, "op %s", pn->op);
  else if (ps && t->kind == SL__TASK_COLL)
    snprintf(buf, n, "boxing %s%s%s%s group %d member %d%s", ps->op,
             ps->reduce[0] ? "(" : "", ps->reduce, ps->reduce[0] ? ")" : "",
             (int)t->group, (int)t->member, engine_label(t->engine));
  else if (ps)
    snprintf(buf, n, "boxing %s%s%s%s%s", ps->op, ps->reduce[0] ? "(" : "",
             ps->reduce, ps->reduce[0] ? ")" : "", engine_label(t->engine));
  else
    snprintf(buf, n, "%s", k);
  char pass[48];
  size_t len = strlen(buf);
  if (sl__pass_label(p, (int32_t)(t - p->tasks), pass, sizeof pass) && len < n)
    snprintf(buf + len, n - len, ", pass %s", pass);
}

static void human_bytes(int64_t b, char *buf, size_t n) {
  if (b >= 10 * 1024 * 1024)
    snprintf(buf, n, "%.1f MiB", (double)b / (1024.0 * 1024.0));
  else if (b >= 10 * 1024)
    snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
  else
    snprintf(buf, n, "%lld B", (long long)b);
}

/* machine: the task's; an input another machine produces says where
 * from. */
static void regst_line(FILE *f, const sl__pplan *p, const char *dir, int32_t id,
                       bool with_count, bool inplace, uint32_t machine) {
  const sl__regst *r = &p->regsts[id];
  char shape[128], bytes[32];
  sl_shape_print(&r->shape, shape, sizeof shape);
  human_bytes(r->bytes, bytes, sizeof bytes);
  fprintf(f, "        %s %s %s %s, %s", dir, r->name, shape,
          sl_dtype_name(r->dtype), bytes);
  if (with_count) {
    fprintf(f, " x%d", (int)r->count);
    if (r->initial) fprintf(f, " (%d initial)", (int)r->initial);
    if (r->mem >= 0) fprintf(f, " at %lld", (long long)r->offset);
  }
  if (r->producer >= 0 && p->tasks[r->producer].kind == SL__TASK_TICK)
    fprintf(f, " [tick]");
  else if (!with_count && r->producer >= 0 &&
           p->tasks[r->producer].machine != machine)
    fprintf(f, " from machine %u (%s)", p->tasks[r->producer].machine,
            p->tasks[r->producer].name);
  if (inplace) fprintf(f, " (updated in place)");
  fputc('\n', f);
}

/* A variable's register a task both reads and writes with one register:
 * updated in place (lower.c). */
static bool in_place(const sl__pplan *p, const sl__task *t, int32_t reg) {
  if (p->regsts[reg].count != 1) return false;
  bool in = false, out = false;
  for (int32_t k = 0; k < t->n_in; k++)
    in |= t->in[k] == reg;
  for (int32_t k = 0; k < t->n_out; k++)
    out |= t->out[k] == reg;
  return in && out;
}

typedef struct dev_key {
  uint32_t machine, device;
} dev_key;

static int cmp_dev(const void *a, const void *b) {
  const dev_key *x = a, *y = b;
  if (x->machine != y->machine) return x->machine < y->machine ? -1 : 1;
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  return 0;
}

static bool on_node(const sl__task *t, int node) {
  return node < 0 || t->machine == (uint32_t)node;
}

/* The distinct (machine, device) pairs of real tasks (of one machine, or
 * all: node -1), sorted. */
static dev_key *devices_of(const sl__pplan *p, int node, int *n) {
  dev_key *d = sl__calloc((size_t)p->n_tasks + 1, sizeof *d);
  if (!d) return NULL;
  int k = 0;
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    if (t->kind == SL__TASK_TICK || !on_node(t, node)) continue;
    bool seen = false;
    for (int j = 0; j < k && !seen; j++)
      seen = d[j].machine == t->machine && d[j].device == t->device;
    if (!seen) d[k++] = (dev_key){t->machine, t->device};
  }
  qsort(d, (size_t)k, sizeof *d, cmp_dev);
  *n = k;
  return d;
}

/* Whether machine `node` (-1: any) runs a task of plan node i. */
static bool node_runs(const sl__pplan *p, int32_t i, int node) {
  for (int32_t k = 0; k < p->n_tasks; k++)
    if (p->tasks[k].node == i && p->tasks[k].kind != SL__TASK_TICK &&
        on_node(&p->tasks[k], node))
      return true;
  return false;
}

sl_status sl__pplan_check_node(const sl__pplan *p, int node) {
  if (node >= -1 && node < (int)p->machines) return SL_OK;
  return sl__fail(SL_EINVAL,
                  "plan: no machine %d (the plan has machines 0 to %u)", node,
                  p->machines - 1);
}

sl_status sl__pplan_write_text(const sl__pplan *p, int node, FILE *f) {
  SL_CHECK(sl__pplan_check_node(p, node));
  int nd = 0;
  dev_key *devs = devices_of(p, node, &nd);
  if (!devs) return SL_ENOMEM;
  int64_t total = 0;
  int32_t ntasks = 0, nregs = 0;
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    if (node >= 0 && (t->kind == SL__TASK_TICK || !on_node(t, node))) continue;
    ntasks++;
    nregs += t->n_out;
    for (int32_t k = 0; k < t->n_out; k++)
      total += p->regsts[t->out[k]].bytes * p->regsts[t->out[k]].count;
  }
  char tb[32];
  human_bytes(total, tb, sizeof tb);
  if (node >= 0)
    fprintf(f,
            "plan of machine %d (of %u machines and the driver): %d "
            "device%s, %d tasks, %d registers, %s of registers\n",
            node, p->machines, nd, nd == 1 ? "" : "s", (int)ntasks, (int)nregs,
            tb);
  else
    fprintf(f,
            "plan: %u machine%s and the driver, %d device%s, %d tasks, %d "
            "registers, %s of registers\n",
            p->machines, p->machines == 1 ? "" : "s", nd, nd == 1 ? "" : "s",
            (int)ntasks, (int)nregs, tb);
  if (p->part >= 0) { /* a node's part (plan_part.c) */
    int proxies = 0;
    for (int32_t i = 0; i < p->n_tasks; i++)
      proxies += p->tasks[i].proxy;
    fprintf(f,
            "part of %s %d: %d of the tasks are other machines' (proxies: "
            "what they exchange with it)\n",
            (uint32_t)p->part == p->driver ? "the program, machine" : "machine",
            (int)p->part, proxies);
  }
  if (p->micro_batches > 1)
    fprintf(f, "pipeline: %d micro-batches per step, schedule %s\n",
            (int)p->micro_batches, sl__schedule_name(p->schedule));
  uint32_t last_machine = UINT32_MAX;
  for (int di = 0; di < nd; di++) {
    if (devs[di].machine != last_machine) {
      last_machine = devs[di].machine;
      fprintf(f, "\nmachine %u\n", last_machine);
    }
    int ntask = 0;
    int64_t bytes = 0;
    for (int32_t i = 0; i < p->n_tasks; i++) {
      const sl__task *t = &p->tasks[i];
      if (t->kind == SL__TASK_TICK || t->machine != devs[di].machine ||
          t->device != devs[di].device)
        continue;
      ntask++;
      for (int32_t k = 0; k < t->n_out; k++)
        bytes += p->regsts[t->out[k]].bytes * p->regsts[t->out[k]].count;
    }
    human_bytes(bytes, tb, sizeof tb);
    char dn[32];
    sl__dev_name(devs[di].device, dn, sizeof dn);
    fprintf(f, "  device %s: %d tasks, %s of registers", dn, ntask, tb);
    for (int32_t m = 0; m < p->n_mem; m++)
      if (p->mem[m].machine == devs[di].machine &&
          p->mem[m].device == devs[di].device) {
        char ab[32], bb[32];
        human_bytes(sl__pmem_allocated(&p->mem[m]), ab, sizeof ab);
        human_bytes(p->mem[m].block, bb, sizeof bb);
        fprintf(f, ", %s allocated (%s shared by %d)", ab, bb,
                (int)p->mem[m].n_shared);
      }
    fputc('\n', f);
    for (uint32_t s = 0; s < SL_STREAMS_DEFAULT; s++) {
      bool header = false;
      for (int32_t i = 0; i < p->n_tasks; i++) {
        const sl__task *t = &p->tasks[i];
        if (t->kind == SL__TASK_TICK || t->machine != devs[di].machine ||
            t->device != devs[di].device || t->stream != s)
          continue;
        if (!header) {
          fprintf(f, "    stream %s\n", stream_name(s));
          header = true;
        }
        char what[160];
        task_what(p, t, what, sizeof what);
        fprintf(f, "      %s  [%s%s]\n", t->name, what,
                t->proxy ? ", proxy" : "");
        for (int32_t k = 0; k < t->n_in; k++)
          if (k != t->tick_slot)
            regst_line(f, p, "in ", t->in[k], false, in_place(p, t, t->in[k]),
                       t->machine);
        if (t->tick_slot >= 0) fprintf(f, "        tick\n");
        for (int32_t c = 0; c < p->n_ctrl; c++)
          if (p->ctrl[c].to == i)
            fprintf(f, "        after %s%s\n", p->tasks[p->ctrl[c].from].name,
                    p->ctrl[c].closing ? " (which waits for this task before "
                                         "its next step)"
                                       : "");
        for (int32_t k = 0; k < t->n_out; k++)
          regst_line(f, p, "out", t->out[k], true, in_place(p, t, t->out[k]),
                     t->machine);
      }
    }
  }
  fprintf(f, "\ndriver (machine %u)\n", p->driver);
  for (int32_t i = 0; i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    if (t->kind != SL__TASK_TICK || !on_node(t, node)) continue;
    const sl__regst *r = &p->regsts[t->out[0]];
    char dn[32];
    sl__dev_name(t->device, dn, sizeof dn);
    fprintf(f, "  %s: gates %d tasks of machine %u device %s, x%d\n", t->name,
            (int)r->n_cons, t->machine, dn, (int)r->count);
  }
  bool any = false;
  for (int32_t i = 0; i < p->n_nodes; i++) {
    const sl__pnode *pn = &p->nodes[i];
    if (strcmp(pn->kind, "boxing") != 0 || !node_runs(p, i, node)) continue;
    if (!any) fprintf(f, "\nboxing\n");
    any = true;
    fprintf(f, "  %s %s %s -> %s on %s: %d step%s\n", pn->name, pn->dtype,
            pn->shape, pn->sbp, pn->placement, (int)pn->n_steps,
            pn->n_steps == 1 ? "" : "s");
    for (int32_t s = 0; s < pn->n_steps; s++) {
      const sl__pstep *ps = &pn->steps[s];
      human_bytes(ps->bytes, tb, sizeof tb);
      fprintf(f,
              "    %s%s%s%s %s -> %s, mesh axis %d, %s sent per rank at "
              "most, %.3f us\n",
              ps->op, ps->reduce[0] ? "(" : "", ps->reduce,
              ps->reduce[0] ? ")" : "", ps->from, ps->to, (int)ps->mesh_axis,
              tb, ps->predicted_us);
    }
  }
  sl__free(devs);
  return ferror(f) ? sl__fail(SL_EIO, "plan: write failed") : SL_OK;
}

static void dot_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if (*s == '\n') {
      fputs("\\n", f);
      continue;
    }
    fputc(*s, f);
  }
  fputc('"', f);
}

sl_status sl__pplan_write_dot(const sl__pplan *p, int node, FILE *f) {
  SL_CHECK(sl__pplan_check_node(p, node));
  int nd = 0;
  dev_key *devs = devices_of(p, node, &nd);
  if (!devs) return SL_ENOMEM;
  fprintf(f, "digraph plan {\n  rankdir=TB;\n  compound=true;\n"
             "  node [shape=box, fontsize=10, fontname=\"Helvetica\"];\n"
             "  edge [fontsize=8, fontname=\"Helvetica\"];\n");
  for (int di = 0; di < nd; di++) {
    char dn[32];
    sl__dev_name(devs[di].device, dn, sizeof dn);
    fprintf(f,
            "  subgraph cluster_m%u_d%u {\n    label=\"machine %u device "
            "%s\";\n",
            devs[di].machine, devs[di].device, devs[di].machine, dn);
    for (int32_t i = 0; i < p->n_tasks; i++) {
      const sl__task *t = &p->tasks[i];
      if (t->kind == SL__TASK_TICK || t->machine != devs[di].machine ||
          t->device != devs[di].device)
        continue;
      char what[160], label[400];
      task_what(p, t, what, sizeof what);
      snprintf(label, sizeof label, "%s\n%s\n%s stream", t->name, what,
               stream_name(t->stream));
      fprintf(f, "    t%d [label=", (int)i);
      dot_string(f, label);
      if (is_boxing(t))
        fprintf(f, ", style=\"filled,bold\", fillcolor=\"#ffd27f\", "
                   "shape=hexagon, class=boxing");
      else if (t->kind == SL__TASK_FEED || t->kind == SL__TASK_FETCH)
        fprintf(f, ", style=filled, fillcolor=\"#cde7ff\"");
      fprintf(f, "];\n");
    }
    fprintf(f, "  }\n");
  }
  fprintf(f, "  subgraph cluster_driver {\n    label=\"driver\";\n");
  for (int32_t i = 0; i < p->n_tasks; i++)
    if (p->tasks[i].kind == SL__TASK_TICK && on_node(&p->tasks[i], node)) {
      fprintf(f, "    t%d [label=", (int)i);
      dot_string(f, p->tasks[i].name);
      fprintf(f, ", shape=circle, style=dashed];\n");
    }
  fprintf(f, "  }\n");
  /* One machine's plan: the producers on other machines it reads from, as
   * plain nodes outside its clusters. */
  for (int32_t i = 0; node >= 0 && i < p->n_tasks; i++) {
    const sl__task *t = &p->tasks[i];
    if (t->kind == SL__TASK_TICK || on_node(t, node)) continue;
    bool feeds = false;
    for (int32_t k = 0; k < t->n_out && !feeds; k++) {
      const sl__regst *g = &p->regsts[t->out[k]];
      for (int32_t c = 0; c < g->n_cons && !feeds; c++)
        feeds = on_node(&p->tasks[g->cons[c]], node);
    }
    if (!feeds) continue;
    char label[300];
    snprintf(label, sizeof label, "%s\n(machine %u)", t->name, t->machine);
    fprintf(f, "  t%d [label=", (int)i);
    dot_string(f, label);
    fprintf(f, ", style=dashed];\n");
  }
  for (int32_t r = 0; r < p->n_regsts; r++) {
    const sl__regst *g = &p->regsts[r];
    bool tick = p->tasks[g->producer].kind == SL__TASK_TICK;
    for (int32_t c = 0; c < g->n_cons; c++) {
      if (!on_node(&p->tasks[g->cons[c]], node)) continue;
      char bytes[32], label[64];
      human_bytes(g->bytes, bytes, sizeof bytes);
      snprintf(label, sizeof label, "%s x%d", bytes, (int)g->count);
      fprintf(f, "  t%d -> t%d [label=", (int)g->producer, (int)g->cons[c]);
      dot_string(f, tick ? "" : label);
      if (tick) fprintf(f, ", style=dotted");
      fprintf(f, "];\n");
    }
  }
  fprintf(f, "}\n");
  sl__free(devs);
  return ferror(f) ? sl__fail(SL_EIO, "plan: write failed") : SL_OK;
}

sl_status sl__pplan_write_file(const sl__pplan *p, int format, int node,
                               const char *path) {
  if (!p || !path) return sl__fail(SL_EINVAL, "plan: NULL argument");
  if (format < 0 || format > 3)
    return sl__fail(SL_EINVAL, "plan: unknown format %d", format);
  /* Protobuf: the part machine `node` receives over daemons (the
   * driver's: the program's). */
  sl__pplan *part = NULL;
  bool driver = format == 2 && node >= 0 && (uint32_t)node == p->driver;
  if (!driver) SL_CHECK(sl__pplan_check_node(p, node));
  if (format == 2 && node >= 0) {
    SL_CHECK(sl__pplan_part(p, driver ? -1 : node, &part));
    p = part;
  }
  bool out = strcmp(path, "-") == 0;
  FILE *f = out ? stdout : fopen(path, format == 2 ? "wb" : "w");
  if (!f) {
    sl__pplan_destroy(part);
    return sl__fail(SL_EIO, "plan '%s': %s", path, strerror(errno));
  }
  sl_status st = SL_OK;
  if (format == 0) {
    st = sl__pplan_write_text(p, node, f);
  } else if (format == 1) {
    st = sl__pplan_write_dot(p, node, f);
  } else if (format == 3) {
    st = sl__pplan_write_memory(p, node, f);
  } else {
    uint8_t *buf = NULL;
    size_t len = 0;
    st = sl__pplan_pack(p, &buf, &len);
    if (st == SL_OK && fwrite(buf, 1, len, f) != len)
      st = sl__fail(SL_EIO, "plan '%s': write failed", path);
    sl__free(buf);
  }
  if (out) {
    if (fflush(f) != 0 && st == SL_OK)
      st = sl__fail(SL_EIO, "plan: write to stdout failed");
  } else if (fclose(f) != 0 && st == SL_OK) {
    st = sl__fail(SL_EIO, "plan '%s': write failed", path);
  }
  sl__pplan_destroy(part);
  if (st != SL_OK && st != SL_EIO) sl__fail_context(st, "plan '%s': ", path);
  return st;
}
