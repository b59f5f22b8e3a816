/* A strict JSON reader for the worker protocol's lines (docs/worker-protocol.md, "Framing"):
 * objects, arrays, strings (every JSON escape, \uXXXX surrogate pairs decoded to UTF-8),
 * numbers, true, false and null. Anything else, invalid UTF-8, a lone surrogate, a duplicate
 * key, nesting deeper than JSON_MAX_DEPTH or bytes after the value is refused. */
#ifndef TURNHOST_WORKER_JSON_H
#define TURNHOST_WORKER_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 16
#define JSON_ERROR_MAX 160

enum json_kind {
  JSON_NULL,
  JSON_FALSE,
  JSON_TRUE,
  JSON_INTEGER,
  JSON_NUMBER,
  JSON_STRING,
  JSON_ARRAY,
  JSON_OBJECT
};

/* One value. Strings point into the document's decoded-text buffer and may contain NUL (the
 * protocol refuses NUL itself, naming the field). Children of an array or object are linked by
 * index through `next` (0: none; node 0 is always the root, never a child). */
struct json_node {
  enum json_kind kind;
  /* JSON_INTEGER: the value; JSON_NUMBER is a fraction, an exponent or out of int64 range. */
  int64_t integer;
  const char *text;
  size_t text_len;
  /* The member name when the node is an object member. */
  const char *key;
  size_t key_len;
  size_t count;
  size_t first_child;
  size_t next;
};

struct json_document {
  struct json_node *nodes;
  size_t node_count;
  size_t node_cap;
  char *text;
  size_t text_used;
};

/* Parses `len` bytes. On failure returns false with `error` ("<why> at byte <n>"). The document
 * must be released with json_free either way. */
bool json_parse(const char *input, size_t len, struct json_document *doc,
                char error[JSON_ERROR_MAX]);
void json_free(struct json_document *doc);

/* The member `name` of object node `object`, or NULL. */
const struct json_node *json_member(const struct json_document *doc, const struct json_node *object,
                                    const char *name);
/* Length of the valid UTF-8 sequence at `s` (at most `n` bytes), or 0: overlong forms,
 * surrogates and code points above U+10FFFF are invalid. */
size_t utf8_valid_length(const unsigned char *s, size_t n);

const struct json_node *json_child(const struct json_document *doc, size_t index);

#endif
