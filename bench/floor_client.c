/* The HTTP/1.1 client floor (issue 28): the least a load generator can do per keep-alive request over epoll, the
 * counterpart of bench/floor.c. One thread, one epoll set, N blocking-connected then non-blocking sockets; each
 * connection has one request in flight (closed loop) and sends the same canned bytes again as soon as its answer
 * is in. The answer's length is learnt once, from the head of the first answer on the first connection (status
 * line and headers up to the empty line, plus content-length); after that an answer is counted by length alone,
 * with no parsing. cbench's answers to /hello all have the same length (its date is fixed-width), so an answer of
 * any other length means the server is not the one this program measures: it stops with an error rather than
 * count wrong. No histogram, no timers beyond the deadline, no per-request state beyond a byte count. Not a load
 * generator: a measuring stick for cbench-load's client CPU per request (bench/load_figures.sh).
 *
 *   build/bench-floor-client PORT CONNECTIONS SECONDS [PATH]
 *
 * Connects CONNECTIONS times to 127.0.0.1:PORT, sends `GET PATH HTTP/1.1` (PATH /hello unless given) for SECONDS,
 * then waits up to 1 s for the answers in flight, and prints the requests completed and its own CPU time (user +
 * system, getrusage). Exit 0; 1 when the server misbehaves (refused, closed, an answer of another length, nothing
 * answered); 2 with a usage line on bad arguments. */
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
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 10000
#define MAX_HEAD 8192

struct conn {
  int fd;
  unsigned got; /* bytes of the answer in flight read so far */
};

static struct conn conns[MAX_CONNS];
static char request[512];
static size_t request_len;
static unsigned answer_len;

static int usage(void) {
  fprintf(stderr, "usage: bench-floor-client PORT CONNECTIONS SECONDS [PATH]\n"
                  "  PORT 1-65535 on 127.0.0.1, CONNECTIONS 1-%d, SECONDS 1-3600, PATH starting with / (/hello)\n",
          MAX_CONNS);
  return 2;
}

