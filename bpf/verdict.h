/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the shared code tells a program to do with a packet. */
#ifndef KBP_VERDICT_H
#define KBP_VERDICT_H

enum kbp_verdict {
	KBP_PASS = 0,	  /* continue to the stack (rewritten or not) */
	KBP_DROP = 1,	  /* drop, reason counted */
	KBP_REJECT = 2,	  /* answer with ICMP port unreachable (tc), or leave it to tc (XDP) */
	KBP_REDIRECT = 3, /* tc: rewritten and addressed, send out of the FIB's interface */
	KBP_REDIRECT_NEIGH = 4, /* tc: rewritten, the kernel resolves the next hop's MAC */
	KBP_TX = 5,		/* XDP: rewritten and addressed, back out of the same interface */
	KBP_FRAG_NEEDED = 6,	/* tc: too big for the route and DF set: answer ICMP frag needed */
	KBP_REDIRECT_PEER = 7,	/* tc: rewritten and addressed, into the pod behind the veth */
};

#endif /* KBP_VERDICT_H */
