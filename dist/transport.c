/* The TCP ring under a process group: the rendezvous at rank 0, the ring's
 * connections, and the exchange every collective is made of.
 *
 * Rendezvous: every rank opens a listening socket on a free port (its ring
 * port). Ranks 1..N-1 connect to rank 0 at the master's address and say
 * who they are and their ring port; rank 0 answers each with the table of
 * every rank's address and ring port, then each rank connects to the next
 * one's ring port and accepts the previous one. A connection to either
 * port that does not greet as a mixgrad rank is dropped (see greeter), so
 * a port scanner cannot break a rendezvous. All sockets are non-blocking
 * and every wait is a poll() with a deadline, so a missing or dead peer is
 * an error after the timeout, never a hang.
 */
#include "dist/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kernels/base_internal.h"

#define HELLO_MAGIC 0x6d786431u /* "mxd1" */

typedef struct {
  uint32_t ip;   /* network order */
  uint16_t port; /* host order */
} peer_address;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* poll()'s timeout for the time left before deadline, rounded up. */
static int ms_left(double deadline) {
  double s = deadline - now();
  if (s <= 0) return 0;
  return s > 1e6 ? 1000000000 : (int)(s * 1000) + 1;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* A listening socket on port (0: a free one) of every interface. */
static int listen_on(int port, int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_ANY)};
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, (const struct sockaddr *)&a, sizeof a) != 0 || listen(fd, backlog) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

static int port_of(int fd) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  return getsockname(fd, (struct sockaddr *)&a, &len) == 0 ? ntohs(a.sin_port) : -1;
}

/* Connections accepted on a listening socket and not yet heard from. A
 * connection counts once it has sent its greeting: a few 32-bit words that
 * begin with HELLO_MAGIC. Anything else that connects (a port scanner, a
 * health check, a client of another service) is dropped, and one that
 * connects and says nothing never holds up the others: every pending
 * connection is read as its bytes arrive. */
#define MAX_PENDING 16

typedef struct {
  int fd;
  uint32_t ip;       /* the peer's, network order */
  size_t got;        /* bytes of the greeting read so far */
  uint32_t words[4]; /* the greeting, network order */
} pending_connection;

typedef struct {
  int listener;
  int n_pending, dropped;
  pending_connection pending[MAX_PENDING]; /* oldest first */
} greeter;

/* Takes pending connection i out of the list (keeping the order); its fd. */
static int take_pending(greeter *g, int i) {
  int fd = g->pending[i].fd;
  memmove(&g->pending[i], &g->pending[i + 1], (size_t)(g->n_pending - i - 1) * sizeof g->pending[0]);
  g->n_pending--;
  return fd;
}

static void drop_pending(greeter *g, int i) {
  close(take_pending(g, i));
  g->dropped++;
}

static void greeter_close(greeter *g) {
  for (int i = g->n_pending - 1; i >= 0; i--) drop_pending(g, i);
}

/* Reads what pending connection i has sent. Returns its fd (taken out of
 * the pending list, the greeting in greeting) once all `size` bytes are
 * there; -1 while it is incomplete or when it was dropped. */
static int read_greeting(greeter *g, int i, size_t size, uint32_t *greeting, uint32_t *peer_ip) {
  pending_connection *c = &g->pending[i];
  ssize_t r = recv(c->fd, (char *)c->words + c->got, size - c->got, 0);
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return -1;
  if (r > 0) c->got += (size_t)r;
  if (r <= 0 || (c->got >= sizeof c->words[0] && ntohl(c->words[0]) != HELLO_MAGIC)) {
    drop_pending(g, i);
    return -1;
  }
  if (c->got < size) return -1;
  memcpy(greeting, c->words, size);
  if (peer_ip) *peer_ip = c->ip;
  return take_pending(g, i);
}

/* The next connection on g's listener to send a greeting of `words`
 * words, before deadline (-1 with errno ETIMEDOUT after it). */
