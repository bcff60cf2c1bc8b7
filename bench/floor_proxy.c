/* The HTTP/1.1 proxy floor (issue 26): the least a reverse proxy can do per keep-alive request over epoll. One
 * thread, one epoll set, non-blocking sockets; each accepted connection is paired with a connection of its own to
 * the upstream, opened at accept, and every read on one side is written as it is to the other. No parsing, no
 * header rewriting, no pool, no timers: two reads and two writes per request, what the kernel asks of any proxy
 * that forwards one request per round trip. Beside bench/floor.c (the same for a server answering itself),
 * bench/proxy.sh measures what proxying costs at its floor (floor proxy / floor direct) against cbench's proxy.
 * Not a proxy: a measuring stick.
 *
 *   build/bench-floor-proxy PORT UPSTREAM_PORT   listens on 127.0.0.1:PORT (0: an ephemeral one, printed on the
 *                                                first line), forwards to 127.0.0.1:UPSTREAM_PORT, runs until
 *                                                SIGINT or SIGTERM. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FD 65536

static volatile sig_atomic_t stop;
static int partner[MAX_FD]; /* the other side of each connection; -1 when none */

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

static int listen_on(int port, struct sockaddr_in *a) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  *a = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof *a;
  if (bind(fd, (struct sockaddr *)a, sizeof *a) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, (struct sockaddr *)a, &alen) != 0)
    return -1;
  return fd;
}

/* The upstream side of a new client connection: connected before it is used (blocking, then made non-blocking),
 * so that the loop below never holds a byte for a connection in progress. */
static int connect_upstream(const struct sockaddr_in *up) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (const struct sockaddr *)up, sizeof *up) != 0 || fd >= MAX_FD) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void close_pair(int fd) {
  int other = partner[fd];
  partner[fd] = -1;
  close(fd); /* closing removes it from the epoll set */
  if (other >= 0) {
    partner[other] = -1;
    close(other);
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: bench-floor-proxy PORT UPSTREAM_PORT\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  for (int i = 0; i < MAX_FD; i++) partner[i] = -1;
  struct sockaddr_in a, up = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
  up.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int lfd = listen_on(atoi(argv[1]), &a);
  if (lfd < 0) {
    perror("bench-floor-proxy");
    return 1;
  }
  printf("%d\n", ntohs(a.sin_port));
  fflush(stdout);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  static char buf[65536];
  struct epoll_event evs[256];
  int one = 1;
  while (!stop) {
    int n = epoll_wait(ep, evs, 256, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        int c;
        while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
          int u = c < MAX_FD ? connect_upstream(&up) : -1;
          if (u < 0) {
            close(c);
            continue;
          }
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          partner[c] = u;
          partner[u] = c;
          struct epoll_event cev = {.events = EPOLLIN, .data.fd = c}, uev = {.events = EPOLLIN, .data.fd = u};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
          epoll_ctl(ep, EPOLL_CTL_ADD, u, &uev);
        }
        continue;
      }
      if (partner[fd] < 0) continue; /* closed earlier in this batch with its partner */
      ssize_t r = read(fd, buf, sizeof buf);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN) continue;
        close_pair(fd);
        continue;
      }
      /* A peer that does not read is not this program's case (one request in flight per connection): what the
       * other socket does not take is dropped, and the pair closed. */
      if (write(partner[fd], buf, (size_t)r) != r) close_pair(fd);
    }
  }
  return 0;
}
