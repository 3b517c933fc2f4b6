// Load generator for the benchmark, run inside the client pod's namespace.
//   loadgen crr IP PORT SECONDS MAX_CONNS OUT  new TCP connection per request (TCP_CRR-like):
//   connect,
//                                             one HTTP/1.1 request, read the reply, close with RST
//                                             (no TIME_WAIT on either side, so ports can be
//                                             reused).
//   loadgen udp IP PORT COUNT OUT              a new UDP socket (fresh source port) per probe: one
//                                             datagram, wait for the echo.
// OUT gets one line per attempt: "<first-packet us> <whole request us>" (crr) or "<rtt us>" (udp);
// failures are counted, not written. stdout: {"attempts":..,"errors":..,"elapsedUs":..}.
// IP is an IPv4 or an IPv6 address (the sockets are of its family).
// Every loop is bounded by count and time; every socket wait by a 1 s timeout.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void set_timeouts(int fd) {
	struct timeval tv = {.tv_sec = 1};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// One request on a new connection; returns 0 and the two times on success.
// The target: an IPv4 or an IPv6 address and a port.
struct target {
	struct sockaddr_storage addr;
	socklen_t len;
	int family;
};

static int crr_once(const struct target *to, double *connect_us, double *total_us) {
	static const char request[] = "GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
	char reply[1024];
	int fd = socket(to->family, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	set_timeouts(fd);
	struct linger rst = {.l_onoff = 1, .l_linger = 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	double start = now_us();
	int ok = connect(fd, (const struct sockaddr *)&to->addr, to->len) == 0;
	double connected = now_us();
	ok = ok && write(fd, request, sizeof(request) - 1) == (ssize_t)(sizeof(request) - 1);
	int got = 0;
	// The reply is small and ends with the body's newline; read until it is complete.
	while (ok && got < (int)sizeof(reply) - 1) {
		ssize_t n = read(fd, reply + got, sizeof(reply) - 1 - got);
		if (n <= 0) {
			ok = 0;
			break;
		}
		got += (int)n;
		reply[got] = 0;
		char *body = strstr(reply, "\r\n\r\n");
		char *length = strstr(reply, "Content-Length: ");
		if (body && length && got - (body + 4 - reply) >= atoi(length + 16))
			break;
	}
	double done = now_us();
	close(fd);
	*connect_us = connected - start;
	*total_us = done - start;
	return ok ? 0 : -1;
}

static int udp_once(const struct target *to, double *rtt_us) {
	char reply[512];
	int fd = socket(to->family, SOCK_DGRAM, 0);
	if (fd < 0)
		return -1;
	set_timeouts(fd);
	double start = now_us();
	int ok = sendto(fd, "probe", 5, 0, (const struct sockaddr *)&to->addr, to->len) == 5 &&
		 recv(fd, reply, sizeof(reply), 0) > 0;
	*rtt_us = now_us() - start;
	close(fd);
	return ok ? 0 : -1;
}

int main(int argc, char **argv) {
	int crr = argc == 7 && strcmp(argv[1], "crr") == 0;
	int udp = argc == 6 && strcmp(argv[1], "udp") == 0;
	if (!crr && !udp) {
		fprintf(stderr,
			"usage: %s crr IP PORT SECONDS MAX_CONNS OUT | udp IP PORT COUNT OUT\n",
			argv[0]);
		return 2;
	}
	struct target to = {0};
	struct sockaddr_in *to4 = (struct sockaddr_in *)&to.addr;
	struct sockaddr_in6 *to6 = (struct sockaddr_in6 *)&to.addr;
	if (inet_pton(AF_INET, argv[2], &to4->sin_addr) == 1) {
		to4->sin_family = to.family = AF_INET;
		to4->sin_port = htons(atoi(argv[3]));
		to.len = sizeof(*to4);
	} else if (inet_pton(AF_INET6, argv[2], &to6->sin6_addr) == 1) {
		to6->sin6_family = to.family = AF_INET6;
		to6->sin6_port = htons(atoi(argv[3]));
		to.len = sizeof(*to6);
	} else {
		fprintf(stderr, "bad address %s\n", argv[2]);
		return 2;
	}
	FILE *out = fopen(argv[crr ? 6 : 5], "w");
	if (!out) {
		perror("fopen");
		return 1;
	}
	double start = now_us();
	double deadline = start + (crr ? atof(argv[4]) : 60.0) * 1e6;
	long max = atol(argv[crr ? 5 : 4]);
	long attempts = 0, errors = 0;
	while (attempts < max && now_us() < deadline) {
		double a, b;
		attempts++;
		if (crr ? crr_once(&to, &a, &b) : udp_once(&to, &a)) {
			errors++;
			continue;
		}
		if (crr)
			fprintf(out, "%.1f %.1f\n", a, b);
		else
			fprintf(out, "%.1f\n", a);
	}
	fclose(out);
	printf("{\"attempts\":%ld,\"errors\":%ld,\"elapsedUs\":%.0f}\n", attempts, errors,
	       now_us() - start);
	return 0;
}