static int next_greeting(greeter *g, size_t words, double deadline, uint32_t *greeting, uint32_t *peer_ip) {
  for (;;) {
    struct pollfd p[MAX_PENDING + 1];
    p[0] = (struct pollfd){g->listener, POLLIN, 0};
    for (int i = 0; i < g->n_pending; i++) p[i + 1] = (struct pollfd){g->pending[i].fd, POLLIN, 0};
    int k = poll(p, (nfds_t)g->n_pending + 1, ms_left(deadline));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = ETIMEDOUT;
      return -1;
    }
    /* Backwards, so that dropping one does not move those still to read. */
    for (int i = g->n_pending - 1; i >= 0; i--) {
      int fd = p[i + 1].revents ? read_greeting(g, i, words * sizeof *greeting, greeting, peer_ip) : -1;
      if (fd >= 0) return fd;
    }
    if (!p[0].revents) continue;
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = accept4(g->listener, (struct sockaddr *)&a, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) return -1;
      continue;
    }
    if (g->n_pending == MAX_PENDING) drop_pending(g, 0); /* a flood of strays: the oldest goes */
    g->pending[g->n_pending++] = (pending_connection){.fd = fd, .ip = a.sin_addr.s_addr};
  }
}

/* A connection to `to`, tried again while nobody listens there yet (the
 * peer may start later), until deadline. */
static int connect_until(const struct sockaddr_in *to, double deadline) {
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int err = connect(fd, (const struct sockaddr *)to, sizeof *to) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      struct pollfd p = {fd, POLLOUT, 0};
      int n;
      while ((n = poll(&p, 1, ms_left(deadline))) < 0 && errno == EINTR) {
      }
      socklen_t len = sizeof err;
      if (n == 0) err = ETIMEDOUT;
      else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err == 0) return fd;
    close(fd);
    if ((err != ECONNREFUSED && err != ECONNRESET) || now() >= deadline) {
      errno = err == ECONNREFUSED || err == ECONNRESET ? ETIMEDOUT : err;
      return -1;
    }
    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
  }
}

/* Sends or receives exactly n bytes on fd before deadline. Returns 0, or
 * -1 with errno (EPIPE: the peer closed the connection). */
static int transfer(int fd, void *buf, size_t n, bool sending, double deadline) {
  size_t done = 0;
  while (done < n) {
    struct pollfd p = {fd, sending ? POLLOUT : POLLIN, 0};
    int k = poll(&p, 1, ms_left(deadline));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = ETIMEDOUT;
      return -1;
    }
    ssize_t r = sending ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL) : recv(fd, (char *)buf + done, n - done, 0);
    if (r == 0) {
      errno = EPIPE;
      return -1;
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return -1;
    }
    done += (size_t)r;
  }
  return 0;
}

static mx_status fail(const char *op, int rank, const char *what) {
  return mx__error(MX_BACKEND_ERROR, "%s: rank %d: %s: %s", op, rank, what,
                   errno == EPIPE ? "the peer closed the connection" : strerror(errno));
}

/* The master's IPv4 address (a name or a dotted quad) and port. */
static mx_status resolve(const char *op, const char *addr, int port, struct sockaddr_in *out) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(addr, NULL, &hints, &res);
  if (rc != 0 || !res)
    return mx__error(MX_INVALID_ARGUMENT, "%s: cannot resolve the master address '%s': %s", op, addr,
                     gai_strerror(rc));
  *out = *(const struct sockaddr_in *)res->ai_addr;
  out->sin_port = htons((uint16_t)port);
  freeaddrinfo(res);
  return MX_OK;
}

/* Rank 0's side of the rendezvous: hears every other rank at the master
 * port and sends each the table of ring addresses. */
