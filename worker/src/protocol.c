#include "protocol.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define PROTOCOL_VERSION 1

struct signal_name {
  int number;
  const char *name;
};

/* The signals the supervisor may forward to the command's process group. */
static const struct signal_name FORWARDABLE[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},   {SIGTERM, "SIGTERM"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"},   {SIGCONT, "SIGCONT"},
    {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGWINCH, "SIGWINCH"},
};
#define FORWARDABLE_LIST                                                                     \
  "SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGKILL, SIGUSR1, SIGUSR2, SIGCONT, SIGSTOP, SIGTSTP, " \
  "SIGWINCH"

/* Every signal that can end the command, for the exit report. */
static const struct signal_name ALL_SIGNALS[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"}, {SIGSTKFLT, "SIGSTKFLT"},
    {SIGCHLD, "SIGCHLD"}, {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},
    {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},
    {SIGXFSZ, "SIGXFSZ"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},
    {SIGIO, "SIGIO"},     {SIGPWR, "SIGPWR"},       {SIGSYS, "SIGSYS"},
};

int forwardable_signal(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof FORWARDABLE / sizeof FORWARDABLE[0]; i++) {
    if (strlen(FORWARDABLE[i].name) == len && memcmp(FORWARDABLE[i].name, name, len) == 0) {
      return FORWARDABLE[i].number;
    }
  }
  return 0;
}

void signal_name(int number, char out[16]) {
  for (size_t i = 0; i < sizeof ALL_SIGNALS / sizeof ALL_SIGNALS[0]; i++) {
    if (ALL_SIGNALS[i].number == number) {
      snprintf(out, 16, "%s", ALL_SIGNALS[i].name);
      return;
    }
  }
  snprintf(out, 16, "SIG%d", number);
}

/* ---- refusals: "<reason>: <why>", the field named first ---- */

struct checker {
  const struct json_document *doc;
  char *detail;
};

__attribute__((format(printf, 3, 4))) static bool invalid(struct checker *c, const char *field,
                                                          const char *fmt, ...) {
  size_t used =
      (size_t)snprintf(c->detail, PROTOCOL_DETAIL_MAX + 1, "invalid_message: %s: ", field);
  if (used > PROTOCOL_DETAIL_MAX) return false;
  va_list args;
  va_start(args, fmt);
  vsnprintf(c->detail + used, PROTOCOL_DETAIL_MAX + 1 - used, fmt, args);
  va_end(args);
  return false;
}

/* Room for a name of up to QUOTED_SHOWN bytes as a JSON string: each byte may take 6. */
#define QUOTED_SHOWN 64
#define QUOTED_MAX (QUOTED_SHOWN * 6 + 3)

/* `text` as a JSON string (quotes included), printable whatever it holds, cut at QUOTED_SHOWN. */
static void quote(char out[QUOTED_MAX], const char *text, size_t len) {
  size_t used = 0;
  size_t shown = len < QUOTED_SHOWN ? len : QUOTED_SHOWN;
  if (!json_append_string(out, QUOTED_MAX, &used, text, shown, shown)) snprintf(out, 3, "\"\"");
}

/* The first member of `object` whose name is not in `allowed` (NULL-terminated) is refused. */
static bool only_fields(struct checker *c, const struct json_node *object, const char *context,
                        const char *const *allowed) {
  for (size_t i = object->first_child; i != 0; i = c->doc->nodes[i].next) {
    const struct json_node *member = &c->doc->nodes[i];
    bool known = false;
    for (const char *const *a = allowed; *a != NULL && !known; a++) {
      known = strlen(*a) == member->key_len && memcmp(*a, member->key, member->key_len) == 0;
    }
    if (!known) {
      char name[QUOTED_MAX];
      quote(name, member->key, member->key_len);
      /* Unquoted, as the supervisor names the field. */
      name[strlen(name) - 1] = '\0';
      char field[QUOTED_MAX + 64];
      snprintf(field, sizeof field, "%s.%s", context, name + 1);
      return invalid(c, field, "unknown field");
    }
  }
  return true;
}

