#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_NODE SIZE_MAX

struct parser {
  const unsigned char *in;
  size_t len;
  size_t pos;
  struct json_document *doc;
  char *error;
};

static bool refuse(struct parser *p, const char *why) {
  snprintf(p->error, JSON_ERROR_MAX, "%s at byte %zu", why, p->pos);
  return false;
}

static void skip_space(struct parser *p) {
  while (p->pos < p->len) {
    unsigned char c = p->in[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
    p->pos++;
  }
}

/* Index of a new node, or NO_NODE when memory ran out. */
static size_t new_node(struct parser *p, enum json_kind kind) {
  struct json_document *d = p->doc;
  if (d->node_count == d->node_cap) {
    size_t cap = d->node_cap == 0 ? 16 : d->node_cap * 2;
    struct json_node *grown = realloc(d->nodes, cap * sizeof *grown);
    if (grown == NULL) return NO_NODE;
    d->nodes = grown;
    d->node_cap = cap;
  }
  struct json_node *n = &d->nodes[d->node_count];
  memset(n, 0, sizeof *n);
  n->kind = kind;
  return d->node_count++;
}

static bool parse_value(struct parser *p, size_t *out, int depth);

static bool literal(struct parser *p, const char *word, enum json_kind kind, size_t *out) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->in + p->pos, word, n) != 0) {
    return refuse(p, "unexpected token");
  }
  p->pos += n;
  *out = new_node(p, kind);
  return *out != NO_NODE || refuse(p, "out of memory");
}

static bool is_digit(unsigned char c) {
  return c >= '0' && c <= '9';
}

static bool parse_number(struct parser *p, size_t *out) {
  bool negative = false;
  if (p->in[p->pos] == '-') {
    negative = true;
    p->pos++;
  }
  if (p->pos >= p->len || !is_digit(p->in[p->pos])) return refuse(p, "a number needs digits");
  bool integral = true;
  bool overflow = false;
  uint64_t magnitude = 0;
  if (p->in[p->pos] == '0') {
    p->pos++;
  } else {
    while (p->pos < p->len && is_digit(p->in[p->pos])) {
      unsigned digit = (unsigned)(p->in[p->pos] - '0');
      if (magnitude > (UINT64_MAX - digit) / 10) overflow = true;
      magnitude = magnitude * 10 + digit;
      p->pos++;
    }
  }
  if (p->pos < p->len && p->in[p->pos] == '.') {
    integral = false;
    p->pos++;
    if (p->pos >= p->len || !is_digit(p->in[p->pos])) return refuse(p, "a fraction needs digits");
    while (p->pos < p->len && is_digit(p->in[p->pos]))
      p->pos++;
  }
  if (p->pos < p->len && (p->in[p->pos] == 'e' || p->in[p->pos] == 'E')) {
    integral = false;
    p->pos++;
    if (p->pos < p->len && (p->in[p->pos] == '+' || p->in[p->pos] == '-')) p->pos++;
    if (p->pos >= p->len || !is_digit(p->in[p->pos])) return refuse(p, "an exponent needs digits");
    while (p->pos < p->len && is_digit(p->in[p->pos]))
      p->pos++;
  }
  uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  bool fits = integral && !overflow && magnitude <= limit;
  size_t node = new_node(p, fits ? JSON_INTEGER : JSON_NUMBER);
  if (node == NO_NODE) return refuse(p, "out of memory");
  if (fits) {
    p->doc->nodes[node].integer =
        negative ? (magnitude == limit ? INT64_MIN : -(int64_t)magnitude) : (int64_t)magnitude;
  }
  *out = node;
  return true;
}

static int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool read_hex4(struct parser *p, unsigned *out) {
  if (p->len - p->pos < 4) return refuse(p, "\\u needs four hex digits");
  unsigned value = 0;
  for (int i = 0; i < 4; i++) {
    int digit = hex_value(p->in[p->pos + (size_t)i]);
    if (digit < 0) return refuse(p, "\\u needs four hex digits");
    value = value * 16 + (unsigned)digit;
  }
  p->pos += 4;
  *out = value;
  return true;
}