static mx_status gather_table(mx__ring *ring, const char *op, int master_port, peer_address *table, double deadline) {
  int n = ring->world_size;
  int *fds = malloc((size_t)n * sizeof *fds);
  if (!fds) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  greeter greet = {.listener = listen_on(master_port, n)};
  for (int i = 0; i < n; i++) fds[i] = -1;
  mx_status st = MX_OK;
  char what[200];
  if (greet.listener < 0) {
    snprintf(what, sizeof what, "cannot listen on the master port %d", master_port);
    st = fail(op, 0, what);
  }
  for (int k = 1; st == MX_OK && k < n; k++) {
    uint32_t ip = 0, hello[4];
    int fd = next_greeting(&greet, 4, deadline, hello, &ip);
    if (fd < 0) {
      char strays[96] = "";
      if (greet.dropped > 0)
        snprintf(strays, sizeof strays, "; dropped %d connection%s that did not greet as a mixgrad rank", greet.dropped,
                 greet.dropped == 1 ? "" : "s");
      snprintf(what, sizeof what, "waiting for rank %d of %d at port %d (%d arrived%s)", k, n, master_port, k - 1,
               strays);
      st = fail(op, 0, what);
    } else {
      uint32_t rank = ntohl(hello[1]), world = ntohl(hello[2]);
      if (world != (uint32_t)n)
        st = mx__error(MX_INVALID_ARGUMENT, "%s: rank %u was started with world_size %u, rank 0 with %d", op, rank,
                       world, n);
      else if (rank == 0 || rank >= (uint32_t)n || fds[rank] >= 0)
        st = mx__error(MX_INVALID_ARGUMENT, "%s: two processes claim rank %u", op, rank);
      else
        fds[rank] = fd, fd = -1, table[rank] = (peer_address){ip, (uint16_t)ntohl(hello[3])};
    }
    close_fd(&fd);
  }
  /* Each rank reaches rank 0 at the address it used for the master. */
  for (int k = 1; st == MX_OK && k < n; k++) {
    struct sockaddr_in self;
    socklen_t len = sizeof self;
    if (getsockname(fds[k], (struct sockaddr *)&self, &len) != 0) {
      st = fail(op, 0, "getsockname");
      break;
    }
    uint32_t *msg = malloc(2 * (size_t)n * sizeof *msg);
    if (!msg) {
      st = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
      break;
    }
    for (int i = 0; i < n; i++) {
      msg[2 * i] = i == 0 ? self.sin_addr.s_addr : table[i].ip;
      msg[2 * i + 1] = htonl(table[i].port);
    }
    if (transfer(fds[k], msg, 2 * (size_t)n * sizeof *msg, true, deadline) != 0) {
      snprintf(what, sizeof what, "sending the ring's addresses to rank %d", k);
      st = fail(op, 0, what);
    }
    free(msg);
  }
  for (int i = 0; i < n; i++) close_fd(&fds[i]);
  free(fds);
  greeter_close(&greet);
  close_fd(&greet.listener);
  return st;
}

/* The other ranks' side: says hello to rank 0 and reads the table. */
static mx_status fetch_table(mx__ring *ring, const char *op, const struct sockaddr_in *master, peer_address *table,
                             double deadline) {
  int n = ring->world_size;
  char what[128], ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &master->sin_addr, ip, sizeof ip);
  int fd = connect_until(master, deadline);
  if (fd < 0) {
    snprintf(what, sizeof what, "cannot reach rank 0 at %s:%d", ip, ntohs(master->sin_port));
    return fail(op, ring->rank, what);
  }
  uint32_t hello[4] = {htonl(HELLO_MAGIC), htonl((uint32_t)ring->rank), htonl((uint32_t)n),
                       htonl(table[ring->rank].port)};
  uint32_t *msg = malloc(2 * (size_t)n * sizeof *msg);
  mx_status st = MX_OK;
  if (!msg) st = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  else if (transfer(fd, hello, sizeof hello, true, deadline) != 0 ||
           transfer(fd, msg, 2 * (size_t)n * sizeof *msg, false, deadline) != 0)
    st = fail(op, ring->rank, "rendezvous with rank 0 (is every rank's world_size the same?)");
  else
    for (int i = 0; i < n; i++) table[i] = (peer_address){msg[2 * i], (uint16_t)ntohl(msg[2 * i + 1])};
  free(msg);
  close(fd);
  return st;
}

/* Connects to the next rank and accepts the previous one; each side greets
 * with its rank, so a stray connection to the ring port is dropped. */
