// Backend for the benchmark: one epoll loop serving HTTP/1.1 on a TCP port (keep-alive unless the
// client says "Connection: close"; pipelined requests answered in order) and echoing on a UDP
// port, over IPv4 and IPv6 (a socket of each family for each, so the IPv4 path is a plain AF_INET
// socket's). In C so that the backends are not what limits a measurement of the proxy in front.
// Usage: bench-backend NAME TCP_PORT UDP_PORT   (prints "listening" once every socket is bound)

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FDS	   65536
#define BUF_SIZE   2048
#define MAX_EVENTS 256

static char *bufs[MAX_FDS];
static int lens[MAX_FDS];

static int bind_socket(int family, int type, int port) {
	int fd = socket(family, type | SOCK_NONBLOCK, 0);
	int one = 1;
	struct sockaddr_in addr4 = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct sockaddr_in6 addr6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
	if (fd < 0) {
		perror("socket");
		exit(1);
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	// The IPv4 socket serves IPv4: the IPv6 one takes IPv6 alone.
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	int bound = family == AF_INET6 ? bind(fd, (struct sockaddr *)&addr6, sizeof(addr6))
				       : bind(fd, (struct sockaddr *)&addr4, sizeof(addr4));
	if (bound < 0) {
		perror("bind");
		exit(1);
	}
	if (type == SOCK_STREAM && listen(fd, 4096) < 0) {
		perror("listen");
		exit(1);
	}
	return fd;
}

static void drop(int ep, int fd) {
	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
	lens[fd] = 0;
}

// Answers every complete request in the buffer; returns 0 when the connection must close.
static int serve(int fd, const char *response, int response_len) {
	char *buf = bufs[fd];
	for (;;) {
		char *end = memmem(buf, lens[fd], "\r\n\r\n", 4);
		if (!end)
			return lens[fd] < BUF_SIZE - 1;
		int consumed = (int)(end + 4 - buf);
		int close_after = memmem(buf, consumed, "onnection: close", 16) != NULL;
		if (write(fd, response, response_len) != response_len)
			return 0;
		memmove(buf, buf + consumed, lens[fd] - consumed);
		lens[fd] -= consumed;
		if (close_after)
			return 0;
	}
}

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: %s NAME TCP_PORT UDP_PORT\n", argv[0]);
		return 2;
	}
	const char *name = argv[1];
	char response[512];
	int body_len = (int)strlen(name) + 1;
	int response_len =
	    snprintf(response, sizeof(response),
		     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
		     "%d\r\n\r\n%s\n",
		     body_len, name);
	// [0] IPv4, [1] IPv6.
	int tcp[2] = {bind_socket(AF_INET, SOCK_STREAM, atoi(argv[2])),
		      bind_socket(AF_INET6, SOCK_STREAM, atoi(argv[2]))};
	int udp[2] = {bind_socket(AF_INET, SOCK_DGRAM, atoi(argv[3])),
		      bind_socket(AF_INET6, SOCK_DGRAM, atoi(argv[3]))};
	int ep = epoll_create1(0);
	for (int f = 0; f < 2; f++) {
		struct epoll_event ev = {.events = EPOLLIN};
		ev.data.fd = tcp[f];
		epoll_ctl(ep, EPOLL_CTL_ADD, tcp[f], &ev);
		ev.data.fd = udp[f];
		epoll_ctl(ep, EPOLL_CTL_ADD, udp[f], &ev);
	}
	printf("listening\n");
	fflush(stdout);

	struct epoll_event events[MAX_EVENTS];
	for (;;) {
		int n = epoll_wait(ep, events, MAX_EVENTS, -1);
		if (n < 0 && errno != EINTR)
			return 1;
		for (int i = 0; i < n; i++) {
			int fd = events[i].data.fd;
			if (fd == tcp[0] || fd == tcp[1]) {
				for (;;) {
					int c = accept4(fd, NULL, NULL, SOCK_NONBLOCK);
					if (c < 0)
						break;
					if (c >= MAX_FDS) {
						close(c);
						continue;
					}
					int one = 1;
					setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
					if (!bufs[c])
						bufs[c] = malloc(BUF_SIZE);
					lens[c] = 0;
					struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
				}
			} else if (fd == udp[0] || fd == udp[1]) {
				char dgram[1500];
				struct sockaddr_storage from;
				socklen_t from_len = sizeof(from);
				ssize_t got;
				while ((got = recvfrom(fd, dgram, sizeof(dgram), 0,
						       (struct sockaddr *)&from, &from_len)) >= 0) {
					sendto(fd, name, body_len - 1, 0, (struct sockaddr *)&from,
					       from_len);
					from_len = sizeof(from);
				}
			} else {
				ssize_t got =
				    read(fd, bufs[fd] + lens[fd], BUF_SIZE - 1 - lens[fd]);
				if (got <= 0) {
					if (got < 0 && errno == EAGAIN)
						continue;
					drop(ep, fd);
					continue;
				}
				lens[fd] += (int)got;
				if (!serve(fd, response, response_len))
					drop(ep, fd);
			}
		}
	}
}
