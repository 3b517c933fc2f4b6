// The pause process of the real cluster's pod sandboxes, the image registry.k8s.io/pause:3.10.2
// that scripts/install-cluster.sh builds (statically linked, alone in its image). It holds the
// pod's namespaces open, so it only sleeps; as PID 1 of a pod that shares its PID namespace it
// reaps the orphans handed to it; it exits 0 on SIGTERM or SIGINT, as the runtime stops a sandbox.
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void reap(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

static void stop(int sig) {
	(void)sig;
	_exit(0);
}

int main(void) {
	struct sigaction on_stop = {.sa_handler = stop};
	struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
	if (sigaction(SIGTERM, &on_stop, NULL) < 0 || sigaction(SIGINT, &on_stop, NULL) < 0 ||
	    sigaction(SIGCHLD, &on_child, NULL) < 0)
		return 1;
	for (;;)
		pause();
}