static mx_status link_neighbours(mx__ring *ring, const char *op, int listener, const peer_address *table,
                                 double deadline) {
  int n = ring->world_size, next = (ring->rank + 1) % n, prev = (ring->rank + n - 1) % n;
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(table[next].port),
                           .sin_addr.s_addr = table[next].ip};
  char what[64];
  uint32_t me[2] = {htonl(HELLO_MAGIC), htonl((uint32_t)ring->rank)}, them[2];
  ring->right = connect_until(&to, deadline);
  if (ring->right < 0 || transfer(ring->right, me, sizeof me, true, deadline) != 0) {
    snprintf(what, sizeof what, "connecting to rank %d", next);
    return fail(op, ring->rank, what);
  }
  greeter greet = {.listener = listener};
  ring->left = next_greeting(&greet, 2, deadline, them, NULL);
  greeter_close(&greet);
  if (ring->left < 0) {
    snprintf(what, sizeof what, "waiting for rank %d to connect", prev);
    return fail(op, ring->rank, what);
  }
  if (ntohl(them[1]) != (uint32_t)prev)
    return mx__error(MX_BACKEND_ERROR, "%s: rank %d: expected rank %d to connect, got rank %u", op, ring->rank, prev,
                     ntohl(them[1]));
  /* Collectives send small headers and wait for the answer: no Nagle delay. */
  int one = 1;
  setsockopt(ring->left, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(ring->right, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return MX_OK;
}

mx_status mx__ring_connect(mx__ring *ring, const char *op, int rank, int world_size, const char *master_addr,
                           int master_port, double timeout) {
  *ring = (mx__ring){.rank = rank, .world_size = world_size, .left = -1, .right = -1, .timeout = timeout};
  if (world_size == 1) return MX_OK;
  double deadline = now() + timeout;
  struct sockaddr_in master;
  mx_status st = resolve(op, master_addr, master_port, &master);
  if (st != MX_OK) return st;
  peer_address *table = calloc((size_t)world_size, sizeof *table);
  int listener = listen_on(0, 1);
  if (!table) st = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  else if (listener < 0 || port_of(listener) < 0) st = fail(op, rank, "cannot open the ring port");
  else {
    table[rank].port = (uint16_t)port_of(listener);
    st = rank == 0 ? gather_table(ring, op, master_port, table, deadline) : fetch_table(ring, op, &master, table, deadline);
    if (st == MX_OK) st = link_neighbours(ring, op, listener, table, deadline);
  }
  close_fd(&listener);
  free(table);
  if (st != MX_OK) mx__ring_close(ring);
  return st;
}

mx_status mx__ring_exchange(mx__ring *ring, const char *op, const void *send_buf, size_t send_bytes, void *recv_buf,
                            size_t recv_bytes) {
  int n = ring->world_size, next = (ring->rank + 1) % n, prev = (ring->rank + n - 1) % n;
  size_t sent = 0, got = 0;
  double deadline = now() + ring->timeout;
  while (sent < send_bytes || got < recv_bytes) {
    struct pollfd p[2];
    int np = 0, is = -1, ir = -1;
    if (sent < send_bytes) is = np, p[np++] = (struct pollfd){ring->right, POLLOUT, 0};
    if (got < recv_bytes) ir = np, p[np++] = (struct pollfd){ring->left, POLLIN, 0};
    int k = poll(p, (nfds_t)np, ms_left(deadline));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return fail(op, ring->rank, "poll");
    if (k == 0)
      return mx__error(MX_BACKEND_ERROR, "%s: rank %d: no word from rank %d within %g s (is every rank calling it?)",
                       op, ring->rank, got < recv_bytes ? prev : next, ring->timeout);
    if (is >= 0 && p[is].revents) {
      ssize_t w = send(ring->right, (const char *)send_buf + sent, send_bytes - sent, MSG_NOSIGNAL);
      if (w >= 0) sent += (size_t)w;
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        char what[48];
        snprintf(what, sizeof what, "sending to rank %d", next);
        if (errno == ECONNRESET) errno = EPIPE;
        return fail(op, ring->rank, what);
      }
    }
    if (ir >= 0 && p[ir].revents) {
      ssize_t r = recv(ring->left, (char *)recv_buf + got, recv_bytes - got, 0);
      if (r > 0) got += (size_t)r;
      else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        char what[48];
        snprintf(what, sizeof what, "receiving from rank %d", prev);
        if (r == 0 || errno == ECONNRESET) errno = EPIPE;
        return fail(op, ring->rank, what);
      }
    }
  }
  return MX_OK;
}

void mx__ring_close(mx__ring *ring) {
  close_fd(&ring->left);
  close_fd(&ring->right);
}
