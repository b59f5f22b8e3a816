/* libFuzzer target: the protocol parser, fed one line as from fd 3. A parsed message must hold
 * what the worker relies on; an encoded report must be one line of valid UTF-8. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../src/json.h"
#include "../src/protocol.h"

static void check_launch(const struct launch_message *l) {
  if (l->argc == 0 || l->argc > PROTOCOL_MAX_ARGV || l->argv[l->argc] != NULL) __builtin_trap();
  if (l->argv[0][0] == '\0' || l->cwd[0] != '/') __builtin_trap();
  if (l->envc > PROTOCOL_MAX_ENV || l->env[l->envc] != NULL) __builtin_trap();
  for (size_t i = 0; i < l->envc; i++) {
    const char *eq = strchr(l->env[i], '=');
    if (eq == NULL || eq == l->env[i]) __builtin_trap();
  }
  if (l->has_tty && (l->cols == 0 || l->rows == 0)) __builtin_trap();
}

static void check_encoded(const char *line, size_t len) {
  if (len == 0 || line[len - 1] != '\n' || memchr(line, '\n', len - 1) != NULL) __builtin_trap();
  for (size_t i = 0; i < len - 1;) {
    size_t n = utf8_valid_length((const unsigned char *)line + i, len - 1 - i);
    if (n == 0) __builtin_trap();
    i += n;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > PROTOCOL_MAX_LINE_BYTES) return 0;
  struct supervisor_message m;
  char detail[PROTOCOL_DETAIL_MAX + 1];
  enum parse_outcome outcome = parse_supervisor_message((const char *)data, size, &m, detail);
  if (outcome == PARSE_OK) {
    if (m.type == MESSAGE_LAUNCH) check_launch(&m.launch);
    if (m.type == MESSAGE_SIGNAL && m.signal == 0) __builtin_trap();
    message_free(&m);
  } else if (detail[0] == '\0') {
    __builtin_trap();
  }
  /* The refusal detail travels back in an error report: it must encode as one valid line. */
  char line[PROTOCOL_DETAIL_MAX * 6 + 128];
  size_t len = encode_error(line, sizeof line, "protocol_invalid", detail);
  check_encoded(line, len);
  struct exit_report r = {0};
  r.spawn_error = "not_found";
  r.code_or_signal = 127;
  char text[256];
  size_t n = size < sizeof text - 1 ? size : sizeof text - 1;
  memcpy(text, data, n);
  text[n] = '\0';
  r.detail = text;
  char exit_line[PROTOCOL_DETAIL_MAX * 6 + 512];
  check_encoded(exit_line, encode_exit(exit_line, sizeof exit_line, &r));
  return 0;
}
