/* The HTTP/1.1 floor (issue 11): the least a server can do per keep-alive request over epoll. One thread, one
 * epoll set, non-blocking sockets; for every read it counts the request heads in it (each ends with an empty
 * line) and answers each with the same canned bytes as cbench's GET /hello (a date that never changes), in one
 * write. No parsing, no routing, no timers, no state beyond a few bytes per connection for an end of head
 * split across reads. Not a server: a measuring stick for bench/instr.sh and bench/ab.sh.
 *
 *   build/bench-floor [PORT]     listens on 127.0.0.1 (port 0: an ephemeral one), prints the port on its first
 *                                line, runs until SIGINT or SIGTERM. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static const char answer[] =
    "HTTP/1.1 200 OK\r\ndate: Tue, 01 Dec 2026 00:00:00 GMT\r\ncontent-type: text/plain\r\n"
    "content-length: 11\r\n\r\nHello, Joe!";

#define MAX_FD 65536
#define MAX_BATCH 64

static volatile sig_atomic_t stop;
static unsigned char tail[MAX_FD]; /* per connection: how much of "\r\n\r\n" the last read ended with */

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

/* The heads that end in buf[0, n), given that the previous read ended with *state bytes of "\r\n\r\n". */
static int count_heads(const char *buf, ssize_t n, unsigned char *state) {
  static const char end[4] = {'\r', '\n', '\r', '\n'};
  int heads = 0;
  unsigned s = *state;
  for (ssize_t i = 0; i < n; i++) {
    if (buf[i] == end[s]) {
      if (++s == 4) {
        heads++;
        s = 0;
      }
    } else {
      s = buf[i] == '\r' ? 1 : 0;
    }
  }
  *state = (unsigned char)s;
  return heads;
}

int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 0;
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 1024) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &alen) != 0) {
    perror("bench-floor");
    return 1;
  }
  printf("%d\n", ntohs(a.sin_port));
  fflush(stdout);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  static char buf[65536];
  static char out[MAX_BATCH * sizeof answer];
  for (int i = 0; i < MAX_BATCH; i++) memcpy(out + i * (sizeof answer - 1), answer, sizeof answer - 1);
  struct epoll_event evs[256];
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
          if (c >= MAX_FD) {
            close(c);
            continue;
          }
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          tail[c] = 0;
          struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        }
        continue;
      }
      ssize_t r = read(fd, buf, sizeof buf);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN) continue;
        close(fd); /* closing removes it from the epoll set */
        continue;
      }
      int heads = count_heads(buf, r, &tail[fd]);
      while (heads > 0) { /* a blocking peer is not this program's case: what does not fit is dropped */
        int k = heads < MAX_BATCH ? heads : MAX_BATCH;
        if (write(fd, out, (size_t)k * (sizeof answer - 1)) < 0) break;
        heads -= k;
      }
    }
  }
  return 0;
}
