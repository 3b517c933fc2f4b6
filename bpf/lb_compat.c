// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * bpf/lb.o for kernels without bpf_loop (before 5.17, down to the 5.10 floor): the same programs,
 * with the SNAT port search unrolled (KBP_SNAT_PORT_TRIES_COMPAT candidates) instead of run by
 * bpf_loop. A kernel that rejects an unknown helper or a callback rejects the whole object, even
 * where the call could never run, hence a second object rather than a load-time switch. The
 * agent picks it when the bpf_loop probe fails (object.ts, defaultObjectPath).
 */
#define KBP_NO_BPF_LOOP 1
#include "lb.c"
