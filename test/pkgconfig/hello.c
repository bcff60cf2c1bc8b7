/* An external program built against the installed library with `pkg-config --cflags --libs cbench`: it starts
 * a server on a free port, fetches /hello over a plain socket, checks the whole body, and stops the server.
 * Exit status 0 when all of that worked. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cbench.h>

static int fetch_hello(int port, char *buf, size_t cap, size_t *len) {
  static const char req[] = "GET /hello HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n";
  struct sockaddr_in sa;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ssize_t n;
  if (fd < 0) return -1;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || write(fd, req, sizeof req - 1) != sizeof req - 1) {
    close(fd);
    return -1;
  }
  /* connection: close, so the answer ends where the stream ends. */
  *len = 0;
  while (*len < cap - 1 && (n = read(fd, buf + *len, cap - 1 - *len)) > 0) *len += (size_t)n;
  buf[*len] = '\0';
  close(fd);
  return 0;
}

int main(void) {
  cb_config_t cfg;
  cb_server_t *srv;
  char buf[4096];
  const char *body;
  size_t len;
  int r, port;

  cb_config_init(&cfg);
  cfg.port = 0;
  cfg.threads = 1;
  if ((r = cb_server_start(&cfg, &srv)) != 0) {
    fprintf(stderr, "hello: cb_server_start: %s (%s)\n", cb_strerror(r), cb_err_name(r));
    return 1;
  }
  port = cb_server_port(srv);
  if (fetch_hello(port, buf, sizeof buf, &len) != 0) {
    perror("hello: fetching /hello");
    cb_server_stop(srv);
    return 1;
  }
  body = strstr(buf, "\r\n\r\n");
  if (strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) != 0 || body == NULL || strcmp(body + 4, "Hello, Joe!") != 0) {
    fprintf(stderr, "hello: unexpected answer (%zu bytes):\n%s\n", len, buf);
    cb_server_stop(srv);
    return 1;
  }
  if ((r = cb_server_stop(srv)) != 0) {
    fprintf(stderr, "hello: cb_server_stop: %s\n", cb_strerror(r));
    return 1;
  }
  printf("hello: cbench %s served /hello on port %d: ok\n", cb_version(), port);
  return 0;
}