static void put_utf8(struct parser *p, unsigned cp) {
  char *o = p->doc->text + p->doc->text_used;
  size_t n;
  if (cp < 0x80) {
    o[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    n = 2;
  } else if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    n = 3;
  } else {
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    n = 4;
  }
  p->doc->text_used += n;
}

/* \uXXXX (the backslash and u consumed): a BMP character, or a high surrogate followed by an
 * escaped low surrogate. A lone surrogate has no UTF-8 form and is refused. */
static bool unicode_escape(struct parser *p) {
  unsigned cp;
  if (!read_hex4(p, &cp)) return false;
  if (cp >= 0xdc00 && cp <= 0xdfff) return refuse(p, "lone low surrogate");
  if (cp >= 0xd800 && cp <= 0xdbff) {
    if (p->len - p->pos < 2 || p->in[p->pos] != '\\' || p->in[p->pos + 1] != 'u') {
      return refuse(p, "lone high surrogate");
    }
    p->pos += 2;
    unsigned low;
    if (!read_hex4(p, &low)) return false;
    if (low < 0xdc00 || low > 0xdfff) return refuse(p, "high surrogate without a low one");
    cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
  }
  put_utf8(p, cp);
  return true;
}

/* Length of the valid UTF-8 sequence at `s` (at most `n` bytes), or 0: overlong forms,
 * surrogates and code points above U+10FFFF are invalid. */
size_t utf8_valid_length(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t len;
  unsigned cp;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return len;
}

static bool simple_escape(struct parser *p, unsigned char c) {
  static const char from[] = "\"\\/bfnrt";
  static const char to[] = "\"\\/\b\f\n\r\t";
  const char *at = memchr(from, c, sizeof from - 1);
  if (at == NULL) return refuse(p, "unknown escape");
  p->doc->text[p->doc->text_used++] = to[at - from];
  return true;
}

/* The opening quote consumed; decodes into the document's text buffer. */
static bool parse_string(struct parser *p, const char **text, size_t *text_len) {
  size_t start = p->doc->text_used;
  for (;;) {
    if (p->pos >= p->len) return refuse(p, "unterminated string");
    unsigned char c = p->in[p->pos];
    if (c == '"') {
      p->pos++;
      break;
    }
    if (c < 0x20) return refuse(p, "control character in string");
    if (c == '\\') {
      if (p->len - p->pos < 2) return refuse(p, "unterminated escape");
      unsigned char e = p->in[p->pos + 1];
      p->pos += 2;
      if (e == 'u') {
        if (!unicode_escape(p)) return false;
      } else if (!simple_escape(p, e)) {
        return false;
      }
      continue;
    }
    size_t n = utf8_valid_length(p->in + p->pos, p->len - p->pos);
    if (n == 0) return refuse(p, "invalid UTF-8");
    memcpy(p->doc->text + p->doc->text_used, p->in + p->pos, n);
    p->doc->text_used += n;
    p->pos += n;
  }
  *text = p->doc->text + start;
  *text_len = p->doc->text_used - start;
  return true;
}

static bool same_key(const struct json_node *n, const char *key, size_t key_len) {
  return n->key_len == key_len && memcmp(n->key, key, key_len) == 0;
}

