/* The worker's end of the protocol fd: framed reads (a line of at most PROTOCOL_MAX_LINE_BYTES,
 * newline included) and framed writes. A stream that lost its framing is treated as closed: it
 * cannot be trusted again. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "worker.h"

bool channel_open(struct channel *c, int fd) {
  c->fd = fd;
  c->used = 0;
  c->closed = false;
  c->buffer = malloc(PROTOCOL_MAX_LINE_BYTES);
  return c->buffer != NULL;
}

void channel_send(struct channel *c, const char *line, size_t len) {
  while (len > 0) {
    ssize_t n = send(c->fd, line, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    line += n;
    len -= (size_t)n;
  }
}

void channel_send_error(struct channel *c, const char *code, const char *detail) {
  char line[PROTOCOL_DETAIL_MAX * 6 + 128];
  size_t len = encode_error(line, sizeof line, code, detail);
  if (len > 0) channel_send(c, line, len);
}

void channel_finish(struct channel *c) {
  shutdown(c->fd, SHUT_WR);
}

void channel_discard(struct channel *c) {
  char sink[4096];
  while (recv(c->fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
}

bool channel_fill(struct channel *c, char detail[DETAIL_MAX]) {
  if (c->closed) return false;
  if (c->used == PROTOCOL_MAX_LINE_BYTES) {
    snprintf(detail, DETAIL_MAX, "a line exceeds %d bytes", PROTOCOL_MAX_LINE_BYTES);
    c->closed = true;
    return false;
  }
  ssize_t n;
  do {
    n = read(c->fd, c->buffer + c->used, PROTOCOL_MAX_LINE_BYTES - c->used);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    if (n < 0) {
      snprintf(detail, DETAIL_MAX, "%s", strerror(errno));
    } else {
      snprintf(detail, DETAIL_MAX, "%s",
               c->used > 0 ? "closed mid-line" : "closed by the supervisor");
    }
    c->closed = true;
    return false;
  }
  c->used += (size_t)n;
  return true;
}

enum channel_event channel_take(struct channel *c, struct supervisor_message *m,
                                char detail[DETAIL_MAX]) {
  char *newline = memchr(c->buffer, '\n', c->used);
  if (newline == NULL) return CHANNEL_NONE;
  size_t len = (size_t)(newline - c->buffer);
  enum parse_outcome outcome = parse_supervisor_message(c->buffer, len, m, detail);
  memmove(c->buffer, newline + 1, c->used - len - 1);
  c->used -= len + 1;
  return outcome == PARSE_OK ? CHANNEL_MESSAGE : CHANNEL_INVALID;
}

enum channel_event channel_next(struct channel *c, struct supervisor_message *m,
                                char detail[DETAIL_MAX]) {
  for (;;) {
    enum channel_event event = channel_take(c, m, detail);
    if (event != CHANNEL_NONE) return event;
    if (!channel_fill(c, detail)) return CHANNEL_CLOSED;
  }
}