static const struct json_node *member(struct checker *c, const struct json_node *object,
                                      const char *name) {
  return json_member(c->doc, object, name);
}

static bool clean_string(struct checker *c, const struct json_node *v, const char *field,
                         size_t max_bytes) {
  if (v == NULL || v->kind != JSON_STRING) return invalid(c, field, "must be a string");
  if (memchr(v->text, '\0', v->text_len) != NULL) return invalid(c, field, "must not contain NUL");
  if (v->text_len > max_bytes) return invalid(c, field, "must be at most %zu bytes", max_bytes);
  return true;
}

static bool int_in(struct checker *c, const struct json_node *v, const char *field, int64_t min,
                   int64_t max, int64_t *out) {
  if (v == NULL || v->kind != JSON_INTEGER || v->integer < min || v->integer > max) {
    return invalid(c, field, "must be an integer in %lld..%lld", (long long)min, (long long)max);
  }
  *out = v->integer;
  return true;
}

static bool tty_size(struct checker *c, const struct json_node *cols, const struct json_node *rows,
                     const char *context, uint16_t *out_cols, uint16_t *out_rows) {
  char field[64];
  int64_t value = 0;
  /* struct winsize holds unsigned shorts. */
  snprintf(field, sizeof field, "%s.cols", context);
  if (!int_in(c, cols, field, 1, 0xffff, &value)) return false;
  *out_cols = (uint16_t)value;
  snprintf(field, sizeof field, "%s.rows", context);
  if (!int_in(c, rows, field, 1, 0xffff, &value)) return false;
  *out_rows = (uint16_t)value;
  return true;
}

static char *copy_text(const struct json_node *v) {
  char *s = malloc(v->text_len + 1);
  if (s == NULL) return NULL;
  memcpy(s, v->text, v->text_len);
  s[v->text_len] = '\0';
  return s;
}

static bool parse_argv(struct checker *c, const struct json_node *v, struct launch_message *l) {
  if (v == NULL || v->kind != JSON_ARRAY || v->count == 0 || v->count > PROTOCOL_MAX_ARGV) {
    return invalid(c, "launch.argv", "must be an array of 1..%d strings", PROTOCOL_MAX_ARGV);
  }
  l->argv = calloc(v->count + 1, sizeof *l->argv);
  if (l->argv == NULL) return invalid(c, "launch.argv", "out of memory");
  size_t i = 0;
  for (size_t n = v->first_child; n != 0; n = c->doc->nodes[n].next, i++) {
    char field[48];
    snprintf(field, sizeof field, "launch.argv[%zu]", i);
    if (!clean_string(c, &c->doc->nodes[n], field, PROTOCOL_MAX_LINE_BYTES)) return false;
    l->argv[i] = copy_text(&c->doc->nodes[n]);
    if (l->argv[i] == NULL) return invalid(c, field, "out of memory");
    l->argc = i + 1;
  }
  if (l->argv[0][0] == '\0') return invalid(c, "launch.argv[0]", "must not be empty");
  return true;
}

static bool parse_env(struct checker *c, const struct json_node *v, struct launch_message *l) {
  if (v == NULL || v->kind != JSON_OBJECT) {
    return invalid(c, "launch.env", "must be an object of strings");
  }
  if (v->count > PROTOCOL_MAX_ENV) {
    return invalid(c, "launch.env", "must have at most %d entries", PROTOCOL_MAX_ENV);
  }
  l->env = calloc(v->count + 1, sizeof *l->env);
  if (l->env == NULL) return invalid(c, "launch.env", "out of memory");
  for (size_t n = v->first_child; n != 0; n = c->doc->nodes[n].next) {
    const struct json_node *e = &c->doc->nodes[n];
    char name[QUOTED_MAX];
    quote(name, e->key, e->key_len);
    char field[QUOTED_MAX + 32];
    if (e->key_len == 0 || memchr(e->key, '=', e->key_len) != NULL ||
        memchr(e->key, '\0', e->key_len) != NULL) {
      snprintf(field, sizeof field, "launch.env[%s]", name);
      return invalid(c, field, "name must be non-empty without \"=\" or NUL");
    }
    name[strlen(name) - 1] = '\0';
    snprintf(field, sizeof field, "launch.env.%s", name + 1);
    if (!clean_string(c, e, field, PROTOCOL_MAX_LINE_BYTES)) return false;
    char *entry = malloc(e->key_len + 1 + e->text_len + 1);
    if (entry == NULL) return invalid(c, field, "out of memory");
    memcpy(entry, e->key, e->key_len);
    entry[e->key_len] = '=';
    memcpy(entry + e->key_len + 1, e->text, e->text_len);
    entry[e->key_len + 1 + e->text_len] = '\0';
    l->env[l->envc++] = entry;
  }
  return true;
}

