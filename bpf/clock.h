/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The programs' clock: CLOCK_MONOTONIC nanoseconds, what conntrack and affinity ages are kept in
 * (docs/bpf-datapath.md, "Maps", and "The clock read once a tick" under "Performance").
 */
#ifndef KBP_CLOCK_H
#define KBP_CLOCK_H

#include <linux/types.h>

#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "rodata.h"

/*
 * Now. The coarse clock (bpf_ktime_get_coarse_ns) only moves when the timekeeper advances it, at a
 * tick, when jiffies moves too; so each CPU keeps the last value it read beside the jiffies it
 * read it at (kbp_clock_v1), and reads the clock again only when jiffies has moved. The value is
 * then up to two ticks behind instead of one: jiffies is advanced just before the clock, and a
 * read between the two keeps the old time for that tick. bpf_jiffies64 (5.5) is a load where the
 * coarse clock is a seqcount loop and a timespec conversion, the costliest helper of a tracked
 * packet. The 5.10 clock (kbp_coarse_clock 0, bpf_ktime_get_ns) is read every time, as before.
 */
static __always_inline __u64 kbp_now(void) {
	__u32 zero = 0;
	struct kbp_clock *c;
	__u64 jiffies, now;

	if (!kbp_coarse_clock)
		return bpf_ktime_get_ns();
	jiffies = bpf_jiffies64();
	c = bpf_map_lookup_elem(&kbp_clock_v1, &zero);
	if (c && c->jiffies == jiffies) {
		/* The time is read after the jiffies it goes with (see the stores below). */
		asm volatile("" ::: "memory");
		return c->ns;
	}
	now = bpf_ktime_get_coarse_ns();
	if (c) {
		/* The time first, then the jiffies that vouch for it: a program that interrupts
		 * this one on the same CPU (a tc program's softirq over a socket hook in process
		 * context) and finds the new jiffies finds their time, never an older one. */
		c->ns = now;
		asm volatile("" ::: "memory");
		c->jiffies = jiffies;
	}
	return now;
}

#endif /* KBP_CLOCK_H */