static bool parse_members(struct parser *p, size_t node, int depth) {
  size_t last = 0;
  skip_space(p);
  if (p->pos < p->len && p->in[p->pos] == '}') {
    p->pos++;
    return true;
  }
  for (;;) {
    skip_space(p);
    if (p->pos >= p->len || p->in[p->pos] != '"') return refuse(p, "expected a member name");
    p->pos++;
    const char *key;
    size_t key_len;
    if (!parse_string(p, &key, &key_len)) return false;
    for (size_t c = p->doc->nodes[node].first_child; c != 0; c = p->doc->nodes[c].next) {
      if (same_key(&p->doc->nodes[c], key, key_len)) return refuse(p, "duplicate member name");
    }
    skip_space(p);
    if (p->pos >= p->len || p->in[p->pos] != ':') return refuse(p, "expected ':'");
    p->pos++;
    size_t child;
    if (!parse_value(p, &child, depth + 1)) return false;
    p->doc->nodes[child].key = key;
    p->doc->nodes[child].key_len = key_len;
    if (last == 0) {
      p->doc->nodes[node].first_child = child;
    } else {
      p->doc->nodes[last].next = child;
    }
    last = child;
    p->doc->nodes[node].count++;
    skip_space(p);
    if (p->pos < p->len && p->in[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->len && p->in[p->pos] == '}') {
      p->pos++;
      return true;
    }
    return refuse(p, "expected ',' or '}'");
  }
}

static bool parse_elements(struct parser *p, size_t node, int depth) {
  size_t last = 0;
  skip_space(p);
  if (p->pos < p->len && p->in[p->pos] == ']') {
    p->pos++;
    return true;
  }
  for (;;) {
    size_t child;
    if (!parse_value(p, &child, depth + 1)) return false;
    if (last == 0) {
      p->doc->nodes[node].first_child = child;
    } else {
      p->doc->nodes[last].next = child;
    }
    last = child;
    p->doc->nodes[node].count++;
    skip_space(p);
    if (p->pos < p->len && p->in[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->len && p->in[p->pos] == ']') {
      p->pos++;
      return true;
    }
    return refuse(p, "expected ',' or ']'");
  }
}

static bool parse_value(struct parser *p, size_t *out, int depth) {
  if (depth > JSON_MAX_DEPTH) return refuse(p, "nested too deeply");
  skip_space(p);
  if (p->pos >= p->len) return refuse(p, "unexpected end");
  unsigned char c = p->in[p->pos];
  switch (c) {
    case '{':
    case '[': {
      p->pos++;
      size_t node = new_node(p, c == '{' ? JSON_OBJECT : JSON_ARRAY);
      if (node == NO_NODE) return refuse(p, "out of memory");
      *out = node;
      return c == '{' ? parse_members(p, node, depth) : parse_elements(p, node, depth);
    }
    case '"': {
      p->pos++;
      const char *text;
      size_t text_len;
      if (!parse_string(p, &text, &text_len)) return false;
      size_t node = new_node(p, JSON_STRING);
      if (node == NO_NODE) return refuse(p, "out of memory");
      p->doc->nodes[node].text = text;
      p->doc->nodes[node].text_len = text_len;
      *out = node;
      return true;
    }
    case 't':
      return literal(p, "true", JSON_TRUE, out);
    case 'f':
      return literal(p, "false", JSON_FALSE, out);
    case 'n':
      return literal(p, "null", JSON_NULL, out);
    default:
      if (c == '-' || is_digit(c)) return parse_number(p, out);
      return refuse(p, "unexpected token");
  }
}

bool json_parse(const char *input, size_t len, struct json_document *doc,
                char error[JSON_ERROR_MAX]) {
  memset(doc, 0, sizeof *doc);
  error[0] = '\0';
  /* Decoded strings are never longer than their source. */
  doc->text = malloc(len + 1);
  if (doc->text == NULL) {
    snprintf(error, JSON_ERROR_MAX, "out of memory");
    return false;
  }
  struct parser p = {(const unsigned char *)input, len, 0, doc, error};
  size_t root;
  if (!parse_value(&p, &root, 1)) return false;
  skip_space(&p);
  if (p.pos != len) return refuse(&p, "unexpected bytes after the value");
  return true;
}

void json_free(struct json_document *doc) {
  free(doc->nodes);
  free(doc->text);
  memset(doc, 0, sizeof *doc);
}

const struct json_node *json_child(const struct json_document *doc, size_t index) {
  return index == 0 || index >= doc->node_count ? NULL : &doc->nodes[index];
}

const struct json_node *json_member(const struct json_document *doc, const struct json_node *object,
                                    const char *name) {
  size_t name_len = strlen(name);
  for (size_t c = object->first_child; c != 0; c = doc->nodes[c].next) {
    if (same_key(&doc->nodes[c], name, name_len)) return &doc->nodes[c];
  }
  return NULL;
}