static bool parse_launch(struct checker *c, const struct json_node *m, struct launch_message *l) {
  static const char *const allowed[] = {"type", "v", "argv", "cwd", "env", "tty", "egress", NULL};
  if (!only_fields(c, m, "launch", allowed)) return false;
  const struct json_node *v = member(c, m, "v");
  if (v == NULL || v->kind != JSON_INTEGER || v->integer != PROTOCOL_VERSION) {
    return invalid(c, "launch.v", "must be %d", PROTOCOL_VERSION);
  }
  if (!parse_argv(c, member(c, m, "argv"), l)) return false;
  const struct json_node *cwd = member(c, m, "cwd");
  if (!clean_string(c, cwd, "launch.cwd", PROTOCOL_MAX_LINE_BYTES)) return false;
  if (cwd->text_len == 0 || cwd->text[0] != '/') {
    return invalid(c, "launch.cwd", "must be an absolute path");
  }
  l->cwd = copy_text(cwd);
  if (l->cwd == NULL) return invalid(c, "launch.cwd", "out of memory");
  if (!parse_env(c, member(c, m, "env"), l)) return false;
  const struct json_node *tty = member(c, m, "tty");
  if (tty == NULL || tty->kind != JSON_NULL) {
    if (tty == NULL || tty->kind != JSON_OBJECT)
      return invalid(c, "launch.tty", "must be an object");
    static const char *const size_fields[] = {"cols", "rows", NULL};
    if (!only_fields(c, tty, "launch.tty", size_fields)) return false;
    if (!tty_size(c, member(c, tty, "cols"), member(c, tty, "rows"), "launch.tty", &l->cols,
                  &l->rows)) {
      return false;
    }
    l->has_tty = true;
  }
  const struct json_node *egress = member(c, m, "egress");
  if (egress == NULL || (egress->kind != JSON_TRUE && egress->kind != JSON_FALSE)) {
    return invalid(c, "launch.egress", "must be a boolean");
  }
  l->egress = egress->kind == JSON_TRUE;
  return true;
}

static bool parse_seccomp(struct checker *c, const struct json_node *m,
                          struct supervisor_message *out) {
  static const char *const allowed[] = {"type", "program", NULL};
  if (!only_fields(c, m, "seccomp", allowed)) return false;
  const struct json_node *p = member(c, m, "program");
  if (p == NULL || p->kind != JSON_STRING) return invalid(c, "seccomp.program", "must be a string");
  out->program = malloc(p->text_len / 4 * 3 + 1);
  if (out->program == NULL) return invalid(c, "seccomp.program", "out of memory");
  if (!base64_decode(p->text, p->text_len, out->program, &out->program_len)) {
    return invalid(c, "seccomp.program", "must be standard base64 with padding");
  }
  return true;
}

static bool parse_resize(struct checker *c, const struct json_node *m,
                         struct supervisor_message *out) {
  if (!tty_size(c, member(c, m, "cols"), member(c, m, "rows"), "resize", &out->cols, &out->rows)) {
    return false;
  }
  static const char *const allowed[] = {"type", "cols", "rows", NULL};
  return only_fields(c, m, "resize", allowed);
}

