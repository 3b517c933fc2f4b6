// Load generator for the benchmark, run inside the client pod's namespace.
//   loadgen crr IPS PORT SECONDS MAX_CONNS OUT [RATE]
//       new TCP connection per request (TCP_CRR-like): connect, one HTTP/1.1 request, read the
//       reply, close with RST (no TIME_WAIT on either side, so ports can be reused). RATE > 0
//       paces the connections at RATE per second (a fixed offered load, for CPU per connection);
//       absent or 0, as fast as they complete.
//   loadgen udp IPS PORT COUNT OUT
//       a new UDP socket (fresh source port) per probe: one datagram, wait for the echo.
// IPS is one address or a comma-separated list of them, taken in turn: a Service's ClusterIP, or
// (the bench's "direct" mode) its backend pods' own addresses, so the client spreads its
// connections over the same backends as the proxy would. IPv4 or IPv6 (the sockets are of each
// address's family).
// OUT gets one line per attempt: "<first-packet us> <whole request us>" (crr) or "<rtt us>" (udp);
// failures are counted, not written. stdout: {"attempts":..,"errors":..,"elapsedUs":..}.
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

// One address of the list, with the port; returns 0 on success.
static int parse_target(const char *ip, int port, struct target *to) {
	struct sockaddr_in *to4 = (struct sockaddr_in *)&to->addr;
	struct sockaddr_in6 *to6 = (struct sockaddr_in6 *)&to->addr;
	memset(to, 0, sizeof(*to));
	if (inet_pton(AF_INET, ip, &to4->sin_addr) == 1) {
		to4->sin_family = to->family = AF_INET;
		to4->sin_port = htons(port);
		to->len = sizeof(*to4);
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &to6->sin6_addr) == 1) {
		to6->sin6_family = to->family = AF_INET6;
		to6->sin6_port = htons(port);
		to->len = sizeof(*to6);
		return 0;
	}
	fprintf(stderr, "bad address %s\n", ip);
	return -1;
}

#define MAX_TARGETS 64

// Sleeps until `at` (monotonic microseconds), if it is still ahead.
static void sleep_until_us(double at) {
	double wait = at - now_us();
	if (wait <= 0)
		return;
	struct timespec ts = {.tv_sec = (time_t)(wait / 1e6),
			      .tv_nsec = (long)((wait - (time_t)(wait / 1e6) * 1e6) * 1e3)};
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
	int crr = (argc == 7 || argc == 8) && strcmp(argv[1], "crr") == 0;
	int udp = argc == 6 && strcmp(argv[1], "udp") == 0;
	if (!crr && !udp) {
		fprintf(stderr,
			"usage: %s crr IPS PORT SECONDS MAX_CONNS OUT [RATE] | udp IPS PORT COUNT "
			"OUT\n",
			argv[0]);
		return 2;
	}
	struct target targets[MAX_TARGETS];
	int count = 0;
	char *list = strdup(argv[2]);
	for (char *save = NULL, *ip = strtok_r(list, ",", &save); ip;
	     ip = strtok_r(NULL, ",", &save)) {
		if (count == MAX_TARGETS || parse_target(ip, atoi(argv[3]), &targets[count]))
			return 2;
		count++;
	}
	free(list);
	if (count == 0)
		return 2;
	double rate = crr && argc == 8 ? atof(argv[7]) : 0;
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
		// Paced: attempt k starts at start + k / RATE (late ones start at once, none is
		// skipped).
		if (rate > 0)
			sleep_until_us(start + attempts * 1e6 / rate);
		const struct target *to = &targets[attempts % count];
		attempts++;
		if (crr ? crr_once(to, &a, &b) : udp_once(to, &a)) {
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