/* A whole decimal argument in [lo, hi], or -1: a typo must not become a zero-second run. */
static long parse_int(const char *s, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return -1;
  return v;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int connect_one(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Sends the request on the blocking socket fd and reads its answer's head; sets answer_len to the head's length
 * plus its content-length. Returns 0, or -1 with a message. A 2 s receive timeout keeps a silent server from
 * hanging the run. */
static int learn_length(int fd) {
  struct timeval tv = {.tv_sec = 2};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (write(fd, request, request_len) != (ssize_t)request_len) {
    perror("bench-floor-client: write");
    return -1;
  }
  char head[MAX_HEAD + 1];
  size_t n = 0;
  char *end = NULL;
  while (end == NULL) {
    if (n == MAX_HEAD) {
      fprintf(stderr, "bench-floor-client: the first answer's head is over %d bytes\n", MAX_HEAD);
      return -1;
    }
    ssize_t r = read(fd, head + n, MAX_HEAD - n);
    if (r <= 0) {
      fprintf(stderr, "bench-floor-client: no answer to the first request (%s)\n", r == 0 ? "closed" : strerror(errno));
      return -1;
    }
    n += (size_t)r;
    head[n] = '\0';
    end = strstr(head, "\r\n\r\n");
  }
  size_t head_len = (size_t)(end - head) + 4;
  long cl = -1;
  for (char *line = strstr(head, "\r\n"); line != NULL && line < end; line = strstr(line + 2, "\r\n")) {
    if (strncasecmp(line + 2, "content-length:", 15) == 0) cl = strtol(line + 17, NULL, 10);
  }
  if (strncmp(head, "HTTP/1.1 200 ", 13) != 0 || cl < 0 || cl > 1 << 20) {
    fprintf(stderr, "bench-floor-client: the first answer is not a 200 with a content-length: %.*s\n",
            (int)(strcspn(head, "\r")), head);
    return -1;
  }
  answer_len = (unsigned)(head_len + (size_t)cl);
  /* The rest of the first answer's body, so that the connection starts the loop with nothing in flight. */
  size_t have = n;
  while (have < answer_len) {
    ssize_t r = read(fd, head, sizeof head - 1);
    if (r <= 0) {
      fprintf(stderr, "bench-floor-client: the first answer was cut short\n");
      return -1;
    }
    have += (size_t)r;
  }
  if (have != answer_len) {
    fprintf(stderr, "bench-floor-client: %zu bytes after a first answer of %u\n", have - answer_len, answer_len);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4 || argc > 5) return usage();
  long port = parse_int(argv[1], 1, 65535);
  long nconns = parse_int(argv[2], 1, MAX_CONNS);
  long secs = parse_int(argv[3], 1, 3600);
  const char *path = argc == 5 ? argv[4] : "/hello";
  if (port < 0 || nconns < 0 || secs < 0 || path[0] != '/' || strlen(path) > 256 || strpbrk(path, " \r\n"))
    return usage();
  signal(SIGPIPE, SIG_IGN);
  request_len = (size_t)snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%ld\r\n\r\n", path,
                                 port);

  int ep = epoll_create1(EPOLL_CLOEXEC);
  for (long i = 0; i < nconns; i++) {
    int fd = connect_one((int)port);
    if (fd < 0) {
      fprintf(stderr, "bench-floor-client: connect to 127.0.0.1:%ld: %s\n", port, strerror(errno));
      return 1;
    }
    if (i == 0 && learn_length(fd) != 0) return 1;
    struct timeval tv = {0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
      perror("bench-floor-client: fcntl");
      return 1;
    }
    conns[i] = (struct conn){.fd = fd};
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }

  static char buf[65536];
  struct epoll_event evs[256];
  unsigned long long done = 0; /* the first answer, read by learn_length, is not counted */
  long in_flight = 0;
  for (long i = 0; i < nconns; i++) {
    if (write(conns[i].fd, request, request_len) != (ssize_t)request_len) {
      perror("bench-floor-client: write");
      return 1;
    }
    in_flight++;
  }
  double start = now_s(), deadline = start + (double)secs, drain_end = deadline + 1.0;
  int sending = 1;
  while (in_flight > 0) {
    double t = now_s();
    if (sending && t >= deadline) sending = 0;
    if (!sending && t >= drain_end) break;
    int ms = (int)(((sending ? deadline : drain_end) - t) * 1000.0) + 1;
    int n = epoll_wait(ep, evs, 256, ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      perror("bench-floor-client: epoll_wait");
      return 1;
    }
    for (int e = 0; e < n; e++) {
      struct conn *c = &conns[evs[e].data.u32];
      ssize_t r = read(c->fd, buf, sizeof buf);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN) continue;
        fprintf(stderr, "bench-floor-client: the server %s a connection after %llu answers\n",
                r == 0 ? "closed" : "reset", done);
        return 1;
      }
      c->got += (unsigned)r;
      if (c->got < answer_len) continue;
      if (c->got > answer_len) {
        fprintf(stderr, "bench-floor-client: an answer is not %u bytes long (%u bytes came before the next request)\n",
                answer_len, c->got);
        return 1;
      }
      c->got = 0;
      done++;
      if (sending) {
        if (write(c->fd, request, request_len) != (ssize_t)request_len) {
          perror("bench-floor-client: write");
          return 1;
        }
      } else {
        in_flight--;
      }
    }
  }
  double elapsed = now_s() - start;
  if (in_flight > 0) {
    /* With one request in flight an answer shorter than the first leaves its connection waiting for bytes that
     * never come: what is still partial after the drain is named, not silently left out. */
    fprintf(stderr, "bench-floor-client: %ld answers still incomplete 1 s after the end (shorter than %u bytes?)\n",
            in_flight, answer_len);
    return 1;
  }
  if (done == 0) {
    fprintf(stderr, "bench-floor-client: no answer in %ld s\n", secs);
    return 1;
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
  double sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
  printf("requests %llu\nanswer_bytes %u\nconnections %ld\nelapsed_s %.3f\nrate %.0f\ncpu_user_s %.3f\n"
         "cpu_system_s %.3f\ncpu_us_per_request %.3f\n",
         done, answer_len, nconns, elapsed, (double)done / elapsed, user, sys, (user + sys) * 1e6 / (double)done);
  return 0;
}