static bool parse_signal(struct checker *c, const struct json_node *m,
                         struct supervisor_message *out) {
  static const char *const allowed[] = {"type", "signal", NULL};
  if (!only_fields(c, m, "signal", allowed)) return false;
  const struct json_node *s = member(c, m, "signal");
  out->signal = s != NULL && s->kind == JSON_STRING ? forwardable_signal(s->text, s->text_len) : 0;
  if (out->signal == 0) return invalid(c, "signal.signal", "must be one of " FORWARDABLE_LIST);
  return true;
}

enum parse_outcome parse_supervisor_message(const char *line, size_t len,
                                            struct supervisor_message *m,
                                            char detail[PROTOCOL_DETAIL_MAX + 1]) {
  memset(m, 0, sizeof *m);
  detail[0] = '\0';
  struct json_document doc;
  char why[JSON_ERROR_MAX];
  if (!json_parse(line, len, &doc, why)) {
    snprintf(detail, PROTOCOL_DETAIL_MAX + 1, "invalid_json: line is not JSON: %s", why);
    json_free(&doc);
    return PARSE_INVALID_JSON;
  }
  struct checker c = {&doc, detail};
  const struct json_node *root = &doc.nodes[0];
  const struct json_node *type = root->kind == JSON_OBJECT ? member(&c, root, "type") : NULL;
  enum parse_outcome outcome = PARSE_INVALID_MESSAGE;
  bool valid = false;
  if (type == NULL || type->kind != JSON_STRING) {
    invalid(&c, "type", "message must be an object with a string type");
  } else if (type->text_len == 7 && memcmp(type->text, "seccomp", 7) == 0) {
    m->type = MESSAGE_SECCOMP;
    valid = parse_seccomp(&c, root, m);
  } else if (type->text_len == 6 && memcmp(type->text, "launch", 6) == 0) {
    m->type = MESSAGE_LAUNCH;
    valid = parse_launch(&c, root, &m->launch);
  } else if (type->text_len == 6 && memcmp(type->text, "resize", 6) == 0) {
    m->type = MESSAGE_RESIZE;
    valid = parse_resize(&c, root, m);
  } else if (type->text_len == 6 && memcmp(type->text, "signal", 6) == 0) {
    m->type = MESSAGE_SIGNAL;
    valid = parse_signal(&c, root, m);
  } else {
    char name[QUOTED_MAX];
    quote(name, type->text, type->text_len);
    snprintf(detail, PROTOCOL_DETAIL_MAX + 1, "unknown_type: unknown message type %s", name);
    outcome = PARSE_UNKNOWN_TYPE;
  }
  json_free(&doc);
  if (valid) return PARSE_OK;
  message_free(m);
  return outcome;
}

void message_free(struct supervisor_message *m) {
  free(m->program);
  struct launch_message *l = &m->launch;
  for (size_t i = 0; l->argv != NULL && i < l->argc; i++)
    free(l->argv[i]);
  for (size_t i = 0; l->env != NULL && i < l->envc; i++)
    free(l->env[i]);
  free(l->argv);
  free(l->env);
  free(l->cwd);
  memset(m, 0, sizeof *m);
}

/* ---- base64 ---- */

static int base64_value(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+') return 62;
  if (ch == '/') return 63;
  return -1;
}

bool base64_decode(const char *text, size_t len, unsigned char *out, size_t *out_len) {
  *out_len = 0;
  if (len % 4 != 0) return false;
  for (size_t i = 0; i < len; i += 4) {
    bool last = i + 4 == len;
    int v[4];
    int padding = 0;
    for (int j = 0; j < 4; j++) {
      char ch = text[i + (size_t)j];
      if (ch == '=' && last && j >= 2) {
        v[j] = 0;
        padding++;
        continue;
      }
      if (padding > 0) return false; /* data after '=' */
      v[j] = base64_value(ch);
      if (v[j] < 0) return false;
    }
    unsigned triple =
        (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
    /* Canonical: the bits under the padding are zero. */
    if ((padding == 1 && (triple & 0xff) != 0) || (padding == 2 && (triple & 0xffff) != 0)) {
      return false;
    }
    out[(*out_len)++] = (unsigned char)(triple >> 16);
    if (padding < 2) out[(*out_len)++] = (unsigned char)(triple >> 8);
    if (padding < 1) out[(*out_len)++] = (unsigned char)triple;
  }
  return true;
}

/* ---- output ---- */

static bool append(char *out, size_t cap, size_t *used, const char *text) {
  size_t n = strlen(text);
  if (cap - *used < n + 1) return false;
  memcpy(out + *used, text, n);
  *used += n;
  out[*used] = '\0';
  return true;
}

bool json_append_string(char *out, size_t cap, size_t *used, const char *text, size_t len,
                        size_t max_bytes) {
  static const char hex[] = "0123456789abcdef";
  if (!append(out, cap, used, "\"")) return false;
  size_t written = 0;
  for (size_t i = 0; i < len;) {
    unsigned char ch = (unsigned char)text[i];
    char piece[8];
    size_t consumed = 1;
    size_t counted = 1;
    if (ch == '"' || ch == '\\') {
      snprintf(piece, sizeof piece, "\\%c", ch);
    } else if (ch == '\n') {
      snprintf(piece, sizeof piece, "\\n");
    } else if (ch < 0x20 || ch == 0x7f) {
      snprintf(piece, sizeof piece, "\\u00%c%c", hex[ch >> 4], hex[ch & 15]);
    } else if (ch < 0x80) {
      piece[0] = (char)ch;
      piece[1] = '\0';
    } else {
      size_t n = utf8_valid_length((const unsigned char *)text + i, len - i);
      if (n == 0) {
        snprintf(piece, sizeof piece, "\xef\xbf\xbd"); /* U+FFFD */
        counted = 3;
      } else {
        memcpy(piece, text + i, n);
        piece[n] = '\0';
        consumed = counted = n;
      }
    }
    if (written + counted > max_bytes) break; /* never cut a character in two */
    if (!append(out, cap, used, piece)) return false;
    written += counted;
    i += consumed;
  }
  return append(out, cap, used, "\"");
}

static size_t finish(char *out, size_t cap, size_t *used) {
  return append(out, cap, used, "}\n") ? *used : 0;
}

size_t encode_ready(char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  return append(out, cap, &used, "{\"type\":\"ready\"") ? finish(out, cap, &used) : 0;
}

size_t encode_started(char *out, size_t cap, int pid) {
  size_t used = (size_t)snprintf(out, cap, "{\"type\":\"started\",\"pid\":%d", pid);
  return used < cap ? finish(out, cap, &used) : 0;
}

size_t encode_error(char *out, size_t cap, const char *code, const char *detail) {
  size_t used = (size_t)snprintf(out, cap, "{\"type\":\"error\",\"code\":\"%s\",\"detail\":", code);
  if (used >= cap) return 0;
  if (!json_append_string(out, cap, &used, detail, strlen(detail), PROTOCOL_DETAIL_MAX)) return 0;
  return finish(out, cap, &used);
}

size_t encode_exit(char *out, size_t cap, const struct exit_report *r) {
  char status[48];
  if (r->signaled) {
    char name[16];
    signal_name(r->code_or_signal, name);
    snprintf(status, sizeof status, "\"exitCode\":null,\"signal\":\"%s\"", name);
  } else {
    snprintf(status, sizeof status, "\"exitCode\":%d,\"signal\":null", r->code_or_signal);
  }
  size_t used = (size_t)snprintf(out, cap,
                                 "{\"type\":\"exit\",%s,\"rusage\":{\"userCpuUsec\":%lld,"
                                 "\"systemCpuUsec\":%lld,\"maxRssKiB\":%lld}",
                                 status, (long long)r->user_usec, (long long)r->system_usec,
                                 (long long)r->max_rss_kib);
  if (used >= cap) return 0;
  if (r->spawn_error != NULL) {
    if (!append(out, cap, &used, ",\"spawnError\":\"") ||
        !append(out, cap, &used, r->spawn_error) || !append(out, cap, &used, "\",\"detail\":") ||
        !json_append_string(out, cap, &used, r->detail, strlen(r->detail), PROTOCOL_DETAIL_MAX)) {
      return 0;
    }
  }
  return finish(out, cap, &used);
}
